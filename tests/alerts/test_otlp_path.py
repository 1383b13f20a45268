"""The real path for one scenario: simulator → OTLP (opentelemetry-sdk exporters) → one sidecar
per instance → store → signals → diagnosis.

Spans travel the whole way; the server and GPU samples, which a sidecar gets by scraping
``/metrics`` and reading NVML, are written through ``storage.writer`` here (their scraping is
covered by the collector's own tests). The compressed thermal-throttle scenario must still
be diagnosed as ``gpu_throttled`` on the throttled instance.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from alerts.rules import load_rules
from collector.shipper import Backoff
from collector.sidecar import Sidecar, SidecarConfig
from simulator.events import Batch
from simulator.sinks.otlp import OtlpSink
from storage.tables import requests
from storage.writer import open_writer
from tests.alerts.test_accuracy import bench
from tests.conftest import Store

pytestmark = pytest.mark.e2e


@pytest.fixture
def sidecars(store: Store, tmp_path: Path) -> Iterator[dict[str, Sidecar]]:
    scenario, _ = bench.simulate_cached("fault-thermal-throttle")
    models = {n: d.profile.model_name for d in scenario.deployments for n in d.instances}
    running: dict[str, Sidecar] = {}
    try:
        for name, model in models.items():
            config = SidecarConfig(
                name,
                tmp_path / name,
                http_port=0,
                grpc_port=0,
                window_s=0.0,
                ship_interval_s=0.2,
                model=model,
                backoff=Backoff(0.1, 1.5, 0.5),
            )
            running[name] = Sidecar(config, open_writer(store.engine)).start()
        yield running
    finally:
        for sidecar in running.values():
            sidecar.stop()


def _count(store: Store) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(requests)).scalar_one())


# One store is enough here: both stores are covered by test_accuracy, and the OTLP leg is
# what this test adds (it takes ~20 s of the directory's budget).
@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
def test_spans_through_sidecars_are_diagnosed_as_injected(
    store: Store, sidecars: dict[str, Sidecar]
) -> None:
    scenario, batch = bench.simulate_cached("fault-thermal-throttle")
    sink = OtlpSink(lambda instance: f"http://127.0.0.1:{sidecars[instance].http.port}/v1/traces")
    try:
        sink.write(Batch(batch.completions, (), ()))
        assert sink.flush()
    finally:
        sink.close()
    assert sink.failed == 0
    bench.store_batch(store.engine, Batch((), batch.server_samples, batch.gpu_samples))
    deadline = time.monotonic() + 60
    while _count(store) < len(batch.completions) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _count(store) == len(batch.completions)
    outcome = bench.evaluate(store.engine, scenario, load_rules())
    assert outcome.diagnosis.cause.value == "gpu_throttled", outcome.diagnosis.to_dict()
    assert outcome.diagnosis.instance == "vllm-70b-0"
    assert outcome.passed
