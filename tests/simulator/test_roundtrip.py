"""Round trip: simulated fleet → real OTLP exporters → running sidecars → store.

Each simulated server gets its own sidecar (one over OTLP/HTTP, one over OTLP/gRPC), as in a
real deployment; the percentiles the store answers must equal the simulator's own records.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from infersight.collector.shipper import Backoff
from infersight.collector.sidecar import Sidecar, SidecarConfig
from infersight.core.quantiles import exact_quantiles
from infersight.core.query import Method, Selector
from infersight.core.window import Window
from infersight.simulator.faults import Fault, FaultKind
from infersight.simulator.fleet import run_scenario
from infersight.simulator.scenario import Deployment, Scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.simulator.specs import load_profile
from infersight.simulator.workload import Poisson
from infersight.storage.queries import latency
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.simulator.support import SHORT_MIX, START
from tests.waiting import until

pytestmark = pytest.mark.e2e
QS = (0.5, 0.9, 0.95, 0.99)
METRICS = ("ttft", "tpot", "e2e", "queue", "prefill", "decode", "preprocess", "gateway")


@pytest.fixture
def sidecars(store: Store, tmp_path: Path) -> Iterator[dict[str, Sidecar]]:
    running = {}
    for name in ("sim-0", "sim-1"):
        config = SidecarConfig(
            name,
            tmp_path / f"spool-{name}",
            http_port=0,
            grpc_port=0,
            window_s=0.0,
            backoff=Backoff(0.1, 1.5, 0.5),
        )
        running[name] = Sidecar(config, open_writer(store.engine)).start()
    yield running
    for app in running.values():
        app.stop()


def test_stored_percentiles_after_the_sidecar_equal_the_simulators_truth(
    store: Store, sidecars: dict[str, Sidecar]
) -> None:
    endpoints = {
        "sim-0": f"http://127.0.0.1:{sidecars['sim-0'].http.port}",
        "sim-1": f"grpc://127.0.0.1:{sidecars['sim-1'].grpc.port}",
    }
    scenario = Scenario(
        name="roundtrip",
        start=START,
        duration_s=90.0,
        seed=21,
        sample_interval_s=10.0,
        deployments=(
            Deployment(
                load_profile("llama-3.1-8b-h200x1"),
                ("sim-0", "sim-1"),
                Poisson(6.0),
                dataclasses.replace(SHORT_MIX, gateway_s=0.004),
            ),
        ),
        faults=(Fault(FaultKind.SLOW_TOKENIZER, "sim-1", 30.0, 60.0, 40.0),),
    )
    truth, otlp = MemorySink(), OtlpSink(endpoints.__getitem__)
    result = run_scenario(scenario, [truth, otlp], chunk_s=15.0)
    otlp.close()
    assert otlp.failed == 0
    # llm_request, its tokenize child and the enclosing gateway span, per request
    assert otlp.exported == 3 * result.requests

    def count() -> int:
        with store.engine.connect() as c:
            return int(c.scalar(select(func.count()).select_from(requests)) or 0)

    until(lambda: count() >= result.requests, "every request stored")
    assert count() == result.requests
    window = Window(START, START + timedelta(hours=1))
    for instance in ("sim-0", "sim-1"):
        records = [r for r in truth.records if r.instance == instance]
        for metric in METRICS:
            answer = latency(
                store.engine, metric, window, Selector(instance=instance), (), QS, Method.EXACT
            )
            (group,) = answer.groups
            values = [getattr(r, f"{metric}_s") for r in records]
            expected = exact_quantiles([v for v in values if v is not None], QS)
            assert group.count == len(records)
            for q in QS:
                assert group.quantiles[q] == pytest.approx(expected[q], rel=1e-6, abs=1e-8), (
                    instance,
                    metric,
                    q,
                )
    with store.engine.connect() as c:
        rows = c.execute(
            select(requests.c.model, requests.c.tenant, requests.c.finish_reason).distinct()
        ).all()
    assert {row.model for row in rows} == {"meta-llama/Llama-3.1-8B-Instruct"}
    assert {row.tenant for row in rows} == {"default"}
    assert {row.finish_reason for row in rows} <= {"stop", "length"}
