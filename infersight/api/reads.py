"""Read routing (issue 19): read-only answers from a hot standby, each saying how stale it is.

With ``INFERSIGHT_DATABASE_READ_URL`` set (``infersight serve`` opens its store with
``service.store.open_read_store``), the rollup-served GET answers (latency, throughput,
cost) and the dashboard's pages read the standby's store; writes,
the scheduled jobs, auth, SLO status and every other route stay on the primary. Without it,
everything reads the primary and the answers still say how old they are.

``read_answer`` serves one such answer through the app's short-lived answer cache
(``api.answers``, keyed by path, query string and the clock rounded to the TTL), so 64 clients
asking the same "last 30 days" cost one query every TTL, not 64. Each answer states its
staleness — an upper bound on how much older than "now" the newest data it could include is:
the standby's lag when it was computed (``storage.replica.standby_lag``; 0 on the primary)
plus its age in the cache. The JSON gets ``as_of`` (the app clock's time its data is current
to) and ``staleness_s`` (``null`` when the standby cannot tell); the response gets the header
``X-Infersight-Staleness`` (seconds, or ``unknown``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from fastapi import Request, Response
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from infersight.api.context import AppContext
from infersight.core.timestamps import iso
from infersight.storage.replica import standby_lag

log = logging.getLogger(__name__)

HEADER: Final = "X-Infersight-Staleness"


@dataclass(frozen=True, slots=True)
class Stamped:
    """An answer with what is known of its data's age when it was computed."""

    value: Any
    as_of: datetime | None
    lag_s: float | None
    computed_at: float
    """``time.monotonic()`` when it was computed."""

    def staleness_s(self, monotonic: float) -> float | None:
        if self.lag_s is None:
            return None
        return self.lag_s + max(0.0, monotonic - self.computed_at)


def reader(app: AppContext) -> AppContext:
    """``app`` with its store the one reads go to (the standby's, when one is configured)."""
    if app.read_store is None or app.read_engine is None:
        return app
    return dataclasses.replace(app, store=app.read_store, engine=app.read_engine)


def lag_of(
    primary: Engine, standby: Engine | None, now: datetime
) -> tuple[float | None, datetime | None]:
    """(lag in seconds, the time the data is current to) of reads from ``standby``; a primary
    is current. A primary out of reach leaves the standby's lag unknown (``None``)."""
    if standby is None:
        return 0.0, now
    try:
        lag = standby_lag(primary, standby)
    except DBAPIError as exc:
        log.warning("standby lag unknown: %s", type(exc).__name__)
        return None, None
    if lag.staleness_s is None:
        return None, None
    return lag.staleness_s, now - timedelta(seconds=lag.staleness_s)


def stamped(app: AppContext, now: datetime, compute: Callable[[AppContext], Any]) -> Stamped:
    """``compute`` on the reading context, stamped. The lag is read before the query runs, so
    the data is at least as fresh as it says."""
    lag_s, as_of = lag_of(app.engine, app.read_engine, now)
    started = time.monotonic()
    # A memo of its own: what the answer's parts share is read once for it (the cost model).
    answering = dataclasses.replace(reader(app), answer_memo={})
    return Stamped(compute(answering), as_of, lag_s, started)


def stamp_response(response: Response, staleness_s: float | None) -> None:
    response.headers[HEADER] = "unknown" if staleness_s is None else f"{staleness_s:.3f}"


def read_answer(
    app: AppContext,
    request: Request,
    response: Response,
    compute: Callable[[AppContext], dict[str, Any]],
) -> dict[str, Any]:
    """The JSON answer ``compute`` gives on the reading context, from the answer cache when
    the same path and query were answered in this TTL, with ``as_of`` and ``staleness_s``."""
    now = app.clock()
    query = dict(request.query_params)
    tenants = getattr(request.state, "tenants", None)  # a token limited to tenants (api.auth)
    if tenants is not None:  # its answer is not an unlimited one's, whatever the query
        query["\0tenants"] = "|".join(sorted(tenants))
    key = app.answers.key(request.url.path, query, now)
    answer: Stamped = app.answers.get_or_compute(key, lambda: stamped(app, now, compute))
    staleness = answer.staleness_s(time.monotonic())
    stamp_response(response, staleness)
    return {
        **answer.value,
        "as_of": None if answer.as_of is None else iso(answer.as_of),
        "staleness_s": None if staleness is None else round(staleness, 3),
    }
