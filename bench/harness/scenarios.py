"""Shipped scenarios, compressed, into a store and diagnosed: the harness of the diagnosis
benchmark (``bench/bench_alerts.py``) and of the tests that diagnose stored scenarios.

Each scenario is *compressed*: the same fleet, traffic, seed and faults (kind, instance,
magnitude), with the fault moved to ``[10 min, 20 min)`` of a 20-minute run; the reference
window is ``[2 min, 10 min)`` (the first two minutes warm the servers up). The mixed scenario
keeps its first two faults (they overlap in the shipped file). ``evaluate`` reads the signals of
the incident window and of the reference window before it (``storage.signals``), diagnoses
(``alerts.diagnose``) and ``judge``s the diagnosis against the ground truth; without GPU
telemetry the expected causes are the fallbacks of
``simulator.faults.EXPECTED_CAUSE_WITHOUT_GPU``.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import Engine

from infersight.alerts.diagnose import Diagnosis, diagnose
from infersight.alerts.rules import Cause, RulePack, load_rules
from infersight.core.records import Status
from infersight.core.signals import GPU
from infersight.core.window import Window
from infersight.simulator.events import Batch
from infersight.simulator.faults import EXPECTED_CAUSE_WITHOUT_GPU, POOL_FAULTS, FaultKind
from infersight.simulator.fleet import run_scenario
from infersight.simulator.scenario import Scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.sinks.store import StoreSink
from infersight.simulator.specs import load_scenario
from infersight.storage.signals import window_signals
from infersight.storage.tables import metadata
from infersight.storage.writer import open_writer

RUN_S: Final = 1200.0
FAULT_FROM_S: Final = 600.0
REFERENCE_FROM_S: Final = 120.0
#: Mixed scenarios keep this many faults (the first ones, which overlap in the shipped file).
MIXED_FAULTS: Final = 2
#: The signals whose movement each fault kind injects: the evidence must name one of them.
INJECTED_SIGNALS: Final = {
    FaultKind.ARRIVAL_SURGE: frozenset({"request_rate"}),
    FaultKind.SLOW_TOKENIZER: frozenset({"preprocess_mean"}),
    FaultKind.LONG_PROMPT_FLOOD: frozenset({"input_tokens_mean", "slow_input_tokens_p50"}),
    FaultKind.THERMAL_THROTTLE: frozenset({"throttled_share", "sm_clock_mhz"}),
    FaultKind.KV_PRESSURE: frozenset({"preemptions_per_s", "kv_cache_usage"}),
    FaultKind.DEGRADED_INSTANCE: frozenset({"ecc_sbe_per_s"}),
    FaultKind.CPU_STARVED: frozenset({"util_gpu"}),
    FaultKind.SPEC_DECODE_COLLAPSE: frozenset({"spec_accept_length", "spec_acceptance_rate"}),
    FaultKind.KV_TRANSFER_SLOW: frozenset({"kv_transfer_mean"}),
    FaultKind.PREFILL_POOL_OVERLOAD: frozenset({"prefill_mean"}),
    FaultKind.DECODE_POOL_OVERLOAD: frozenset({"requests_waiting", "tpot_p90"}),
}
#: The same without GPU telemetry: what the fallbacks can still name.
INJECTED_SIGNALS_WITHOUT_GPU: Final = {
    **INJECTED_SIGNALS,
    FaultKind.THERMAL_THROTTLE: frozenset({"tpot_p90", "decode_per_token_mean"}),
    FaultKind.DEGRADED_INSTANCE: frozenset({"tpot_p90", "decode_per_token_mean"}),
    FaultKind.CPU_STARVED: frozenset({"preprocess_mean"}),
}
#: The scenario-name suffix of a run without GPU telemetry.
NO_GPU: Final = " (no GPU)"


def compressed(scenario: Scenario) -> Scenario:
    """``scenario`` cut to 20 minutes with its (first two) faults over ``[10 min, 20 min)``."""
    faults = tuple(
        dataclasses.replace(f, start_s=FAULT_FROM_S, end_s=RUN_S)
        for f in scenario.faults[:MIXED_FAULTS]
    )
    return dataclasses.replace(scenario, duration_s=RUN_S, faults=faults)


def simulate(name: str) -> tuple[Scenario, Batch]:
    scenario = compressed(load_scenario(name))
    sink = MemorySink()
    run_scenario(scenario, [sink])
    batch = Batch(tuple(sink.completions), tuple(sink.server_samples), tuple(sink.gpu_samples))
    return scenario, batch


def without_gpu(batch: Batch) -> Batch:
    """``batch`` as a fleet without GPU telemetry ships it (``--gpu-source none``)."""
    return Batch(batch.completions, batch.server_samples, ())


def expected_causes(scenario: Scenario, gpu: bool = True) -> tuple[str, ...]:
    if gpu:
        return tuple(t.expected_cause for t in scenario.ground_truth())
    return tuple(EXPECTED_CAUSE_WITHOUT_GPU[f.kind] for f in scenario.faults)


def empty(engine: Engine) -> None:
    """Delete every row (each scenario starts on the same virtual day)."""
    with engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())


_SIMULATED: dict[str, tuple[Scenario, Batch]] = {}


def simulate_cached(name: str) -> tuple[Scenario, Batch]:
    """``simulate`` once per process (tests share runs; a run is deterministic)."""
    if name not in _SIMULATED:
        _SIMULATED[name] = simulate(name)
    return _SIMULATED[name]


def store_batch(engine: Engine, batch: Batch) -> None:
    sink = StoreSink(open_writer(engine))
    sink.write(batch)
    sink.close()


def windows(scenario: Scenario) -> tuple[Window, Window]:
    """(incident window, reference window) of a compressed scenario."""
    at = scenario.start
    incident = Window(at + timedelta(seconds=FAULT_FROM_S), at + timedelta(seconds=RUN_S))
    reference = Window(at + timedelta(seconds=REFERENCE_FROM_S), incident.start)
    return incident, reference


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    scenario: str
    expected: tuple[str, ...]
    diagnosis: Diagnosis
    passed: bool
    signals_s: float
    diagnose_s: float

    def row(self) -> str:
        d = self.diagnosis
        second = d.alternatives[0].cause.value if d.alternatives else "-"
        evidence = ",".join(e.signal for e in d.evidence[:3]) or "-"
        expected = "+".join(self.expected) or "unknown (no incident)"
        return (
            f"{self.scenario:33} {expected:34} {d.cause.value:19} {d.confidence:5.2f} "
            f"{d.instance or '-':11} {second:19} {evidence:40} {'PASS' if self.passed else 'FAIL'}"
        )


HEADER: Final = (
    f"{'scenario':33} {'expected':34} {'top cause':19} {'conf':>5} {'instance':11} "
    f"{'second':19} {'evidence (first 3)':40} result"
)


_POOL_SUFFIX: Final = re.compile(r"-(?:prefill|decode)-\d+$")


def right_instance(kind: FaultKind | str, injected: str, named: str) -> bool:
    """Whether a diagnosis naming ``named`` ("" for the whole scope) names where a fault of
    ``kind`` on ``injected`` is: that instance; for a pool fault, any decode instance of its
    deployment (a split deployment's users' requests are judged where they were answered) or
    the whole scope."""
    if FaultKind(kind) in POOL_FAULTS:
        deployment = _POOL_SUFFIX.sub("", injected)
        return named == "" or named.startswith(f"{deployment}-decode-")
    return named == injected


@functools.cache
def gpu_read_causes() -> frozenset[str]:
    """The causes whose rules (or fallbacks) read GPU samples: a right diagnosis of one of
    them without GPU telemetry must say what it could not check; the others owe nothing."""
    pack = load_rules()
    rules = (*pack.causes, *pack.fallbacks)
    return frozenset(r.cause.value for r in rules if GPU in r.needs | r.supports)


def judge(scenario: Scenario, d: Diagnosis, gpu: bool = True) -> bool:
    """The acceptance rule: single fault → top cause, instance and injected signal; mixed →
    both causes in the top two; no fault → ``unknown`` with low confidence. Without GPU
    telemetry (``gpu`` false) the expected causes are the fallbacks
    (``EXPECTED_CAUSE_WITHOUT_GPU``), and a hurt scope must say what evidence was missing."""
    faults = scenario.faults
    if not faults:
        return d.cause is Cause.UNKNOWN and d.confidence <= 0.2
    expected = expected_causes(scenario, gpu)
    if not gpu and not d.missing_evidence and set(expected) & gpu_read_causes():
        return False
    if len(faults) == 1:
        named = {e.signal for e in d.evidence}
        injected = (INJECTED_SIGNALS if gpu else INJECTED_SIGNALS_WITHOUT_GPU)[faults[0].kind]
        return (
            d.cause.value == expected[0]
            and right_instance(faults[0].kind, faults[0].instance, d.instance)
            and bool(named & injected)
        )
    top_two = {c.value for c in d.ranked[:2]}
    return set(expected) <= top_two


def evaluate(engine: Engine, scenario: Scenario, pack: RulePack, gpu: bool = True) -> Outcome:
    """Diagnose the stored run of ``scenario`` (stored without GPU samples: ``gpu`` false)."""
    incident, reference = windows(scenario)
    t0 = time.perf_counter()
    now = window_signals(engine, incident)
    before = window_signals(engine, reference)
    t1 = time.perf_counter()
    d = diagnose(now, before, pack)
    t2 = time.perf_counter()
    name = scenario.name if gpu else scenario.name + NO_GPU
    expected = expected_causes(scenario, gpu)
    return Outcome(name, expected, d, judge(scenario, d, gpu), t1 - t0, t2 - t1)


def table(outcomes: Sequence[Outcome]) -> str:
    passed = sum(o.passed for o in outcomes)
    lines = [HEADER, *(o.row() for o in outcomes)]
    lines.append(f"accuracy: {passed}/{len(outcomes)} scenarios")
    return "\n".join(lines)


def outage(batch: Batch, onset: datetime) -> Batch:
    """Every request from ``onset`` on fails (a total outage)."""
    completions = tuple(
        dataclasses.replace(
            c, record=dataclasses.replace(c.record, status=Status.ERROR, error_type="outage")
        )
        if c.record.start >= onset
        else c
        for c in batch.completions
    )
    return Batch(completions, batch.server_samples, batch.gpu_samples)
