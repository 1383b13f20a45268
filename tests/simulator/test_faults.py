"""Each injected fault moves the signals its real cause moves, and no others.

Two servers share a steady load; ``sim-0`` gets the fault from 100 s to 200 s, ``sim-1`` is the
control. Signals before the fault (20–100 s) are compared with signals during it (120–200 s).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from infersight.simulator.faults import Fault, FaultKind
from tests.simulator.support import Run, RunFn, median

BEFORE = (20.0, 100.0)
DURING = (120.0, 200.0)
RATE = 8.0


def signals(run: Run, instance: str, window: tuple[float, float]) -> dict[str, float]:
    lo, hi = window
    records = run.records(instance, lo, hi)
    server = run.server(instance, lo, hi)
    gpu = [g for g in run.gpu(instance, lo, hi) if g.gpu_index == 0]
    return {
        "rate": len(records) / (hi - lo),
        "input": median([r.input_tokens for r in records]),
        "preprocess": median([r.preprocess_s for r in records]),
        "queue": median([r.queue_s for r in records]),
        "prefill": median([r.prefill_s for r in records]),
        "tpot": median([r.tpot_s for r in records]),
        "ttft": median([r.ttft_s for r in records]),
        "waiting": float(np.mean([s.requests_waiting for s in server])),
        "preemptions": server[-1].preemptions_total - server[0].preemptions_total,
        "util": float(np.mean([g.util_gpu for g in gpu])),
        "clock": float(np.mean([g.sm_clock_mhz for g in gpu])),
        "temperature": float(np.mean([g.temperature_c for g in gpu])),
        "throttled": float(any(g.throttled for g in gpu)),
        "ecc": (gpu[-1].ecc_sbe_total or 0.0) - (gpu[0].ecc_sbe_total or 0.0),
    }


@dataclass(frozen=True)
class Case:
    kind: FaultKind
    magnitude: float
    up: tuple[str, ...]
    down: tuple[str, ...]
    unmoved: tuple[str, ...]


RATIO_SIGNALS = ("rate", "input", "preprocess", "queue", "prefill", "tpot", "ttft", "util")
RATIO_SIGNALS += ("clock", "temperature", "waiting")
COUNT_SIGNALS = ("preemptions", "throttled", "ecc")

CASES = [
    Case(
        FaultKind.ARRIVAL_SURGE,
        4.0,
        up=("rate", "queue", "waiting", "ttft"),
        down=(),
        unmoved=("input", "clock", "throttled", "ecc", "preemptions"),
    ),
    Case(
        FaultKind.SLOW_TOKENIZER,
        40.0,
        up=("preprocess", "ttft"),
        down=(),
        unmoved=("rate", "input", "tpot", "prefill", "clock", "util", "throttled", "ecc"),
    ),
    Case(
        FaultKind.LONG_PROMPT_FLOOD,
        8.0,
        up=("input", "prefill", "ttft"),
        down=(),
        unmoved=("rate", "clock", "throttled", "ecc"),
    ),
    Case(
        FaultKind.THERMAL_THROTTLE,
        0.55,
        up=("tpot", "temperature", "throttled"),
        down=("clock",),
        unmoved=("rate", "input", "preprocess", "ecc", "preemptions"),
    ),
    Case(
        FaultKind.KV_PRESSURE,
        0.01,
        up=("preemptions",),
        down=(),
        unmoved=("rate", "input", "preprocess", "clock", "throttled", "ecc"),
    ),
    Case(
        FaultKind.DEGRADED_INSTANCE,
        1.8,
        up=("tpot", "ecc"),
        down=(),
        unmoved=("rate", "input", "preprocess", "clock", "throttled", "preemptions"),
    ),
    Case(
        FaultKind.CPU_STARVED,
        25.0,
        up=("preprocess", "queue", "tpot"),
        down=("util",),
        unmoved=("rate", "input", "clock", "throttled", "ecc", "preemptions"),
    ),
]


def moved_up(name: str, before: float, during: float) -> bool:
    if name in COUNT_SIGNALS:
        return during > before
    if name == "temperature":
        return during > before + 10.0
    return during > 1.5 * before


def moved_down(name: str, before: float, during: float) -> bool:
    return during < 0.67 * before


def unmoved(name: str, before: float, during: float) -> bool:
    if name in COUNT_SIGNALS:
        return during == before
    return during == pytest.approx(before, rel=0.25)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.kind.value)
def test_a_fault_moves_its_signals_and_no_others(run_fleet: RunFn, case: Case) -> None:
    fault = Fault(case.kind, "sim-0", 100.0, 200.0, case.magnitude)
    run = run_fleet(RATE, 320.0, instances=2, faults=[fault], sample_interval=2.0)
    before, during = signals(run, "sim-0", BEFORE), signals(run, "sim-0", DURING)
    for name in case.up:
        assert moved_up(name, before[name], during[name]), (name, before[name], during[name])
    for name in case.down:
        assert moved_down(name, before[name], during[name]), (name, before[name], during[name])
    for name in case.unmoved:
        assert unmoved(name, before[name], during[name]), (name, before[name], during[name])
    # The control server sees nothing.
    control_before, control_during = signals(run, "sim-1", BEFORE), signals(run, "sim-1", DURING)
    for name in ("rate", "input", "preprocess", "tpot", "clock", "throttled", "ecc"):
        assert unmoved(name, control_before[name], control_during[name]), name
    # Ground truth says what was injected, where and when.
    (truth,) = run.result.ground_truth
    assert (truth.kind, truth.instance) == (case.kind, "sim-0")
    assert (truth.end - truth.start).total_seconds() == 100.0


def test_before_and_after_a_fault_the_server_is_the_same(run_fleet: RunFn) -> None:
    fault = Fault(FaultKind.THERMAL_THROTTLE, "sim-0", 100.0, 200.0, 0.55)
    run = run_fleet(RATE, 320.0, faults=[fault], sample_interval=2.0)
    before, after = signals(run, "sim-0", BEFORE), signals(run, "sim-0", (240.0, 300.0))
    for name in ("tpot", "clock", "throttled", "temperature"):
        assert unmoved(name, before[name], after[name]), name
