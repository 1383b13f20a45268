"""Time windows and how a window splits into rollup buckets.

A long window is answered from rollups: whole UTC days from day rollups, whole hours at the
edges from hour rollups, whole minutes from minute rollups, and the partial minutes at the two
ends from raw rows. ``split`` computes that plan; it covers the window exactly, with no gap
and no overlap (a property test holds it to that).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Final

from infersight.core.errors import InvalidInput

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class Resolution(StrEnum):
    """A rollup bucket width; the value is what the store keeps in its ``resolution`` column."""

    MINUTE = "1m"
    HOUR = "1h"
    DAY = "1d"

    @property
    def seconds(self) -> int:
        return _SECONDS[self]

    def floor(self, ts: datetime) -> datetime:
        """The start of the bucket that contains ``ts``."""
        step = self.seconds
        offset = int((ts - _EPOCH).total_seconds() // step) * step
        return _EPOCH + timedelta(seconds=offset)

    def ceil(self, ts: datetime) -> datetime:
        """The first bucket start at or after ``ts``."""
        floor = self.floor(ts)
        return floor if floor == ts else floor + timedelta(seconds=self.seconds)


_SECONDS: Final = {Resolution.MINUTE: 60, Resolution.HOUR: 3600, Resolution.DAY: 86400}
#: Coarsest first: how ``split`` prefers to cover a window.
RESOLUTIONS_COARSE_FIRST: Final = (Resolution.DAY, Resolution.HOUR, Resolution.MINUTE)


@dataclass(frozen=True, slots=True)
class Window:
    """A half-open time range ``[start, end)`` in UTC."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            value = getattr(self, name)
            if value.tzinfo is None or value.utcoffset() is None:
                raise InvalidInput(f"window {name} must be timezone-aware")
            object.__setattr__(self, name, value.astimezone(UTC))
        if self.end <= self.start:
            raise InvalidInput(
                "window end must be after its start",
                details={"start": self.start.isoformat(), "end": self.end.isoformat()},
            )

    @classmethod
    def last(cls, duration: timedelta, now: datetime) -> Window:
        """The ``duration`` that ends at ``now``."""
        return cls(now - duration, now)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def __contains__(self, ts: datetime) -> bool:
        return self.start <= ts < self.end

    def preceding(self) -> Window:
        """The window of the same length that ends where this one starts (a reference period)."""
        return Window(self.start - (self.end - self.start), self.start)


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of a window: served from rollups at ``resolution``, or raw rows when ``None``."""

    start: datetime
    end: datetime
    resolution: Resolution | None

    @property
    def raw(self) -> bool:
        return self.resolution is None


def split(window: Window, finest: Resolution = Resolution.MINUTE) -> list[Segment]:
    """Cover ``window`` with raw edges and the coarsest rollup buckets that fit inside it.

    ``finest`` bounds how fine the rollups used may be: a store that keeps minute rollups only
    for recent days passes ``Resolution.HOUR`` for older windows.
    """
    levels = RESOLUTIONS_COARSE_FIRST[: RESOLUTIONS_COARSE_FIRST.index(finest) + 1]
    aligned_start = finest.ceil(window.start)
    aligned_end = finest.floor(window.end)
    if aligned_start >= aligned_end:
        return [Segment(window.start, window.end, None)]
    segments: list[Segment] = []
    if window.start < aligned_start:
        segments.append(Segment(window.start, aligned_start, None))
    segments.extend(_cover(aligned_start, aligned_end, levels))
    if aligned_end < window.end:
        segments.append(Segment(aligned_end, window.end, None))
    return segments


def _cover(start: datetime, end: datetime, levels: tuple[Resolution, ...]) -> list[Segment]:
    """Cover an interval aligned to ``levels[-1]`` with as few buckets as possible."""
    if start >= end:
        return []
    level, rest = levels[0], levels[1:]
    inner_start, inner_end = level.ceil(start), level.floor(end)
    if not rest:
        return [Segment(start, end, level)]
    if inner_start >= inner_end:
        return _cover(start, end, rest)
    return [
        *_cover(start, inner_start, rest),
        Segment(inner_start, inner_end, level),
        *_cover(inner_end, end, rest),
    ]


def parse_duration(text: str) -> timedelta:
    """Parse ``30s``, ``5m``, ``1h``, ``28d``, ``2w`` into a timedelta."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip()
    if len(text) < 2 or text[-1] not in units or not text[:-1].isdigit():
        raise InvalidInput(
            f"not a duration: {text!r} (expected a whole number and one of s, m, h, d, w)"
        )
    value = int(text[:-1])
    if value <= 0:
        raise InvalidInput(f"duration must be positive: {text!r}")
    return timedelta(seconds=value * units[text[-1]])


def format_duration(delta: timedelta) -> str:
    """The shortest exact ``parse_duration`` spelling of ``delta``."""
    seconds = int(delta.total_seconds())
    for suffix, size in (("w", 604800), ("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{suffix}"
    return f"{seconds}s"
