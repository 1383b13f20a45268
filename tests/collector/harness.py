"""Shared pieces of the collector tests: receivers, spans made by the real SDK, and running
sidecars (in this process or as the CLI), the exports sent to them and the keys they store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from infersight.collector.codec import Kind, decode_record
from infersight.collector.decoding import DecoderPool
from infersight.collector.grpc_receiver import GrpcServer
from infersight.collector.http_receiver import HttpServer
from infersight.collector.mapping.base import no_scraped_adapters, no_scraped_model
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.periodic import Sampler
from infersight.collector.shipper import Backoff
from infersight.collector.sidecar import Sidecar, SidecarConfig
from infersight.collector.spool import Spool
from infersight.core.records import RequestRecord
from infersight.core.write import Sink
from infersight.storage.tables import requests
from tests.collector.collector_shapes import VLLM_V1

ROOT = Path(__file__).resolve().parents[2]
PROTOBUF = {"content-type": "application/x-protobuf"}
#: Shipping retried within half a second, not the production 5 to 30 s.
FAST_BACKOFF = Backoff(0.1, 1.5, 0.5)
Key = tuple[str, str]


@dataclass
class Receiver:
    spool: Spool
    metrics: CollectorMetrics
    http: HttpServer
    grpc: GrpcServer
    #: The decoder processes, when the receiver was made with them.
    decoders: DecoderPool | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.grpc.port}"

    def records(self) -> list[RequestRecord]:
        stored = self.spool.ready(now=1e12, kinds=[Kind.RECORD], limit=10**6)
        return [decode_record(s.payload) for s in stored]


def vllm_spans(n: int, **extra: object) -> list[ReadableSpan]:
    """``n`` spans shaped as vLLM's ``llm_request``, made by the real SDK."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("vllm.tracing")
    for i in range(n):
        attrs = {**VLLM_V1, "gen_ai.usage.prompt_tokens": 100 + i, **extra}
        with tracer.start_as_current_span("llm_request", kind=SpanKind.SERVER, attributes=attrs):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def encoded(spans: Sequence[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def span_key(span: ReadableSpan) -> Key:
    """The (trace id, span id) a span is stored under."""
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def stored_keys(engine: Any) -> list[Key]:
    """The keys of every request record in the store (duplicates included)."""
    with engine.connect() as c:
        return [(t, s) for t, s in c.execute(select(requests.c.trace_id, requests.c.span_id))]


def wait_until(predicate: Callable[[], object], timeout: float = 60.0) -> bool:
    """Poll for an event; the timeout only bounds a broken run, it is no performance budget."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def post_spans(base: str, spans: Sequence[ReadableSpan], **kwargs: Any) -> httpx.Response:
    """One OTLP/HTTP protobuf export of ``spans`` to the receiver at ``base``."""
    return httpx.post(f"{base}/v1/traces", content=encoded(spans), headers=PROTOBUF, **kwargs)


def sidecar_config(instance: str, spool_dir: Path, **fields: Any) -> SidecarConfig:
    """A sidecar on free ports that ships records at once and retries within half a second;
    ``fields`` set any other ``SidecarConfig`` field (or these)."""
    defaults: dict[str, Any] = {"http_port": 0, "grpc_port": 0, "window_s": 0.0}
    return SidecarConfig(instance, spool_dir, **{**defaults, "backoff": FAST_BACKOFF, **fields})


@contextmanager
def running_sidecar(
    sink: Sink | Callable[[], Sink],
    config: SidecarConfig,
    samplers: Sequence[Sampler] = (),
    scraped_model: Callable[[], str] = no_scraped_model,
    scraped_adapters: Callable[[], frozenset[str]] = no_scraped_adapters,
) -> Iterator[Sidecar]:
    """A started sidecar, stopped (drained, spool closed) when the block ends."""
    app = Sidecar(config, sink, samplers, scraped_model, scraped_adapters).start()
    try:
        yield app
    finally:
        app.stop()


def base_url(app: Sidecar) -> str:
    """Where a sidecar's HTTP receiver (``/v1/traces``, ``/metrics``, ``/healthz``) listens."""
    return f"http://127.0.0.1:{app.http.port}"


def sidecar_args(spool: Path, instance: str) -> list[str]:
    """The ``sidecar`` command's options for a test: free ports, no GPU, no window."""
    return [
        "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0", "--spool-dir", str(spool),
        "--gpu-source", "none", "--window", "0", "--instance", instance,
    ]  # fmt: skip


def spawn_sidecar(code: str, args: Sequence[str]) -> tuple[subprocess.Popen[str], str]:
    """``python -c code args`` (a sidecar command) from the repository root, and the base URL
    of its HTTP receiver, read from the first line it prints."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http=127\.0\.0\.1:(\d+)", line)
    assert match, f"unexpected first line: {line!r}"
    return proc, f"http://127.0.0.1:{match.group(1)}"


class Sender:
    """Threads exporting batches of ten spans in a loop; the keys of the acknowledged ones.

    A failed connection is retried at once, or ends the thread with ``stop_on_error`` (the
    sidecar was killed); ``pause_s`` is the wait after each answered export."""

    def __init__(
        self, url: str, threads: int = 1, pause_s: float = 0.02, stop_on_error: bool = False
    ) -> None:
        self.url = url
        self.pause_s = pause_s
        self.stop_on_error = stop_on_error
        self.acked: list[Key] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                spans = vllm_spans(10)
                try:
                    response = client.post(self.url, content=encoded(spans), headers=PROTOBUF)
                except httpx.HTTPError:
                    if self.stop_on_error:
                        return
                    continue
                if response.status_code == 200:
                    self.acked.extend(span_key(s) for s in spans)
                self._stop.wait(self.pause_s)

    def start(self) -> Sender:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)

    def __enter__(self) -> Sender:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def more_than(self, n: int) -> Callable[[], bool]:
        return lambda: len(self.acked) > n


def export_spans(sidecar: Sidecar, spans: Sequence[ReadableSpan]) -> None:
    """Send ``spans`` to ``sidecar`` with the SDK's OTLP/HTTP exporter; all acknowledged."""
    exporter = OTLPSpanExporter(endpoint=f"{base_url(sidecar)}/v1/traces")
    try:
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
