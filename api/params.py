"""Query-string parsing shared by the query routes: times, windows, selectors, grouping.

Times are RFC 3339 (``2026-11-30T10:00:00Z``) or Unix seconds; ``start``/``end`` default to the
hour that ends now. Everything invalid raises ``InvalidInput`` with the parameter named.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Final

import annotated_types
from fastapi import Query

from api.deps import App
from api.errors import described
from core.errors import InvalidInput
from core.query import Selector, check_group_by
from core.records import MAX_LABEL_LEN
from core.timestamps import TIME_HELP, TIME_REGEX, parse_time
from core.window import Window

DEFAULT_SPAN = timedelta(hours=1)

#: The largest id a stored row can have: the store's ids are 32-bit integers (PostgreSQL INTEGER).
MAX_ID: Final = 2**31 - 1
#: A stored row's id in a path or query parameter. Bounded so that a larger number is refused
#: as invalid input (400) instead of overflowing the store's integer type (a 500).
Id = Annotated[int, annotated_types.Interval(ge=1, le=MAX_ID)]


#: What ``parse_time`` accepts, as the OpenAPI document states it.
TIME_PATTERN: Final = described(
    TIME_REGEX, "RFC 3339 with a time zone (2026-11-30T10:00:00Z) or Unix seconds"
)


_LABEL = "(?:model|instance|tenant|priority)"
#: ``group_by``: comma-separated label names (or nothing).
GROUP_BY_PATTERN: Final = described(
    rf"^\s*(?:{_LABEL}\s*(?:,\s*{_LABEL}\s*){{0,3}})?$",
    "comma-separated labels: model, instance, tenant, priority (cannot group by others)",
)
#: Longest label value a selector takes (``core.query.Selector``'s limit).
MAX_LABEL: Final = MAX_LABEL_LEN
#: Rules between parameters that no JSON Schema states; said in each operation's description.
WINDOW_RULES: Final = (
    "start must be before end, and a window covers at most max_query_days (400 by default); "
    "a request that breaks either is answered 400."
)


@dataclass(frozen=True, slots=True)
class Common:
    """What every query route takes: a window, a selector and the labels to group by."""

    window: Window
    selector: Selector
    group_by: tuple[str, ...]
    now: datetime


def common(
    app: App,
    start: str | None = Query(
        None, pattern=TIME_PATTERN, description=f"{TIME_HELP} (default: end − 1 h)"
    ),
    end: str | None = Query(None, pattern=TIME_PATTERN, description=f"{TIME_HELP} (default: now)"),
    model: str | None = Query(None, max_length=MAX_LABEL),
    instance: str | None = Query(None, max_length=MAX_LABEL),
    tenant: str | None = Query(None, max_length=MAX_LABEL),
    priority: str | None = Query(None, max_length=MAX_LABEL),
    group_by: str = Query(
        "",
        pattern=GROUP_BY_PATTERN,
        description="comma-separated: model, instance, tenant, priority",
    ),
) -> Common:
    now = app.clock()
    end_ts = parse_time("end", end) if end else now
    start_ts = parse_time("start", start) if start else end_ts - DEFAULT_SPAN
    window = Window(start_ts, end_ts)
    max_days = app.settings.max_query_days
    if window.end - window.start > timedelta(days=max_days):
        raise InvalidInput(
            f"a query covers at most {max_days} days", details={"max_query_days": max_days}
        )
    selector = Selector(model=model, instance=instance, tenant=tenant, priority=priority)
    groups = check_group_by(p.strip() for p in group_by.split(",") if p.strip())
    return Common(window, selector, groups, now)
