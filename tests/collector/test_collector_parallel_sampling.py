"""Parallel sampling (#30): vLLM answers a request with ``n`` > 1 by running ``n`` child
sequences and emits one ``llm_request`` span per child, all in the request's trace, below its
HTTP context, with the request's ``gen_ai.request.id``. The user sent one request: it is one
record — the prompt counted once, every sequence's output tokens, the first token any sequence
produced, the end of the last one.

Spans are made by the OpenTelemetry SDK (vLLM's attribute names, from ``vllm/tracing``), sent
by its OTLP/HTTP exporter to a running sidecar, and read back from SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from infersight.collector.assembly import Request, assemble
from infersight.collector.mapping import Place
from infersight.collector.sidecar import Sidecar
from infersight.core.records import MAX_TOKENS, Engine, RequestRecord, Status
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.collector.harness import export_spans, running_sidecar, sidecar_config

pytestmark = pytest.mark.e2e

MS = 1_000_000
PROMPT = 900


class VllmServer:
    """vLLM's tracer: one ``llm_request`` SERVER span per finished sequence."""

    def __init__(self) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": "vllm"}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = self.provider.get_tracer("vllm.tracing.otel")
        self.gateway = TracerProvider(resource=Resource.create({"service.name": "gateway"}))

    def request(
        self, request_id: str, sequences: list[tuple[float, float, int]], t0: int
    ) -> list[ReadableSpan]:
        """``sequences``: (TTFT s, E2E s, output tokens) of each child of one request, all
        arriving at ``t0`` below one HTTP span of the caller."""
        http = self.gateway.get_tracer("gw").start_span(
            "POST /v1/chat/completions", kind=SpanKind.CLIENT, start_time=t0
        )
        context = trace.set_span_in_context(http)
        for ttft, e2e, out in sequences:
            span = self.tracer.start_span(
                "llm_request",
                context=context,
                kind=SpanKind.SERVER,
                start_time=t0,
                attributes={
                    "gen_ai.request.id": request_id,
                    "gen_ai.request.n": 1,  # each child reports its own n, not the parent's
                    "gen_ai.usage.prompt_tokens": PROMPT,
                    "gen_ai.usage.completion_tokens": out,
                    "gen_ai.latency.time_to_first_token": ttft,
                    "gen_ai.latency.e2e": e2e,
                    "gen_ai.latency.time_in_queue": 0.02,
                    "gen_ai.latency.time_in_model_prefill": ttft - 0.02,
                    "gen_ai.latency.time_in_model_decode": e2e - ttft,
                },
            )
            span.end(end_time=t0 + int(e2e * 1000) * MS)
        http.end(end_time=t0 + 5_000 * MS)
        return list(self.memory.get_finished_spans())


@pytest.fixture
def sidecar(store, tmp_path: Path) -> Iterator[Sidecar]:
    config = sidecar_config("vllm-0", tmp_path / "spool", window_s=600.0, model="llama-8b")
    with running_sidecar(open_writer(store.engine), config) as app:
        yield app


def rows(store) -> list[dict]:
    with store.engine.connect() as c:
        return [dict(r._mapping) for r in c.execute(select(requests).order_by(requests.c.start))]


def test_n_sequences_of_one_request_are_one_record(store, sidecar: Sidecar) -> None:
    vllm = VllmServer()
    t0 = time.time_ns()
    # n = 3: the first token of any sequence at 0.21 s; the longest sequence ends at 3.4 s.
    three = [(0.25, 2.0, 120), (0.21, 3.4, 300), (0.23, 1.1, 40)]
    spans = vllm.request("chatcmpl-n3", three, t0)
    # A plain request (n = 1) in its own trace: untouched.
    spans += VllmServer().request("chatcmpl-single", [(0.3, 1.5, 80)], t0 + 10 * MS)
    export_spans(sidecar, spans)
    result = sidecar.shipper.ship_once(ignore_window=True)
    assert result.ok, result.error
    stored = rows(store)
    assert len(stored) == 2  # two user requests, not four
    merged = next(r for r in stored if r["output_tokens"] == 460)
    assert merged["input_tokens"] == PROMPT  # the prompt once, not three times
    assert merged["ttft_s"] == pytest.approx(0.21)
    assert merged["e2e_s"] == pytest.approx(3.4)
    # time per output token: each sequence's, weighted by its tokens after the first
    tpots = [((e2e - ttft) / (out - 1), out - 1) for ttft, e2e, out in three]
    expected = sum(v * w for v, w in tpots) / sum(w for _, w in tpots)
    assert merged["tpot_s"] == pytest.approx(expected)
    assert merged["decode_s"] == pytest.approx(3.4 - 0.21)
    single = next(r for r in stored if r["output_tokens"] == 80)
    assert single["input_tokens"] == PROMPT
    assert sidecar.metrics.value("infersight_collector_sequences_merged_total") == 2


def _record(span_id: str, *, ttft: float, e2e: float, out: int, status=Status.OK) -> RequestRecord:
    return RequestRecord(
        trace_id="a" * 32,
        span_id=span_id,
        start=datetime(2026, 12, 6, 9, 0, tzinfo=UTC),
        instance="vllm-0",
        engine=Engine.VLLM,
        model="m",
        ttft_s=ttft,
        e2e_s=e2e,
        input_tokens=PROMPT,
        output_tokens=out,
        status=status,
        error_type="error" if status is Status.ERROR else "",
    )


def test_sequences_fold_only_with_their_own_request_and_parent() -> None:
    one = Place("p" * 16, 1, 2, "req-1")
    other_parent = Place("q" * 16, 1, 2, "req-1")  # a P/D pair's other leg: another parent
    requests_ = [
        Request(_record("1" * 16, ttft=0.2, e2e=1.0, out=10), one),
        Request(_record("2" * 16, ttft=0.3, e2e=2.0, out=20, status=Status.ERROR), one),
        Request(_record("3" * 16, ttft=0.4, e2e=0.9, out=5), other_parent),
        Request(_record("4" * 16, ttft=0.4, e2e=0.9, out=5), Place("p" * 16, 1, 2, "")),
        # a replay of the first sequence in the same batch is one sequence, not a second
        Request(_record("1" * 16, ttft=0.2, e2e=1.0, out=10), one),
    ]
    out = assemble(requests_, [])
    assert out.sequences_merged == 1
    assert len(out.records) == 3
    folded = out.records[0]
    assert (folded.span_id, folded.output_tokens, folded.e2e_s) == ("1" * 16, 30, 2.0)
    assert folded.status is Status.ERROR  # one failed sequence fails the request
    assert {r.span_id for r in out.records[1:]} == {"3" * 16, "4" * 16}


def test_sequences_that_would_fold_into_an_implausible_record_ship_as_they_are() -> None:
    """Two sequences whose summed output passes the record's bound: neither is dropped."""

    one = Place("p" * 16, 1, 2, "req-1")
    half = MAX_TOKENS // 2 + 1
    requests_ = [
        Request(_record("1" * 16, ttft=0.2, e2e=1.0, out=half), one),
        Request(_record("2" * 16, ttft=0.3, e2e=2.0, out=half), one),
    ]
    out = assemble(requests_, [])
    assert out.sequences_merged == 0
    assert [r.output_tokens for r in out.records] == [half, half]
