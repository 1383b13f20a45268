"""Trace assembly through the real path: spans made by the OpenTelemetry SDK, sent by its OTLP
exporter to a running sidecar, records landing in SQLite and PostgreSQL. A request's stages
are its own span's descendants in its own service; a client's spans in the same trace (its
tokenisation, a sibling service's queue) are refused and counted, never merged."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, SpanKind
from sqlalchemy import select

from infersight.collector.codec import Kind, decode_piece
from infersight.collector.mapping import StageFragment
from infersight.collector.sidecar import Sidecar
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.collector.harness import base_url, export_spans, running_sidecar, sidecar_config

pytestmark = pytest.mark.e2e

MS = 1_000_000
#: A vLLM V1 ``llm_request`` that reports no stage of its own: its stages come from its spans.
SERVER_ATTRS = {
    "gen_ai.usage.prompt_tokens": 120,
    "gen_ai.usage.completion_tokens": 41,
    "gen_ai.latency.time_to_first_token": 0.25,
}
STAGES = ("gateway_s", "preprocess_s", "queue_s", "prefill_s", "decode_s", "postprocess_s")


class Service:
    """One service's tracer (real SDK); its finished spans wait to be exported on purpose."""

    def __init__(self, name: str, t0_ns: int) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": name}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer(name)
        self.t0 = t0_ns

    def start(
        self,
        name: str,
        at_ms: float,
        parent: Span | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict[str, Any] | None = None,
    ) -> Span:
        context = trace.set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(
            name,
            context=context,
            kind=kind,
            attributes=attributes,
            start_time=self.t0 + int(at_ms * MS),
        )

    def end(self, span: Span, at_ms: float) -> Span:
        span.end(end_time=self.t0 + int(at_ms * MS))
        return span

    def span(self, name: str, start_ms: float, end_ms: float, parent: Span, **kw: Any) -> Span:
        return self.end(self.start(name, start_ms, parent, **kw), end_ms)

    def take(self, *names: str) -> list[ReadableSpan]:
        """The finished spans called ``names`` (all when none is named)."""
        spans = [s for s in self.memory.get_finished_spans() if not names or s.name in names]
        assert not names or len(spans) == len(names)
        return spans


@pytest.fixture
def sidecar(store, tmp_path: Path) -> Iterator[Sidecar]:
    # A long window: records are shipped when the test says so (ship_once ignoring the
    # window), after every export it makes has been acknowledged, whatever the machine's load.
    config = sidecar_config("vllm-0", tmp_path / "spool", window_s=600.0, model="llama-8b")
    with running_sidecar(open_writer(store.engine), config) as app:
        yield app


def export(sidecar: Sidecar, spans: list[ReadableSpan]) -> None:
    export_spans(sidecar, spans)


def ship(sidecar: Sidecar) -> None:
    result = sidecar.shipper.ship_once(ignore_window=True)
    assert result.ok, result.error


def stored_record(store, span: Span) -> dict[str, Any]:
    context = span.get_span_context()
    with store.engine.connect() as c:
        row = c.execute(
            select(requests).where(
                requests.c.trace_id == f"{context.trace_id:032x}",
                requests.c.span_id == f"{context.span_id:016x}",
            )
        ).one()
    return dict(row._mapping)


def refused(sidecar: Sidecar, reason: str) -> float:
    return sidecar.metrics.value("infersight_collector_fragments_refused_total", reason=reason)


def waiting_fragments(sidecar: Sidecar) -> list[StageFragment]:
    entries = sidecar.spool.ready(1e18, [Kind.STAGE], 10_000)
    pieces = [decode_piece(e.trace_id, e.payload) for e in entries]
    return [p for p in pieces if isinstance(p, StageFragment)]


def test_a_client_span_tree_in_the_servers_trace_leaves_only_the_servers_own_stages(
    store, sidecar: Sidecar
) -> None:
    t0 = time.time_ns()
    client, server = Service("chat-app", t0), Service("vllm", t0)
    root = client.start("handle_chat", 0)
    client.span("tokenize_prompt", 0, 50, root)  # 50 ms of the client's own work
    request = server.start("llm_request", 60, root, SpanKind.SERVER, SERVER_ATTRS)
    server.span("queue", 60, 80, request)
    server.span("prefill", 80, 200, request)
    server.end(request, 1100)
    client.end(root, 1200)
    export(sidecar, server.take())  # two processes, two exports: the server's first
    export(sidecar, client.take())
    ship(sidecar)
    record = stored_record(store, request)
    assert record["preprocess_s"] is None  # the client's tokenisation is not the server's
    assert record["queue_s"] == pytest.approx(0.020)
    assert record["prefill_s"] == pytest.approx(0.120)
    assert record["e2e_s"] == pytest.approx(1.040)
    assert refused(sidecar, "not_descendant") == 1
    assert waiting_fragments(sidecar) == []


