"""What a store holds: how many requests (and the span of their start times), incidents and
load-test runs — for a demo, which plays only into a store of its own, and its progress line.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import DBAPIError

from infersight.storage.tables import incidents, loadtest_runs, requests


@dataclass(frozen=True, slots=True)
class StoreContents:
    """Counts of what a store holds."""

    requests: int
    first: datetime | None
    """The earliest request's start (``None``: no requests)."""
    last: datetime | None
    """The latest request's start."""
    incidents: int
    runs: int

    @property
    def empty(self) -> bool:
        return not (self.requests or self.incidents or self.runs)


#: What a store without a schema (a new one) holds.
NOTHING = StoreContents(0, None, None, 0, 0)


def contents(engine: Engine) -> StoreContents:
    """What the store holds (own connection); ``NOTHING`` where it has no schema yet. Any other
    database error (the store locked by another process, say) is raised, never taken for an
    empty store."""
    try:
        with engine.connect() as connection:
            count, first, last = connection.execute(
                select(func.count(), func.min(requests.c.start), func.max(requests.c.start))
            ).one()
            opened = connection.execute(select(func.count()).select_from(incidents)).scalar_one()
            runs = connection.execute(select(func.count()).select_from(loadtest_runs)).scalar_one()
    except DBAPIError as exc:
        text = str(exc.orig)
        if "no such table" in text or "does not exist" in text:
            return NOTHING
        raise
    return StoreContents(int(count), first, last, int(opened), int(runs))


def stored_requests(engine: Engine) -> int:
    """How many request records the store holds (own connection)."""
    with engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(requests)).scalar_one())
