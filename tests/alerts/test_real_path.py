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

Without GPU telemetry (sidecars with ``--gpu-source none``: no GPU sample reaches the store) a
throttled board is a decode slowdown on one instance — TPOT and the engine's decode time per
token up — and its page and its last diagnosis name ``decode_bound`` on that instance with the
missing evidence stated, on SQLite and on PostgreSQL; with GPU telemetry the same fault pages
as ``gpu_throttled`` (``test_accuracy`` and the mixed scenario here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from bench.harness import real_path, scenarios
from infersight.simulator.specs import shipped_scenarios
from infersight.storage.tables import gpu_samples
from tests.conftest import BOTH_STORES, Store

pytestmark = pytest.mark.e2e


#: How long the fault lasts in a compressed run.
FAULT_S = scenarios.RUN_S - scenarios.FAULT_FROM_S
CI_SCENARIOS = ["quiet-day", "mixed-incident", "fault-cpu-starved", "fault-kv-pressure"]


def test_the_ci_subset_is_made_of_shipped_scenarios() -> None:
    assert set(CI_SCENARIOS) <= set(shipped_scenarios())


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
@pytest.mark.parametrize("name", CI_SCENARIOS)
def test_a_scenario_through_the_real_path_pages_with_the_injected_cause(
    store: Store, name: str, tmp_path: Path, real_path_log: dict[str, Any]
) -> None:
    outcome = real_path.run_path(store.engine, name, tmp_path)
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
    assert 0 <= outcome.notified_s <= min(s.opened_s for s in outcome.seen) + real_path.INTERVAL_S
    assert outcome.notified_s < FAULT_S
    for seen in outcome.seen:
        assert seen.paged, f"{seen.slo} opened without a page"


@pytest.mark.parametrize("store", BOTH_STORES, indirect=True)
def test_a_throttled_gpu_without_gpu_telemetry_pages_as_decode_bound_with_what_is_missing(
    store: Store, tmp_path: Path, real_path_log: dict[str, Any]
) -> None:
    outcome = real_path.run_path(store.engine, "fault-thermal-throttle", tmp_path, gpu=False)
    real_path_log[f"{outcome.scenario} [{store.dialect}]"] = outcome
    assert outcome.requests > 10_000
    with store.engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(gpu_samples)).scalar_one() == 0
    assert outcome.passed, "\n".join(outcome.problems)
    assert outcome.seen
    for seen in outcome.seen:
        for diagnosis in (seen.paged, seen.last):
            assert diagnosis["cause"] == "decode_bound"
            assert diagnosis["instance"] == "vllm-70b-0"
            assert diagnosis["confidence"] < 0.5
            assert diagnosis["missing_evidence"] == [
                "no GPU samples for vllm-70b-0: cannot tell compute from memory bandwidth, "
                "nor see clock throttling"
            ]
