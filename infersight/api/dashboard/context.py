"""What every dashboard page is asked for: a time range, label filters and a refresh interval.

All of it lives in the URL (``?range=6h&model=…&instance=…&tenant=…&refresh=1m``, or
``start``/``end`` for a custom range), so a view can be bookmarked and shared. ``Context``
parses and checks it once and builds the links that keep it while moving between pages.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Final
from urllib.parse import urlencode

from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.timestamps import iso, parse_time
from infersight.core.window import Resolution, Window

RANGES: Final = {
    "15m": timedelta(minutes=15),
    "1h": timedelta(hours=1),
    "6h": timedelta(hours=6),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}
REFRESH: Final = {"off": 0, "30s": 30, "1m": 60, "5m": 300}
#: The filter bar's labels; team and workload come from the trace's attribution (#34).
FILTERS: Final = ("model", "instance", "tenant", "adapter", "team", "workload")
DEFAULT_RANGE: Final = "1h"
#: GPU chart buckets: about this many points per chart, on round step lengths.
GPU_POINTS: Final = 120
_GPU_STEPS: Final = (10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200)


@dataclass(frozen=True, slots=True)
class Context:
    """One page request's range, filters and refresh, checked."""

    window: Window
    now: datetime
    range_key: str
    """A ``RANGES`` key, or ``custom`` for explicit start/end."""
    filters: Mapping[str, str] = field(default_factory=dict)
    refresh: str = "off"
    extra: Mapping[str, str] = field(default_factory=dict)
    """Page-specific parameters kept in links (e.g. the latency quantile)."""
    default_range: str = DEFAULT_RANGE
    """The page's range when the URL names none (left out of links)."""
    tenants: frozenset[str] | None = None
    """The viewer's token is limited to these tenants (``api.auth``): every figure is theirs."""

    @property
    def selector(self) -> Selector:
        return Selector(**self.filters).within(self.tenants)

    @property
    def refresh_s(self) -> int:
        return REFRESH[self.refresh]

    @property
    def step(self) -> Resolution:
        """Rollup resolution of one chart point: minutes up to 3 h, hours up to 8 days."""
        span = self.window.end - self.window.start
        if span <= timedelta(hours=3):
            return Resolution.MINUTE
        if span <= timedelta(days=8):
            return Resolution.HOUR
        return Resolution.DAY

    @property
    def gpu_step_s(self) -> int:
        wanted = self.window.seconds / GPU_POINTS
        return next((s for s in _GPU_STEPS if s >= wanted), 86400)

    def params(self, **overrides: str | None) -> dict[str, str]:
        """The query parameters of this view, with ``overrides`` (``None`` removes one)."""
        out: dict[str, str] = {}
        if self.range_key == "custom":
            out["start"], out["end"] = iso(self.window.start), iso(self.window.end)
        elif self.range_key != self.default_range:
            out["range"] = self.range_key
        out.update(self.filters)
        if self.refresh != "off":
            out["refresh"] = self.refresh
        out.update(self.extra)
        for name, value in overrides.items():
            if value is None or value == "":
                out.pop(name, None)
            else:
                out[name] = value
        if "range" in overrides:
            out.pop("start", None)
            out.pop("end", None)
            if out.get("range") == self.default_range:
                del out["range"]
        return out

    def query(self, **overrides: str | None) -> str:
        """``?…`` for a link to this view (with ``overrides``), or ``""``."""
        params = self.params(**overrides)
        return "?" + urlencode(params) if params else ""

    def nav_query(self) -> str:
        """``?…`` keeping the range, filters and refresh but not this page's own parameters."""
        return self.query(**dict.fromkeys(self.extra))

    def with_extra(self, **extra: str) -> Context:
        return replace(self, extra={**self.extra, **extra})


def parse_context(
    query: Mapping[str, str], now: datetime, max_days: int, default_range: str = DEFAULT_RANGE
) -> Context:
    """Check a page's query string; ``InvalidInput`` names the parameter that is wrong."""
    filters = {}
    for name in FILTERS:
        value = query.get(name, "").strip()
        if value:
            filters[name] = value
    Selector(**filters)  # length limits
    refresh = query.get("refresh", "off") or "off"
    if refresh not in REFRESH:
        raise InvalidInput("unknown refresh interval", details={"allowed": list(REFRESH)})
    start, end = query.get("start", "").strip(), query.get("end", "").strip()
    if start or end:
        if not (start and end):
            raise InvalidInput("a custom range needs both start and end")
        window = Window(parse_time("start", start), parse_time("end", end))
        range_key = "custom"
    else:
        range_key = query.get("range", default_range) or default_range
        if range_key not in RANGES:
            raise InvalidInput("unknown time range", details={"allowed": list(RANGES)})
        window = Window.last(RANGES[range_key], now)
    if window.end - window.start > timedelta(days=max_days):
        raise InvalidInput(f"a range covers at most {max_days} days")
    return Context(window, now, range_key, filters, refresh, default_range=default_range)


def parse_quantile(text: str, default: float = 0.99) -> float:
    """A latency quantile from the URL (``0.99`` or ``p99``)."""
    text = (text or "").strip().lower()
    if not text:
        return default
    percentile = text.startswith("p")
    try:
        value = float(text.removeprefix("p"))
    except ValueError:
        raise InvalidInput("q must be a quantile such as 0.99 or p99") from None
    if percentile or value >= 1.0:  # 99 and p99.9 are percentiles; 0.99 is a fraction
        value /= 100.0
    if not math.isfinite(value) or not 0.0 < value < 1.0:
        raise InvalidInput("q must be between 0 and 1 (or a percentile below 100)")
    return value
