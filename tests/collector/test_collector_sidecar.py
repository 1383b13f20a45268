"""The whole sidecar: real OTel SDK exporters into a running sidecar, records landing in
SQLite and PostgreSQL; ``kill -9`` under load, then restart: every acknowledged span is in
the store exactly once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from sqlalchemy import func, select

from infersight.collector.gpu.nvml import NvmlSource
from infersight.collector.gpu.source import GpuSampler
from infersight.collector.scrape.scraper import Scraper
from infersight.collector.sidecar import Sidecar
from infersight.storage.tables import gpu_samples, requests, server_samples
from infersight.storage.writer import open_writer
from tests.collector.fake_nvml import FakeGpu, FakeNvml
from tests.collector.harness import (
    Sender,
    base_url,
    post_spans,
    running_sidecar,
    sidecar_args,
    sidecar_config,
    span_key,
    spawn_sidecar,
    stored_keys,
    vllm_spans,
    wait_until,
)

pytestmark = pytest.mark.e2e


@pytest.fixture
def running(store, tmp_path: Path) -> Iterator[Sidecar]:
    config = sidecar_config("e2e", tmp_path / "spool", model="llama-8b")
    with running_sidecar(open_writer(store.engine), config) as app:
        yield app


def test_sdk_exporters_over_http_and_grpc_land_records_in_the_store(
    store, running: Sidecar
) -> None:
    http = HttpExporter(endpoint=f"http://127.0.0.1:{running.http.port}/v1/traces", timeout=10)
    grpc_exporter = GrpcExporter(
        endpoint=f"127.0.0.1:{running.grpc.port}", insecure=True, timeout=10
    )
    try:
        by_http, by_grpc = vllm_spans(5), vllm_spans(5)
        assert http.export(by_http) is SpanExportResult.SUCCESS
        assert grpc_exporter.export(by_grpc) is SpanExportResult.SUCCESS
    finally:
        http.shutdown()
        grpc_exporter.shutdown()
    expected = {span_key(s) for s in by_http + by_grpc}
    assert wait_until(lambda: set(stored_keys(store.engine)) == expected)
    with store.engine.connect() as c:
        models = set(c.execute(select(requests.c.model)).scalars())
    assert models == {"llama-8b"}
    # Counted once the shipped entries are deleted from the spool, just after the store commit.
    metrics = running.metrics
    assert wait_until(
        lambda: metrics.value("infersight_collector_shipped_total", kind="record") == 10
    )


def start_sidecar(url: str, spool: Path) -> tuple[subprocess.Popen[str], str]:
    code = "from infersight.cli.commands_sidecar import sidecar; sidecar()"
    return spawn_sidecar(code, [*sidecar_args(spool, "e2e"), "--store", url])


def test_kill_9_under_load_then_restart_keeps_every_acknowledged_span_exactly_once(
    store, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    proc, base = start_sidecar(store.url, spool)
    # Two senders, back to back, each stopping when the killed sidecar refuses its connection.
    sender = Sender(f"{base}/v1/traces", threads=2, pause_s=0.0, stop_on_error=True).start()
    try:
        assert wait_until(lambda: len(sender.acked) >= 400, timeout=60)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        sender.stop()
        assert proc.stdout is not None
        proc.stdout.close()
    restarted, _ = start_sidecar(store.url, spool)
    try:
        assert wait_until(lambda: set(sender.acked) <= set(stored_keys(store.engine)), timeout=60)
    finally:
        restarted.send_signal(signal.SIGTERM)
        out, _ = restarted.communicate(timeout=30)
    assert restarted.returncode == 0
    assert "stopped" in out
    keys = stored_keys(store.engine)
    assert len(keys) == len(set(keys))
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(requests)).scalar_one() == len(set(keys))


def count_rows(store, table) -> int:
    with store.engine.connect() as c:
        return int(c.execute(select(func.count()).select_from(table)).scalar_one())


def test_scrapes_and_gpu_samples_are_shipped_and_the_scraped_model_attributes_spans(
    store, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    running = Gauge("vllm:num_requests_running", "", ["model_name"], registry=registry)
    running.labels("served-model").set(4)
    queries = Counter("vllm:prefix_cache_queries", "", ["model_name"], registry=registry)
    queries.labels("served-model").inc(800)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    scraper = Scraper(f"http://127.0.0.1:{server.server_port}/metrics", "e2e", interval_s=0.2)
    gpu = GpuSampler(NvmlSource.open("e2e", FakeNvml([FakeGpu()])), interval_s=0.2)
    config = sidecar_config("e2e", tmp_path / "spool", sample_ship_interval_s=0.5)
    writer = open_writer(store.engine)
    try:
        with running_sidecar(writer, config, [scraper, gpu], scraper.current_model) as app:
            assert wait_until(lambda: scraper.model == "served-model", timeout=10)
            assert post_spans(base_url(app), vllm_spans(3)).status_code == 200
            assert wait_until(lambda: count_rows(store, requests) == 3, timeout=20)
            assert wait_until(
                lambda: count_rows(store, server_samples) > 0 and count_rows(store, gpu_samples) > 0
            )
            with store.engine.connect() as c:
                assert set(c.execute(select(requests.c.model)).scalars()) == {"served-model"}
            assert app.metrics.value("infersight_collector_scrapes_total") > 0
            assert app.metrics.value("infersight_collector_gpu_samples_total") > 0
            # the sidecar says which dialect it recognised, and the counters reach the store
            dialect = {"sampler": "scrape", "dialect": "vllm"}
            assert app.metrics.value("infersight_collector_scrape_dialect", **dialect) == 1
            assert b'scrape_dialect{dialect="vllm",sampler="scrape"} 1.0' in (
                app.metrics.exposition()
            )
            with store.engine.connect() as c:
                stored = c.execute(select(server_samples.c.prefix_cache_queries_total)).scalars()
                assert set(stored) == {800.0}
    finally:
        gpu.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_a_hung_scrape_endpoint_never_stalls_trace_ingest(store, tmp_path: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # accepts into the backlog, never answers
    scraper = Scraper(
        f"http://127.0.0.1:{listener.getsockname()[1]}/metrics",
        "e2e",
        interval_s=0.1,
        timeout_s=1.0,
    )
    config = sidecar_config("e2e", tmp_path / "spool")
    try:
        with running_sidecar(open_writer(store.engine), config, [scraper]) as app:
            for _ in range(5):
                started = time.monotonic()
                assert post_spans(base_url(app), vllm_spans(2)).status_code == 200
                assert time.monotonic() - started < 0.9
            assert wait_until(
                lambda: (
                    app.metrics.value("infersight_collector_scrape_errors_total", reason="timeout")
                    > 0
                )
            )
    finally:
        listener.close()
