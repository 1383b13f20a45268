"""Disaggregated prefill/decode (#30): vLLM with a KV connector behind llm-d's routing sidecar.

One user request makes a ``llm_request`` span on the prefill instance (one output token), one
on the decode instance, and the proxy's own spans in the same trace: ``forward_request``
(SERVER), its ``prefill`` leg (with ``llm_d.pd_proxy.prefill_target``) and its ``decode`` leg,
the parent of the decode instance's span (names and attributes from llm-d's
``pkg/sidecar/proxy``). The proxy runs in the decode pod and exports to that pod's sidecar; the
prefill pod has its own sidecar. The user sent one request: it is one row of ``requests`` (on
the decode side, its TTFT and end to end time the user's, the prompt counted once), and the
prefill leg is one row of ``request_parts``.

Spans are made by the OpenTelemetry SDK and sent by its OTLP/HTTP exporter to two running
sidecars; rows are read back from SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from infersight.collector.sidecar import Sidecar
from infersight.core.records import Role
from infersight.storage.tables import request_parts, requests
from infersight.storage.writer import open_writer
from tests.collector.harness import export_spans, running_sidecar, sidecar_config

pytestmark = pytest.mark.e2e

MS = 1_000_000
PROMPT = 4000
TARGET = "10.244.0.14:8200"


class Tracer:
    """One service's tracer, its finished spans kept in memory."""

    def __init__(self, service: str) -> None:
        self.memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = provider.get_tracer(service)

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())


def vllm_span(
    tracer: Tracer,
    parent,
    t0: int,
    *,
    ttft: float,
    e2e: float,
    queue: float,
    out: int,
    request_id: str,
) -> None:
    span = tracer.tracer.start_span(
        "llm_request",
        context=trace.set_span_in_context(parent),
        kind=SpanKind.SERVER,
        start_time=t0,
        attributes={
            "gen_ai.request.id": request_id,
            "gen_ai.response.model": "llama-70b",
            "gen_ai.usage.prompt_tokens": PROMPT,
            "gen_ai.usage.completion_tokens": out,
            "gen_ai.latency.time_to_first_token": ttft,
            "gen_ai.latency.e2e": e2e,
            "gen_ai.latency.time_in_queue": queue,
            "gen_ai.latency.time_in_model_prefill": ttft - queue,
            "gen_ai.latency.time_in_model_decode": e2e - ttft,
        },
    )
    span.end(end_time=t0 + int(e2e * 1e9))


def pd_request(
    proxy: Tracer, prefill_vllm: Tracer, decode_vllm: Tracer, t0: int, *, concurrent: bool = False
) -> None:
    """One request split by the proxy: route 3 ms, prefill leg 250 ms (its vLLM: 40 ms queue,
    0.2 s TTFT), 30 ms until the decode request arrives, which waits 60 ms for its KV cache
    (its queue), has its first token 20 ms later and its last (300 tokens) at 3.0 s."""
    top = proxy.tracer.start_span(
        "forward_request",
        kind=SpanKind.SERVER,
        start_time=t0,
        attributes={
            "llm_d.pd_proxy.connector": "nixlv2",
            "llm_d.pd_proxy.disaggregation_used": True,
            "llm_d.pd_proxy.prefill_target": TARGET,
        },
    )
    p0 = t0 + 3 * MS
    prefill = proxy.tracer.start_span(
        "prefill",
        context=trace.set_span_in_context(top),
        kind=SpanKind.INTERNAL,
        start_time=p0,
        attributes={"llm_d.pd_proxy.prefill_target": TARGET, "llm_d.pd_proxy.connector": "nixlv2"},
    )
    vllm_span(
        prefill_vllm, prefill, p0 + 5 * MS, ttft=0.2, e2e=0.2, queue=0.04, out=1, request_id="pd-1"
    )
    prefill.end(end_time=p0 + 250 * MS)
    d0 = p0 + 250 * MS + 30 * MS
    decode_parent = prefill if concurrent else top
    decode = proxy.tracer.start_span(
        "decode",
        context=trace.set_span_in_context(decode_parent),
        kind=SpanKind.INTERNAL,
        start_time=d0,
        attributes={"llm_d.pd_proxy.connector": "nixlv2"},
    )
    vllm_span(decode_vllm, decode, d0, ttft=0.08, e2e=3.0, queue=0.06, out=300, request_id="pd-1")
    decode.end(end_time=d0 + 3_000 * MS + 2 * MS)
    top.end(end_time=d0 + 3_000 * MS + 3 * MS)


