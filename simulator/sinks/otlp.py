"""OTLP spans of simulated requests, through the real opentelemetry-sdk exporters.

Each finished request becomes vLLM V1's ``llm_request`` SERVER span (``vllm/tracing.py``'s
``SpanAttributes`` names: ``gen_ai.latency.*``, ``gen_ai.usage.prompt_tokens`` /
``completion_tokens``, ``gen_ai.request.*``, ``gen_ai.response.model``), with start and end
set explicitly from virtual time and, optionally, a ``tokenize`` child span for the frontend's
preprocessing, and, when the traffic passes a gateway, an enclosing ``gateway …`` root span
(its duration minus the request's E2E is the gateway's share). The span's trace and span
ids are the record's, so what a receiver stores can be compared with the simulator's records;
a request whose caller propagated its trace context (``traceparent``) is a child of the
caller's span.

Each instance has its own ``TracerProvider`` (resource ``service.name`` /
``service.instance.id`` = the instance) and ``BatchSpanProcessor``; ``write`` flushes (unless
told not to, as in real-time mode), so export keeps pace with virtual time and no span is
dropped for a full queue. The endpoint picks the exporter: ``http(s)://…`` → OTLP/HTTP
protobuf (``/v1/traces`` appended when missing), ``grpc://host:port`` → OTLP/gRPC (insecure
on loopback).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode

from core.errors import InvalidInput
from simulator.events import Batch, Completion

_NS = 1_000_000_000


class _ScriptedIds(IdGenerator):
    """Hands out the ids the next span must carry (spans are built on one thread)."""

    def __init__(self) -> None:
        self.trace_id = 0
        self.span_ids: list[int] = []

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_ids.pop(0)


def _caller(trace_id: int, parent_span_id: str) -> trace.Span:
    """The caller's span (remote) that a propagated request's span is a child of; else none."""
    if not parent_span_id:
        return trace.INVALID_SPAN
    context = trace.SpanContext(
        trace_id,
        int(parent_span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.NonRecordingSpan(context)


class CountingExporter(SpanExporter):
    """Delegates to the real exporter and counts what it accepted and refused."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def make_exporter(
    endpoint: str, *, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0
) -> SpanExporter:
    """The real OTLP exporter for ``endpoint`` (``http(s)://…`` or ``grpc://host:port``)."""
    if endpoint.startswith("grpc://"):
        return GrpcExporter(
            endpoint=endpoint.removeprefix("grpc://"),
            insecure=True,
            headers=dict(headers or {}),
            timeout=timeout_s,
        )
    if endpoint.startswith(("http://", "https://")):
        url = endpoint if endpoint.rstrip("/").endswith("/v1/traces") else endpoint.rstrip("/")
        if not url.endswith("/v1/traces"):
            url += "/v1/traces"
        return HttpExporter(endpoint=url, headers=dict(headers or {}), timeout=timeout_s)
    raise InvalidInput(
        "OTLP endpoint must be http(s)://host:port[/v1/traces] or grpc://host:port",
        details={"endpoint": endpoint},
    )


def span_attributes(c: Completion) -> dict[str, Any]:
    """The ``llm_request`` span's attributes, in vLLM V1's names."""
    r = c.record
    attrs: dict[str, Any] = {
        "gen_ai.request.id": c.request_id,
        "gen_ai.response.model": r.model,
        "gen_ai.request.max_tokens": c.max_tokens,
        "gen_ai.request.temperature": c.temperature,
        "gen_ai.request.top_p": c.top_p,
        "gen_ai.request.n": 1,
        "gen_ai.usage.num_sequences": 1,
        "gen_ai.usage.prompt_tokens": r.input_tokens or 0,
        "gen_ai.usage.completion_tokens": r.output_tokens or 0,
        "gen_ai.response.finish_reasons": json.dumps([r.finish_reason]),
        "infersight.tenant": r.tenant,
        "gen_ai.request.priority": r.priority,
    }
    latencies = {
        "time_in_queue": r.queue_s,
        "time_to_first_token": r.ttft_s,
        "e2e": r.e2e_s,
        "time_in_scheduler": c.scheduler_s,
        "time_in_model_forward": c.forward_s,
        "time_in_model_execute": c.execute_s,
        "time_in_model_prefill": r.prefill_s,
        "time_in_model_decode": r.decode_s,
        "time_in_model_inference": (
            r.prefill_s + r.decode_s if r.prefill_s is not None and r.decode_s is not None else None
        ),
    }
    attrs.update({f"gen_ai.latency.{k}": v for k, v in latencies.items() if v is not None})
    return attrs


