"""Shipped scenarios through the real path, from simulator to page (``bench/bench_diagnosis.py``).

Simulator → spans through the real ``opentelemetry-sdk`` exporters → one real sidecar per
instance (OTLP/HTTP receiver, spool, shipper) → store → the API's own evaluation and follow-up
jobs in virtual time (the fleet's SLOs, default burn-rate policy) → incident → diagnosis →
notification outbox. A single fault opens incidents whose first page and last diagnosis both
blame the injected cause on the injected instance, with the injected signal in the evidence;
the mixed scenario blames both of its causes; the quiet day opens no incident at all.

A scenario takes 20-35 s on this 2-core machine, so CI runs the subset below (about 110 s):
the negative case (the quiet day at its peak), both causes of the mixed scenario, the one
``host_bound`` scenario (whose first minute looks like slow preprocessing) and KV pressure
(TTFT and TPOT both hurt).
``python bench/bench_diagnosis.py`` runs every shipped scenario through the same harness and
prints the accuracy table. One store is enough: both stores are covered by ``test_accuracy``
(simulator → store → diagnosis), and the OTLP, evaluation and notification legs are what this
adds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.specs import shipped_scenarios
from tests.benchmarks import load_bench
from tests.conftest import Store

pytestmark = pytest.mark.e2e

bench = load_bench("bench_diagnosis")

#: How long the fault lasts in a compressed run.
FAULT_S = bench.bench_alerts.RUN_S - bench.bench_alerts.FAULT_FROM_S
CI_SCENARIOS = ["quiet-day", "mixed-incident", "fault-cpu-starved", "fault-kv-pressure"]


def test_the_ci_subset_is_made_of_shipped_scenarios() -> None:
    assert set(CI_SCENARIOS) <= set(shipped_scenarios())


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
@pytest.mark.parametrize("name", CI_SCENARIOS)
def test_a_scenario_through_the_real_path_pages_with_the_injected_cause(
    store: Store, name: str, tmp_path: Path, real_path_log: dict[str, Any]
) -> None:
    outcome = bench.run_path(store.engine, name, tmp_path)
    real_path_log[name] = outcome
    assert outcome.requests > 10_000  # the run went through the sidecars, not around them
    assert outcome.passed, "\n".join(outcome.problems)
    if not outcome.faults:
        assert outcome.seen == ()
        assert outcome.notified_s is None
        return
    assert outcome.seen
    # A page per incident, with its diagnosis, entered the outbox when the incident opened
    # (the evaluation that saw the burn) and within the fault.
    assert outcome.notified_s is not None
    assert 0 <= outcome.notified_s <= min(s.opened_s for s in outcome.seen) + bench.INTERVAL_S
    assert outcome.notified_s < FAULT_S
    for seen in outcome.seen:
        assert seen.paged, f"{seen.slo} opened without a page"