def test_a_client_span_above_the_call_is_refused_as_an_ancestor(store, sidecar: Sidecar) -> None:
    t0 = time.time_ns()
    client, server = Service("chat-app", t0), Service("vllm", t0)
    root = client.start("handle_chat", 0)
    queued = client.start("request_queue_wait", 0, root)  # the client's own queue, enclosing
    request = server.start("llm_request", 300, queued, SpanKind.SERVER, SERVER_ATTRS)
    server.span("queue", 300, 310, request)
    server.end(request, 900)
    client.end(queued, 950)
    client.end(root, 1000)
    export(sidecar, [*client.take(), *server.take()])  # one collector, one export
    ship(sidecar)
    record = stored_record(store, request)
    assert record["queue_s"] == pytest.approx(0.010)
    assert refused(sidecar, "ancestor") == 1


def test_fragments_split_across_exports_before_and_after_the_request_span_are_merged(
    store, sidecar: Sidecar
) -> None:
    t0 = time.time_ns()
    sglang = Service("sglang", t0)
    request = sglang.start("Req 9f8e7d6c", 0, kind=SpanKind.SERVER)
    tokenizer = sglang.start("Tokenizer (host:ab12cd34 | pid:41)", 0, request)
    sglang.span("tokenize", 0, 20, tokenizer)
    sglang.end(tokenizer, 25)
    scheduler = sglang.start("Scheduler (host:ab12cd34 | pid:42)", 25, request)
    sglang.span("prefill_forward", 30, 330, scheduler)
    sglang.span("decode_loop", 330, 1330, scheduler)
    sglang.span("decode_loop", 1330, 2830, scheduler)
    sglang.end(scheduler, 2840)
    detokenizer = sglang.start("Detokenizer (host:ab12cd34 | pid:43)", 2840, request)
    sglang.span("detokenize", 2840, 2850, detokenizer)  # its thread span never arrives
    sglang.end(request, 3000)
    # The slices reach the sidecar before their thread spans, and the request span before
    # the scheduler's: each arrives in its own export.
    export(sidecar, sglang.take("prefill_forward"))
    export(sidecar, sglang.take("tokenize", "Tokenizer (host:ab12cd34 | pid:41)"))
    export(sidecar, sglang.take("Req 9f8e7d6c"))
    export(sidecar, sglang.take("decode_loop", "decode_loop", "detokenize"))
    export(sidecar, sglang.take("Scheduler (host:ab12cd34 | pid:42)"))
    ship(sidecar)
    record = stored_record(store, request)
    assert record["engine"] == "sglang"
    assert record["e2e_s"] == pytest.approx(3.0)
    assert record["preprocess_s"] == pytest.approx(0.020)
    assert record["prefill_s"] == pytest.approx(0.300)
    assert record["decode_s"] == pytest.approx(2.500)
    # A fragment whose parent is still unknown is neither merged nor refused: it waits.
    assert record["postprocess_s"] is None
    assert [f.stage for f in waiting_fragments(sidecar)] == ["postprocess"]
    assert sum(refused(sidecar, r) for r in ("not_descendant", "ancestor", "other_service")) == 0


def test_a_sibling_services_queue_span_in_the_same_trace_is_refused_and_counted(
    store, sidecar: Sidecar
) -> None:
    t0 = time.time_ns()
    client, server = Service("chat-app", t0), Service("vllm", t0)
    retriever, events = Service("retriever", t0), Service("events", t0)
    root = client.start("handle_chat", 0)
    retriever.span("queue", 0, 400, root)  # the retriever's own queue, beside the call
    request = server.start("llm_request", 400, root, SpanKind.SERVER, SERVER_ATTRS)
    server.span("queue", 400, 430, request)
    events.span("queue publish", 500, 520, request)  # a service the server called
    server.end(request, 1400)
    client.end(root, 1500)
    export(sidecar, [*retriever.take(), *events.take()])
    export(sidecar, server.take())
    export(sidecar, client.take())
    ship(sidecar)
    record = stored_record(store, request)
    assert record["queue_s"] == pytest.approx(0.030)
    assert refused(sidecar, "other_service") == 2
    exposition = httpx.get(f"{base_url(sidecar)}/metrics").text
    assert 'infersight_collector_fragments_refused_total{reason="other_service"} 2.0' in exposition
    assert 'infersight_collector_fragments_refused_total{reason="ancestor"} 0.0' in exposition


