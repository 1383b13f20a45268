"""The whole sidecar: real OTel SDK exporters into a running sidecar, records landing in
SQLite and PostgreSQL; ``kill -9`` under load, then restart: every acknowledged span is in
the store exactly once."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from prometheus_client import CollectorRegistry, Gauge, start_http_server
from sqlalchemy import func, select

from collector.gpu.nvml import NvmlSource
from collector.gpu.source import GpuSampler
from collector.scrape.scraper import Scraper
from collector.shipper import Backoff
from collector.sidecar import Sidecar, SidecarConfig
from storage.tables import gpu_samples, requests, server_samples
from storage.writer import open_writer
from tests.collector.fake_nvml import FakeGpu, FakeNvml
from tests.collector.harness import encoded, vllm_spans

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def stored(store) -> list[tuple[str, str]]:
    with store.engine.connect() as c:
        return [tuple(r) for r in c.execute(select(requests.c.trace_id, requests.c.span_id))]


def wait_until(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture
def running(store, tmp_path: Path) -> Iterator[Sidecar]:
    config = SidecarConfig(
        "e2e",
        tmp_path / "spool",
        http_port=0,
        grpc_port=0,
        window_s=0.0,
        model="llama-8b",
        backoff=Backoff(0.1, 1.5, 0.5),
    )
    app = Sidecar(config, open_writer(store.engine)).start()
    yield app
    app.stop()


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
    expected = {
        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in by_http + by_grpc
    }
    assert wait_until(lambda: set(stored(store)) == expected)
    with store.engine.connect() as c:
        models = set(c.execute(select(requests.c.model)).scalars())
    assert models == {"llama-8b"}
    # Counted once the shipped entries are deleted from the spool, just after the store commit.
    metrics = running.metrics
    assert wait_until(
        lambda: metrics.value("infersight_collector_shipped_total", kind="record") == 10
    )


def start_sidecar(url: str, spool: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from infersight.commands_sidecar import sidecar; sidecar()",
            "--otlp-http",
            "127.0.0.1:0",
            "--otlp-grpc",
            "127.0.0.1:0",
            "--store",
            url,
            "--spool-dir",
            str(spool),
            "--gpu-source",
            "none",
            "--window",
            "0",
            "--instance",
            "e2e",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http=127\.0\.0\.1:(\d+)", line)
    assert match, f"unexpected first line: {line!r}"
    return proc, f"http://127.0.0.1:{match.group(1)}/v1/traces"


def test_kill_9_under_load_then_restart_keeps_every_acknowledged_span_exactly_once(
    store, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    proc, url = start_sidecar(store.url, spool)
    acked: list[tuple[str, str]] = []
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                spans = vllm_spans(10)
                try:
                    response = client.post(
                        url,
                        content=encoded(spans),
                        headers={"content-type": "application/x-protobuf"},
                    )
                except httpx.HTTPError:
                    return
                if response.status_code == 200:
                    acked.extend(
                        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans
                    )

    senders = [threading.Thread(target=send) for _ in range(2)]
    for sender in senders:
        sender.start()
    try:
        assert wait_until(lambda: len(acked) >= 400, timeout=60)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        stop.set()
        for sender in senders:
            sender.join(timeout=15)
        assert proc.stdout is not None
        proc.stdout.close()
    restarted, _ = start_sidecar(store.url, spool)
    try:
        assert wait_until(lambda: set(acked) <= set(stored(store)), timeout=60)
    finally:
        restarted.send_signal(signal.SIGTERM)
        out, _ = restarted.communicate(timeout=30)
    assert restarted.returncode == 0
    assert "stopped" in out
    keys = stored(store)
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
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    scraper = Scraper(f"http://127.0.0.1:{server.server_port}/metrics", "e2e", interval_s=0.2)
    gpu = GpuSampler(NvmlSource.open("e2e", FakeNvml([FakeGpu()])), interval_s=0.2)
    config = SidecarConfig(
        "e2e",
        tmp_path / "spool",
        http_port=0,
        grpc_port=0,
        window_s=0.0,
        sample_ship_interval_s=0.5,
        backoff=Backoff(0.1, 1.5, 0.5),
    )
    app = Sidecar(config, open_writer(store.engine), [scraper, gpu], scraper.current_model).start()
    try:
        assert wait_until(lambda: scraper.model == "served-model", timeout=10)
        response = httpx.post(
            f"http://127.0.0.1:{app.http.port}/v1/traces",
            content=encoded(vllm_spans(3)),
            headers={"content-type": "application/x-protobuf"},
        )
        assert response.status_code == 200
        assert wait_until(lambda: count_rows(store, requests) == 3, timeout=20)
        assert wait_until(
            lambda: count_rows(store, server_samples) > 0 and count_rows(store, gpu_samples) > 0
        )
        with store.engine.connect() as c:
            assert set(c.execute(select(requests.c.model)).scalars()) == {"served-model"}
        assert app.metrics.value("infersight_collector_scrapes_total") > 0
        assert app.metrics.value("infersight_collector_gpu_samples_total") > 0
    finally:
        app.stop()
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
    config = SidecarConfig("e2e", tmp_path / "spool", http_port=0, grpc_port=0, window_s=0.0)
    app = Sidecar(config, open_writer(store.engine), [scraper]).start()
    try:
        for _ in range(5):
            started = time.monotonic()
            response = httpx.post(
                f"http://127.0.0.1:{app.http.port}/v1/traces",
                content=encoded(vllm_spans(2)),
                headers={"content-type": "application/x-protobuf"},
            )
            assert response.status_code == 200
            assert time.monotonic() - started < 0.9
        assert wait_until(
            lambda: (
                app.metrics.value("infersight_collector_scrape_errors_total", reason="timeout") > 0
            )
        )
    finally:
        app.stop()
        listener.close()
