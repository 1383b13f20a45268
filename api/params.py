"""Query-string parsing shared by the query routes: times, windows, selectors, grouping.

Times are RFC 3339 (``2026-11-30T10:00:00Z``) or Unix seconds; ``start``/``end`` default to the
hour that ends now. Everything invalid raises ``InvalidInput`` with the parameter named.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from fastapi import Query, Request

from core.errors import InvalidInput
from core.query import Selector, check_group_by
from core.window import Window

Clock = Callable[[], datetime]
DEFAULT_SPAN = timedelta(hours=1)


def parse_time(name: str, text: str) -> datetime:
    text = text.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or not 0 <= seconds < 7_258_118_400:  # before 2200
            raise InvalidInput(f"{name} is out of range", details={name: text})
        return datetime.fromtimestamp(seconds, UTC)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{name} must be RFC 3339 or Unix seconds", details={name: text[:64]}
        ) from None
    if value.tzinfo is None:
        raise InvalidInput(f"{name} needs a time zone (e.g. 'Z')", details={name: text[:64]})
    return value.astimezone(UTC)


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Common:
    """What every query route takes: a window, a selector and the labels to group by."""

    window: Window
    selector: Selector
    group_by: tuple[str, ...]
    now: datetime


def common(
    request: Request,
    start: str | None = Query(None, description="RFC 3339 or Unix seconds (default: end − 1 h)"),
    end: str | None = Query(None, description="RFC 3339 or Unix seconds (default: now)"),
    model: str | None = None,
    instance: str | None = None,
    tenant: str | None = None,
    priority: str | None = None,
    group_by: str = Query("", description="comma-separated: model, instance, tenant, priority"),
) -> Common:
    now: datetime = request.app.state.clock()
    end_ts = parse_time("end", end) if end else now
    start_ts = parse_time("start", start) if start else end_ts - DEFAULT_SPAN
    window = Window(start_ts, end_ts)
    max_days: int = request.app.state.settings.max_query_days
    if window.end - window.start > timedelta(days=max_days):
        raise InvalidInput(
            f"a query covers at most {max_days} days", details={"max_query_days": max_days}
        )
    selector = Selector(model=model, instance=instance, tenant=tenant, priority=priority)
    groups = check_group_by(p.strip() for p in group_by.split(",") if p.strip())
    return Common(window, selector, groups, now)
