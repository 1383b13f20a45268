"""Scenarios as phases of fixed concurrency (closed-loop users), per the load-test method.

* **steady**: ``concurrency`` users for ``duration`` — the baseline run.
* **step**: each of ``levels`` held for ``hold`` seconds, rising — finds the knee.
* **burst**: ``concurrency`` users, then ``multiplier`` (2–3) × as many for ``burst`` seconds,
  then back — how a server absorbs and recovers from a surge.
* **long-tail**: steady, with a workload in which a few requests have very long outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.loadtest import MAX_PHASES, Phase, ScenarioKind

MAX_CONCURRENCY: Final = 10_000
MAX_DURATION_S: Final = 7 * 24 * 3600.0


def _check(concurrency: int, seconds: float) -> None:
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise InvalidInput(f"concurrency must be in [1, {MAX_CONCURRENCY}]")
    if not 0 < seconds <= MAX_DURATION_S:
        raise InvalidInput("a phase lasts more than 0 s and at most a week")


def steady(concurrency: int, duration_s: float, label: str = "steady") -> tuple[Phase, ...]:
    _check(concurrency, duration_s)
    return (Phase(0, label, concurrency, 0.0, duration_s),)


def step(levels: Sequence[int], hold_s: float) -> tuple[Phase, ...]:
    if not 1 <= len(levels) <= MAX_PHASES:
        raise InvalidInput(f"a step run has between 1 and {MAX_PHASES} levels")
    if list(levels) != sorted(set(levels)):
        raise InvalidInput("step levels must rise strictly", details={"levels": list(levels)})
    phases = []
    for i, c in enumerate(levels):
        _check(c, hold_s)
        phases.append(Phase(i, f"{c} users", c, i * hold_s, hold_s))
    return tuple(phases)


def burst(
    concurrency: int, multiplier: float, before_s: float, burst_s: float, after_s: float
) -> tuple[Phase, ...]:
    if not 1 < multiplier <= 10:
        raise InvalidInput("a burst multiplies the concurrency by more than 1 and at most 10")
    peak = max(concurrency + 1, round(concurrency * multiplier))
    for c, s in ((concurrency, before_s), (peak, burst_s), (concurrency, after_s)):
        _check(c, s)
    return (
        Phase(0, "before", concurrency, 0.0, before_s),
        Phase(1, "burst", peak, before_s, burst_s),
        Phase(2, "after", concurrency, before_s + burst_s, after_s),
    )


def phases_for(
    kind: ScenarioKind,
    *,
    concurrency: int,
    duration_s: float,
    levels: Sequence[int] = (),
    hold_s: float = 0.0,
    multiplier: float = 2.5,
    burst_s: float = 90.0,
) -> tuple[Phase, ...]:
    """The phases of ``kind``; a burst splits ``duration_s`` evenly before and after."""
    match kind:
        case ScenarioKind.STEP:
            return step(levels, hold_s)
        case ScenarioKind.BURST:
            return burst(concurrency, multiplier, duration_s / 2, burst_s, duration_s / 2)
        case ScenarioKind.LONG_TAIL:
            return steady(concurrency, duration_s, "long-tail")
        case _:
            return steady(concurrency, duration_s)
