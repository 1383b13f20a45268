"""The sidecar says once, at INFO, what it first received from each peer (issue 33): an OTLP
export per transport, service and client address (and what its spans were recognised as), the
first scrape of a server (or why it has not worked yet), the first shipment to the store; and
lists them in ``/healthz`` as ``peers``."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from infersight.collector.peers import FirstContacts, peer_host
from infersight.collector.scrape.scraper import Scraper
from infersight.collector.sidecar import Sidecar
from infersight.storage.writer import open_writer
from tests.collector.harness import (
    ROOT,
    base_url,
    post_spans,
    running_sidecar,
    sidecar_args,
    sidecar_config,
    vllm_spans,
    wait_until,
)

PEERS = "infersight.collector.peers"


def said(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


def plain_spans(n: int, service: str) -> list[ReadableSpan]:
    """Spans of an app whose server sends no GenAI attribute (no engine tracing enabled)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    for _ in range(n):
        with tracer.start_as_current_span("GET /health", attributes={"http.route": "/health"}):
            pass
    return list(memory.get_finished_spans())


@pytest.fixture
def running(store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> Iterator[Sidecar]:
    caplog.set_level(logging.INFO, logger=PEERS)
    config = sidecar_config("first", tmp_path / "spool", model="llama-8b")
    with running_sidecar(open_writer(store.engine), config) as app:
        yield app


def test_the_first_export_of_each_service_is_announced_once_with_what_its_spans_became(
    running: Sidecar, caplog: pytest.LogCaptureFixture
) -> None:
    # gzip: decoded in a decoder process, announced by the sidecar from what it sent back
    url = f"{base_url(running)}/v1/traces"
    http = HttpExporter(endpoint=url, timeout=30, compression=Compression.Gzip)
    grpc = GrpcExporter(endpoint=f"127.0.0.1:{running.grpc.port}", insecure=True, timeout=30)
    try:
        assert http.export(vllm_spans(3)) is SpanExportResult.SUCCESS
        assert http.export(vllm_spans(2)) is SpanExportResult.SUCCESS
        assert grpc.export(vllm_spans(4)) is SpanExportResult.SUCCESS
        assert grpc.export(vllm_spans(1)) is SpanExportResult.SUCCESS
    finally:
        http.shutdown()
        grpc.shutdown()
    assert said(caplog, "first OTLP export over HTTP") == [
        "first OTLP export over HTTP from service vllm (127.0.0.1): "
        "3 spans, 3 llm_request records mapped as vLLM"
    ]
    assert said(caplog, "first OTLP export over gRPC") == [
        "first OTLP export over gRPC from service vllm (127.0.0.1): "
        "4 spans, 4 llm_request records mapped as vLLM"
    ]
    # uncompressed and small: decoded in the receiving thread, announced the same way
    assert post_spans(base_url(running), plain_spans(2, "gateway")).status_code == 200
    assert post_spans(base_url(running), plain_spans(5, "gateway")).status_code == 200
    assert said(caplog, "first OTLP export over HTTP from service gateway") == [
        "first OTLP export over HTTP from service gateway (127.0.0.1): 2 spans; no span was "
        "recognised as an LLM request: check the engine's tracing flags, see docs/connect/"
    ]
    # the first shipment to the store, once
    assert wait_until(lambda: said(caplog, "first shipment"))
    assert post_spans(base_url(running), vllm_spans(2)).status_code == 200
    shipped = running.metrics
    assert wait_until(
        lambda: shipped.value("infersight_collector_shipped_total", kind="record") == 12
    )
    assert len(said(caplog, "first shipment")) == 1
    peers = httpx.get(f"{base_url(running)}/healthz").json()["peers"]
    assert [(p["kind"], p["ok"]) for p in peers] == [("otlp", True)] * 3 + [("store", True)]
    assert peers[0]["said"].startswith("first OTLP export over HTTP from service vllm")


def test_the_first_scrape_is_announced_once_and_a_failing_one_says_why_once(
    store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=PEERS)
    registry = CollectorRegistry()
    running = Gauge("vllm:num_requests_running", "", ["model_name"], registry=registry)
    running.labels("served-model").set(4)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    good = f"http://127.0.0.1:{server.server_port}/metrics"
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
    bad = f"http://127.0.0.1:{closed.getsockname()[1]}/metrics"
    scrapers = [
        Scraper(good, "first", interval_s=0.1),
        Scraper(bad, "first", interval_s=0.1, name="scrape-2"),
    ]
    config = sidecar_config("first", tmp_path / "spool")
    try:
        with running_sidecar(open_writer(store.engine), config, scrapers) as app:
            errors = "infersight_collector_scrape_errors_total"
            assert wait_until(
                lambda: (
                    app.metrics.value("infersight_collector_scrapes_total") >= 3
                    and app.metrics.value(errors, reason="unreachable") >= 3
                )
            )
            assert said(caplog, "first scrape") == [
                f"first scrape of {good}: dialect vllm, model served-model"
            ]
            failures = said(caplog, "no successful scrape")
            assert len(failures) == 1
            assert failures[0].startswith(f"no successful scrape of {bad} yet: first failure: ")
            peers = httpx.get(f"{base_url(app)}/healthz").json()["peers"]
            scrapes = {p["said"].split(":")[0]: p["ok"] for p in peers if p["kind"] == "scrape"}
            assert scrapes == {"first scrape of http": True, "no successful scrape of http": False}
    finally:
        closed.close()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_peers_are_remembered_up_to_a_bound_then_one_line_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=PEERS)
    peers = FirstContacts(capacity=3)
    for i in range(10):
        peers.announce(("otlp", "http", f"svc{i}", ""), "otlp", f"first from svc{i}")
        peers.announce(("otlp", "http", f"svc{i}", ""), "otlp", f"first from svc{i}")
    assert said(caplog, "first from") == ["first from svc0", "first from svc1", "first from svc2"]
    assert said(caplog, "3 peers met") == ["3 peers met: no further first contact is announced"]
    assert len(peers) == 3


def test_grpc_peer_strings_name_the_client_host_without_its_port() -> None:
    assert peer_host("ipv4:10.0.0.5:43210") == "10.0.0.5"
    assert peer_host("ipv6:[::1]:43210") == "::1"
    assert peer_host("unix:/run/sock") == "local"
    assert peer_host("") == ""


def test_the_infersight_sidecar_command_prints_the_line_at_its_default_log_level(
    store, tmp_path: Path
) -> None:
    code = "import sys; from infersight.cli import main; sys.argv[0] = 'infersight'; main()"
    args = ["--store", store.url, "sidecar", *sidecar_args(tmp_path / "spool", "cli")]
    errors = tmp_path / "stderr.log"
    with errors.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http=127\.0\.0\.1:(\d+)", line)
        assert match, f"unexpected first line: {line!r}"
        base = f"http://127.0.0.1:{match.group(1)}"
        for _ in range(2):
            assert post_spans(base, vllm_spans(2), timeout=30).status_code == 200
        expected = "first OTLP export over HTTP from service vllm (127.0.0.1): 2 spans"
        assert wait_until(lambda: expected in errors.read_text())
        assert wait_until(lambda: "first shipment" in errors.read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert proc.stdout is not None
        proc.stdout.close()
    assert errors.read_text().count("first OTLP export") == 1
