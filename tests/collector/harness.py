"""Shared pieces of the collector tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from collector.codec import Kind, decode_record
from collector.decoding import DecoderPool
from collector.grpc_receiver import GrpcServer
from collector.http_receiver import HttpServer
from collector.metrics import CollectorMetrics
from collector.spool import Spool
from core.records import RequestRecord
from tests.collector.collector_shapes import VLLM_V1


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
