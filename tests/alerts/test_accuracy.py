"""Diagnosis accuracy on every shipped scenario, through simulator → StoreSink → store → signals.

The harness is the benchmark's (``bench/harness/scenarios.py``, which ``bench/bench_alerts.py``
runs: scenarios compressed to 20 minutes, fault over the last 10, reference before it). Each
scenario is simulated once per module and written into each store of the ``store`` fixture
(SQLite and PostgreSQL). A single fault must be the top cause, on the injected instance, with
evidence naming the injected signal; the mixed scenario must have both injected causes in its
top two; the quiet day must stay ``unknown`` with no confidence. The accuracy table is printed
in the terminal summary.

Each scenario is also stored without its GPU samples, as a fleet whose sidecars run
``--gpu-source none`` ships it: the GPU causes then fall back to what the symptom pattern
supports (``simulator.faults.EXPECTED_CAUSE_WITHOUT_GPU``: a throttled or degraded board is
``decode_bound`` on its instance), with lower confidence and the missing evidence stated; the
causes that never needed GPU samples stay as they are (a cause no GPU reading bears on,
such as a slow KV transfer, owes no missing evidence). A fault on a whole pool of a split
deployment is right on any of its decode instances (``scenarios.right_instance``).
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.harness import scenarios
from infersight.alerts.rules import Cause, load_rules
from infersight.simulator.faults import EXPECTED_CAUSE_WITHOUT_GPU
from infersight.simulator.specs import shipped_scenarios
from tests.conftest import Store


def _simulated(name: str) -> Any:
    return scenarios.simulate_cached(name)


@pytest.mark.parametrize("name", shipped_scenarios())
def test_every_shipped_scenario_is_diagnosed_as_injected(
    store: Store, name: str, accuracy_log: dict[tuple[str, str], Any]
) -> None:
    scenario, batch = _simulated(name)
    scenarios.store_batch(store.engine, batch)
    outcome = scenarios.evaluate(store.engine, scenario, load_rules())
    accuracy_log[(store.dialect, name)] = outcome
    d = outcome.diagnosis
    truth = scenario.ground_truth()
    if not truth:
        assert d.cause is Cause.UNKNOWN
        assert d.confidence <= 0.2
    elif len(truth) == 1:
        assert d.cause.value == truth[0].expected_cause, d.to_dict()
        assert scenarios.right_instance(truth[0].kind, truth[0].instance, d.instance)
        assert {e.signal for e in d.evidence} & scenarios.INJECTED_SIGNALS[truth[0].kind]
        assert d.confidence >= 0.5
    else:
        assert {t.expected_cause for t in truth} <= {c.value for c in d.ranked[:2]}
    assert outcome.passed


@pytest.mark.parametrize("name", shipped_scenarios())
def test_every_shipped_scenario_without_gpu_telemetry_falls_back_and_says_why(
    store: Store, name: str, accuracy_log: dict[tuple[str, str], Any]
) -> None:
    scenario, batch = _simulated(name)
    scenarios.store_batch(store.engine, scenarios.without_gpu(batch))
    outcome = scenarios.evaluate(store.engine, scenario, load_rules(), gpu=False)
    accuracy_log[(store.dialect, outcome.scenario)] = outcome
    d = outcome.diagnosis
    faults = scenario.faults
    if not faults:
        assert d.cause is Cause.UNKNOWN
        assert d.confidence <= 0.2
    elif len(faults) == 1:
        [fault] = faults
        expected = EXPECTED_CAUSE_WITHOUT_GPU[fault.kind]
        assert d.cause.value == expected, d.to_dict()
        assert scenarios.right_instance(fault.kind, fault.instance, d.instance)
        assert {e.signal for e in d.evidence} & scenarios.INJECTED_SIGNALS_WITHOUT_GPU[fault.kind]
        gaps = [s for s in d.missing_evidence if s.startswith("no GPU samples")]
        assert all(s.startswith(f"no GPU samples for {d.instance}") for s in gaps)
        if expected in scenarios.gpu_read_causes():  # what it could not check, it says
            assert gaps
        if expected == "decode_bound":
            assert "cannot tell compute from memory bandwidth" in d.missing_evidence[0]
            assert d.confidence < 0.5
    else:
        wanted = {EXPECTED_CAUSE_WITHOUT_GPU[f.kind] for f in faults}
        assert wanted <= {c.value for c in d.ranked[:2]}
    assert outcome.passed
