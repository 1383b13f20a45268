"""Diagnosis accuracy on every shipped scenario, through simulator → StoreSink → store → signals.

The harness is the benchmark's (``bench/bench_alerts.py``: scenarios compressed to 20 minutes,
fault over the last 10, reference before it). Each scenario is simulated once per module and
written into each store of the ``store`` fixture (SQLite and PostgreSQL). A single fault must be
the top cause, on the injected instance, with evidence naming the injected signal; the mixed
scenario must have both injected causes in its top two; the quiet day must stay ``unknown``
with no confidence. The accuracy table is printed in the terminal summary.
"""

from __future__ import annotations

from typing import Any

import pytest

from alerts.rules import Cause, load_rules
from simulator.specs import shipped_scenarios
from tests.benchmarks import load_bench
from tests.conftest import Store

bench = load_bench("bench_alerts")


def _simulated(name: str) -> Any:
    return bench.simulate_cached(name)


@pytest.mark.parametrize("name", shipped_scenarios())
def test_every_shipped_scenario_is_diagnosed_as_injected(
    store: Store, name: str, accuracy_log: dict[tuple[str, str], Any]
) -> None:
    scenario, batch = _simulated(name)
    bench.store_batch(store.engine, batch)
    outcome = bench.evaluate(store.engine, scenario, load_rules())
    accuracy_log[(store.dialect, name)] = outcome
    d = outcome.diagnosis
    truth = scenario.ground_truth()
    if not truth:
        assert d.cause is Cause.UNKNOWN
        assert d.confidence <= 0.2
    elif len(truth) == 1:
        assert d.cause.value == truth[0].expected_cause, d.to_dict()
        assert d.instance == truth[0].instance
        assert {e.signal for e in d.evidence} & bench.INJECTED_SIGNALS[truth[0].kind]
        assert d.confidence >= 0.5
    else:
        assert {t.expected_cause for t in truth} <= {c.value for c in d.ranked[:2]}
    assert outcome.passed
