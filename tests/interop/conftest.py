"""A running infersight to interoperate with: the API (uvicorn, free port) over a SQLite store
holding one SLO and a few minutes of requests, and a sidecar (free ports) that has received
spans through a real OTLP exporter. Both serve their real ``/metrics``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.collector.sidecar import Sidecar, SidecarConfig
from infersight.core.records import RequestRecord
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.simulator.events import Batch, Completion
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.storage import migrate, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.writer import open_writer
from tests.factories import make_records
from tests.peers import serving_app

SLO = SloSpec("chat-ttft", Sli(SliKind.LATENCY, "ttft", 0.5), 0.99, timedelta(days=28))


@dataclass(frozen=True)
class Running:
    api: str
    sidecar: str

    def exported(self) -> set[str]:
        """Every metric name the two ``/metrics`` expose (series names, not family names:
        ``…_total`` for counters), read from the live exposition."""
        names: set[str] = set()
        for url in (self.api, self.sidecar):
            text = httpx.get(f"{url}/metrics", timeout=30).text
            for family in text_string_to_metric_families(text):
                names.update(sample.name for sample in family.samples)
                names.update(_series_names(family.name, family.type))
        return names


def _series_names(family: str, kind: str) -> set[str]:
    """Series a family exposes once it has children (a labelled family starts empty)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created", ""),
    }
    return {family + suffix for suffix in suffixes.get(kind, ("",))}


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    root: Path = tmp_path_factory.mktemp("interop")
    engine = create_store_engine(f"sqlite:///{root / 'store.db'}")
    migrate.upgrade(engine)
    now = datetime.now(UTC)
    records = make_records(
        np.random.default_rng(9), now - timedelta(minutes=20), 3000, span=timedelta(minutes=20)
    )
    open_writer(engine).write_requests(records[50:])
    slo_store.put_slo(engine, SLO, now)
    sidecar = Sidecar(
        SidecarConfig("interop-0", root / "spool", http_port=0, grpc_port=0, model="llama-8b"),
        open_writer(engine),
    ).start()
    try:
        _export_spans(sidecar, records[:50])
        with serving_app(create_app(ApiSettings(run_jobs=False), engine)) as api:
            yield Running(api, f"http://127.0.0.1:{sidecar.http.port}")
    finally:
        sidecar.stop()
        engine.dispose()


def _export_spans(sidecar: Sidecar, records: list[RequestRecord]) -> None:
    """Spans of ``records`` through the real OTLP/HTTP exporter, so counters move."""
    completions = tuple(
        Completion(r, f"req-{i}", 256, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0) for i, r in enumerate(records)
    )
    sink = OtlpSink(f"http://127.0.0.1:{sidecar.http.port}/v1/traces")
    try:
        sink.write(Batch(completions, (), ()))
    finally:
        sink.close()
    assert sink.failed == 0
