"""The knee of a step run: the concurrency past which throughput flattens and latency climbs.

Each level of a step run gives a point (concurrency, throughput, latency). Below the knee an
added concurrent user adds throughput almost one for one; past it the server's batch is full,
so the extra users only queue: throughput stays flat and latency grows with the queue.

The detection is Kneedle (Satopää et al., 2011) on the throughput curve: scale concurrency and
throughput to [0, 1] over the tested range and take the point furthest above the diagonal (a
concave curve's maximum-curvature point). A curve that is still nearly a straight line has no
knee in the range tested (``None``): the server was not pushed far enough.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from infersight.core.errors import InvalidInput

#: Below this distance from the diagonal the throughput curve counts as a straight line.
MIN_BEND: Final = 0.1
MIN_LEVELS: Final = 3


@dataclass(frozen=True, slots=True)
class LevelPoint:
    """One held level: its concurrency, completed requests per second and typical latency."""

    concurrency: float
    throughput_rps: float
    latency_s: float

    def __post_init__(self) -> None:
        for name in ("concurrency", "throughput_rps", "latency_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidInput(f"a level's {name} must be a finite number ≥ 0")


@dataclass(frozen=True, slots=True)
class Knee:
    concurrency: float
    throughput_rps: float
    latency_s: float
    #: Distance above the diagonal in the normalised plot, in (MIN_BEND, 1].
    bend: float
    #: Latency growth past the knee: latency at the last level ÷ latency at the knee.
    latency_growth: float


def find_knee(points: Sequence[LevelPoint], *, min_bend: float = MIN_BEND) -> Knee | None:
    """The knee of ``points`` (any order; one point per concurrency), or ``None``."""
    ordered = sorted(points, key=lambda p: p.concurrency)
    if len(ordered) < MIN_LEVELS:
        raise InvalidInput(f"finding a knee needs at least {MIN_LEVELS} levels")
    if len({p.concurrency for p in ordered}) != len(ordered):
        raise InvalidInput("each level of a step run needs its own concurrency")
    x0, x1 = ordered[0].concurrency, ordered[-1].concurrency
    y0 = ordered[0].throughput_rps
    y1 = max(p.throughput_rps for p in ordered)
    if y1 <= y0:  # throughput never rose: saturated from the first level on
        return None
    bends = [
        (p.throughput_rps - y0) / (y1 - y0) - (p.concurrency - x0) / (x1 - x0) for p in ordered
    ]
    best = max(range(len(ordered)), key=bends.__getitem__)
    if bends[best] < min_bend:
        return None
    knee = ordered[best]
    growth = ordered[-1].latency_s / knee.latency_s if knee.latency_s > 0 else math.inf
    return Knee(knee.concurrency, knee.throughput_rps, knee.latency_s, bends[best], growth)