class OtlpSink:
    """Exports every completion as spans through one ``TracerProvider`` per instance."""

    def __init__(
        self,
        endpoint_for: Callable[[str], str] | str,
        *,
        headers: Mapping[str, str] | None = None,
        tokenizer_spans: bool = True,
        exporter_factory: Callable[[str], SpanExporter] | None = None,
        flush_timeout_s: float = 30.0,
        flush_on_write: bool = True,
    ) -> None:
        self._endpoint_for = (
            endpoint_for if callable(endpoint_for) else (lambda _i, e=endpoint_for: e)
        )
        self._factory = exporter_factory or (lambda url: make_exporter(url, headers=headers))
        self._tokenizer_spans = tokenizer_spans
        self._flush_ms = int(flush_timeout_s * 1000)
        self._flush_on_write = flush_on_write
        self._providers: dict[str, tuple[TracerProvider, _ScriptedIds, trace.Tracer]] = {}
        self.exporters: dict[str, CountingExporter] = {}
        self.spans = 0

    def _tracer(self, instance: str) -> tuple[_ScriptedIds, trace.Tracer]:
        if instance not in self._providers:
            ids = _ScriptedIds()
            resource = Resource.create(
                {"service.name": instance, "service.instance.id": instance, "host.name": instance}
            )
            provider = TracerProvider(resource=resource, id_generator=ids)
            exporter = CountingExporter(self._factory(self._endpoint_for(instance)))
            provider.add_span_processor(
                BatchSpanProcessor(
                    exporter,
                    max_queue_size=1 << 18,
                    max_export_batch_size=2048,
                    schedule_delay_millis=200,
                )
            )
            tracer = provider.get_tracer("vllm.entrypoints.openai.api_server")
            self._providers[instance] = (provider, ids, tracer)
            self.exporters[instance] = exporter
        _, ids, tracer = self._providers[instance]
        return ids, tracer

    def emit(self, c: Completion) -> None:
        r = c.record
        ids, tracer = self._tracer(r.instance)
        start_ns = int(r.start.timestamp() * _NS)
        end_ns = start_ns + int((r.e2e_s or 0.0) * _NS)
        span_id = int(r.span_id, 16)
        ids.trace_id = int(r.trace_id, 16)
        parent = trace.set_span_in_context(_caller(ids.trace_id, c.parent_span_id))
        gateway = None
        if r.gateway_s:
            half_ns = round(r.gateway_s * _NS / 2)
            ids.span_ids = [span_id ^ 0x3C6EF372 or 1]
            gateway = tracer.start_span(
                f"gateway POST /v1/{r.operation or 'chat'}/completions",
                kind=SpanKind.SERVER,
                start_time=start_ns - half_ns,
                context=parent,
            )
            parent = trace.set_span_in_context(gateway)
        ids.span_ids = [span_id]
        span = tracer.start_span(
            "llm_request",
            kind=SpanKind.SERVER,
            start_time=start_ns,
            attributes=span_attributes(c),
            context=parent,
        )
        if r.is_error:
            span.set_status(Status(StatusCode.ERROR, r.error_type))
            span.set_attribute("error.type", r.error_type)
        if self._tokenizer_spans and r.preprocess_s is not None:
            ids.span_ids = [span_id ^ 0x5BD1E995 or 1]
            child = tracer.start_span(
                "tokenize",
                kind=SpanKind.INTERNAL,
                start_time=start_ns,
                context=trace.set_span_in_context(span),
            )
            child.end(end_time=start_ns + int(r.preprocess_s * _NS))
            self.spans += 1
        span.end(end_time=end_ns)
        self.spans += 1
        if gateway is not None:
            gateway.end(end_time=end_ns + half_ns)
            self.spans += 1

    def write(self, batch: Batch) -> None:
        for c in batch.completions:
            self.emit(c)
        if self._flush_on_write:
            self.flush()

    def flush(self) -> bool:
        return all(p.force_flush(self._flush_ms) for p, _, _ in self._providers.values())

    def close(self) -> None:
        for provider, _, _ in self._providers.values():
            provider.force_flush(self._flush_ms)
            provider.shutdown()

    @property
    def exported(self) -> int:
        return sum(e.exported for e in self.exporters.values())

    @property
    def failed(self) -> int:
        return sum(e.failed for e in self.exporters.values())