@pytest.fixture
def pair(store, tmp_path: Path) -> Iterator[tuple[Sidecar, Sidecar]]:
    writer = open_writer(store.engine)
    prefill_cfg = sidecar_config("vllm-prefill-0", tmp_path / "p", role=Role.PREFILL)
    decode_cfg = sidecar_config("vllm-decode-0", tmp_path / "d", role=Role.DECODE, window_s=600.0)
    with running_sidecar(writer, prefill_cfg) as p, running_sidecar(writer, decode_cfg) as d:
        yield p, d


def rows(store, table) -> list[dict]:
    with store.engine.connect() as c:
        return [dict(r._mapping) for r in c.execute(select(table).order_by(table.c.start))]


@pytest.mark.parametrize("concurrent", [False, True], ids=["nixl", "concurrent-dispatch"])
def test_a_split_request_is_one_user_request_and_one_prefill_part(store, pair, concurrent) -> None:
    prefill_sidecar, decode_sidecar = pair
    proxy, prefill_vllm = Tracer("llm-d-routing-sidecar"), Tracer("vllm")
    decode_vllm = Tracer("vllm")
    t0 = time.time_ns()
    pd_request(proxy, prefill_vllm, decode_vllm, t0, concurrent=concurrent)
    export_spans(prefill_sidecar, prefill_vllm.spans())
    export_spans(decode_sidecar, decode_vllm.spans() + proxy.spans())
    for app in pair:
        result = app.shipper.ship_once(ignore_window=True)
        assert result.ok, result.error

    users = rows(store, requests)
    assert len(users) == 1  # one user request, not two
    user = users[0]
    assert user["role"] == "decode"
    assert user["instance"] == "vllm-decode-0"
    assert user["peer"] == TARGET
    assert user["input_tokens"] == PROMPT  # the prompt once
    assert user["output_tokens"] == 300
    # What the user felt, from the proxy's arrival: 3 + 250 + 30 ms, then the decode
    # instance's first token 80 ms after its request arrived.
    assert user["ttft_s"] == pytest.approx(0.003 + 0.250 + 0.030 + 0.080, abs=1e-6)
    assert user["e2e_s"] == pytest.approx(0.283 + 3.003, abs=1e-6)
    assert user["route_s"] == pytest.approx(0.003, abs=1e-6)
    assert user["prefill_s"] == pytest.approx(0.250, abs=1e-6)
    assert user["kv_transfer_s"] == pytest.approx(0.030 + 0.060, abs=1e-6)
    assert user["queue_s"] is None  # the decode instance's wait is the KV transfer's
    assert user["tpot_s"] == pytest.approx((3.0 - 0.08) / 299)
    assert decode_sidecar.metrics.value("infersight_collector_disaggregated_requests_total") == 1

    parts = rows(store, request_parts)
    assert len(parts) == 1
    part = parts[0]
    assert (part["role"], part["instance"], part["trace_id"]) == (
        "prefill",
        "vllm-prefill-0",
        user["trace_id"],
    )
    assert (part["input_tokens"], part["output_tokens"]) == (PROMPT, 1)
    assert part["queue_s"] == pytest.approx(0.04)


def test_a_request_the_proxy_did_not_split_stays_a_unified_request(store, pair) -> None:
    """Selective P/D: a short prompt goes to the decode instance alone, below the proxy's
    ``forward_request`` with no prefill or decode leg."""
    _, decode_sidecar = pair
    proxy, decode_vllm = Tracer("llm-d-routing-sidecar"), Tracer("vllm")
    t0 = time.time_ns()
    top = proxy.tracer.start_span(
        "forward_request",
        kind=SpanKind.SERVER,
        start_time=t0,
        attributes={
            "llm_d.pd_proxy.disaggregation_used": False,
            "llm_d.pd_proxy.reason": "no_prefill_header",
        },
    )
    vllm_span(decode_vllm, top, t0 + MS, ttft=0.05, e2e=1.0, queue=0.01, out=50, request_id="x")
    top.end(end_time=t0 + 1_002 * MS)
    export_spans(decode_sidecar, decode_vllm.spans() + proxy.spans())
    assert decode_sidecar.shipper.ship_once(ignore_window=True).ok
    (user,) = rows(store, requests)
    assert (user["role"], user["peer"], user["ttft_s"]) == ("", "", pytest.approx(0.05))
    assert user["queue_s"] == pytest.approx(0.01)
    assert rows(store, request_parts) == []