def test_a_gateway_directly_in_front_of_the_request_adds_only_its_own_time(
    store, sidecar: Sidecar
) -> None:
    t0 = time.time_ns()
    gateway, server = Service("api-gateway", t0), Service("vllm", t0)
    front = gateway.start("gateway POST /v1/chat/completions", 0, kind=SpanKind.SERVER)
    request = server.start("llm_request", 2, front, SpanKind.SERVER, SERVER_ATTRS)
    server.end(request, 1002)
    gateway.end(front, 1005)
    export(sidecar, [*server.take(), *gateway.take()])
    ship(sidecar)
    record = stored_record(store, request)
    assert record["gateway_s"] == pytest.approx(0.005)


def test_a_real_openai_instrumented_client_calling_the_simulator_pollutes_no_server_stage(
    store, sidecar: Sidecar
) -> None:
    import openai

    with quiet_third_party():
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    from infersight.simulator.realtime import RealtimeServer
    from infersight.simulator.sinks import MemorySink
    from infersight.simulator.sinks.otlp import OtlpSink
    from infersight.simulator.specs import load_profile
    from tests.peers import serving_app

    endpoint = f"{base_url(sidecar)}/v1/traces"
    client_provider = TracerProvider(resource=Resource.create({"service.name": "chat-app"}))
    client_exporter = OTLPSpanExporter(endpoint=endpoint)
    client_provider.add_span_processor(SimpleSpanProcessor(client_exporter))
    instrumentor = OpenAIInstrumentor()
    with quiet_third_party():
        instrumentor.instrument(tracer_provider=client_provider)
    memory = MemorySink()
    simulator = RealtimeServer.standalone(
        "sim-0",
        load_profile("llama-3.1-8b-h200x1"),
        epoch=datetime.now(UTC),
        sinks=[memory, OtlpSink(endpoint, flush_on_write=False)],
    )
    tracer = client_provider.get_tracer("chat-app")
    try:
        with serving_app(simulator.app()) as url:  # on the way out the sink flushes its spans
            api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            with tracer.start_as_current_span("handle_chat") as root:
                with tracer.start_as_current_span("tokenize_prompt"):
                    time.sleep(0.05)  # the client's own 50 ms of tokenisation
                for stream in (False, True):
                    reply = api.chat.completions.create(
                        model=simulator.model,
                        messages=[{"role": "user", "content": "Why is the sky blue? " * 20}],
                        max_tokens=16,
                        stream=stream,
                    )
                    if stream:
                        assert sum(1 for _ in reply) > 0
    finally:
        instrumentor.uninstrument()
        client_provider.shutdown()
    trace_id = f"{root.get_span_context().trace_id:032x}"
    served = [c for c in memory.completions if c.record.trace_id == trace_id]
    assert len(served) == 2  # both calls joined the client's trace through traceparent
    assert all(c.parent_span_id for c in served)
    ship(sidecar)
    with store.engine.connect() as c:
        rows = c.execute(select(requests).where(requests.c.trace_id == trace_id)).all()
    assert len(rows) == 2
    for row in rows:
        own = next(c.record for c in served if c.record.span_id == row.span_id)
        # The server's own tokenizer span, a few milliseconds, not the client's 50 ms.
        assert row.preprocess_s == pytest.approx(own.preprocess_s, abs=1e-6)
        assert row.preprocess_s < 0.05
        stages = sum(getattr(row, name) or 0.0 for name in STAGES)
        assert stages <= row.e2e_s * (1 + 1e-6)
    assert refused(sidecar, "not_descendant") == 1


@contextmanager
def quiet_third_party() -> Iterator[None]:
    """The OpenAI instrumentation defines pydantic models the pre-2.0 way: a deprecation
    warning that is no concern of this suite (where warnings are errors)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        yield
