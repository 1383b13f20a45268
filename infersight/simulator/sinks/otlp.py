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

With ``client=ClientSpans(...)`` each request is also traced by the application that sent it,
as an OTel-instrumented client does when it propagates its trace context: an application root
span of another ``service.name`` with a ``tokenize_prompt`` child (the client's own work), an
optional ``gateway`` child, and a ``chat {model}`` CLIENT span whose child is the server's
span — in the same trace. Client spans are sent to the same endpoint as the server's (one
OTLP endpoint per node), so a receiver must tell them apart by ancestry and service.

Spans are the SDK's own ``ReadableSpan``s built with their virtual times and ids (the
tracer API would stamp wall-clock times and draw ids), handed to one ``BatchSpanProcessor``
per service and instance (resource ``service.name`` / ``service.instance.id``) whose real
exporter sends them; ``write`` flushes (unless told not to, as in real-time mode), so export
keeps pace with virtual time and no span is dropped for a full queue. The endpoint picks the
exporter: ``http(s)://…`` → OTLP/HTTP protobuf (``/v1/traces`` appended when missing),
``grpc://host:port`` → OTLP/gRPC (insecure on loopback).
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from infersight.core.errors import InvalidInput
from infersight.simulator.events import Batch, Completion

_NS = 1_000_000_000
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_SERVER_SCOPE: Final = InstrumentationScope("vllm.entrypoints.openai.api_server")
_CLIENT_SCOPE: Final = InstrumentationScope("opentelemetry.instrumentation.openai_v2")
_PROXY_SCOPE: Final = InstrumentationScope("llm-d-routing-sidecar")
#: The ``service.name`` of llm-d's routing sidecar (the P/D proxy beside a decode instance).
PROXY_SERVICE: Final = "llm-d-routing-sidecar"


@dataclass(frozen=True, slots=True)
class ClientSpans:
    """The calling application's spans around each request (see the module docstring)."""

    service: str = "chat-app"
    #: The client's own tokenization before it sends the request (``tokenize_prompt``).
    tokenize_s: float = 0.05
    #: A client-side ``gateway`` span's duration (0: none).
    gateway_s: float = 0.002
    #: Network time each way between the client span and the server span.
    network_s: float = 0.001

    def __post_init__(self) -> None:
        if not self.service:
            raise InvalidInput("client spans need a service name")
        for name in ("tokenize_s", "gateway_s", "network_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or not 0.0 <= value <= 60.0:
                raise InvalidInput(f"client {name} must be in [0, 60] s")


class _Route:
    """One service on one instance: its resource, processor and counting exporter."""

    __slots__ = ("exporter", "processor", "resource")

    def __init__(self, resource: Resource, exporter: CountingExporter, delay_ms: int = 200) -> None:
        self.resource = resource
        self.exporter = exporter
        self.processor = BatchSpanProcessor(
            exporter,
            max_queue_size=1 << 18,
            max_export_batch_size=2048,
            schedule_delay_millis=delay_ms,
        )


def _derived(span_id: int, salt: int) -> int:
    """A span id of the same request, stable and non-zero."""
    return (span_id ^ salt) or 1


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
        # vLLM names the served model of the request: its LoRA adapter's name, if any.
        "gen_ai.response.model": r.adapter or r.model,
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
    """Exports every completion as spans through one processor per service and instance."""

    def __init__(
        self,
        endpoint_for: Callable[[str], str] | str,
        *,
        headers: Mapping[str, str] | None = None,
        tokenizer_spans: bool = True,
        exporter_factory: Callable[[str], SpanExporter] | None = None,
        flush_timeout_s: float = 30.0,
        flush_on_write: bool = True,
        client: ClientSpans | None = None,
        schedule_delay_s: float = 0.2,
    ) -> None:
        """``schedule_delay_s``: the processors' own export period (the SDK's
        ``schedule_delay_millis``); a long one leaves exporting to ``write``'s flush (and to
        full batches), so that spans written together go out together."""
        self._delay_ms = max(1, int(schedule_delay_s * 1000))
        self._endpoint_for = (
            endpoint_for if callable(endpoint_for) else (lambda _i, e=endpoint_for: e)
        )
        self._factory = exporter_factory or (lambda url: make_exporter(url, headers=headers))
        self._tokenizer_spans = tokenizer_spans
        self._flush_ms = int(flush_timeout_s * 1000)
        self._flush_on_write = flush_on_write
        self._client = client
        self._routes: dict[tuple[str, str], _Route] = {}
        self._proxies: dict[str, Resource] = {}
        self.exporters: dict[str, CountingExporter] = {}
        self.spans = 0

    def _route(self, instance: str, service: str = "") -> _Route:
        key = (instance, service)
        if key not in self._routes:
            if service:
                attributes = {
                    "service.name": service,
                    "service.instance.id": f"{service}@{instance}",
                    "host.name": instance,
                }
            else:
                attributes = {
                    "service.name": instance,
                    "service.instance.id": instance,
                    "host.name": instance,
                }
            exporter = CountingExporter(self._factory(self._endpoint_for(instance)))
            self._routes[key] = _Route(Resource.create(attributes), exporter, self._delay_ms)
            self.exporters[instance if not service else f"{service}@{instance}"] = exporter
        return self._routes[key]

    def _span(
        self,
        route: _Route,
        name: str,
        kind: SpanKind,
        trace_id: int,
        span_id: int,
        parent: int | None,
        start_ns: int,
        end_ns: int,
        attributes: Mapping[str, Any] | None = None,
        status: Status | None = None,
        scope: InstrumentationScope = _SERVER_SCOPE,
        resource: Resource | None = None,
    ) -> None:
        context = SpanContext(trace_id, span_id, False, _SAMPLED)
        parent_context = (
            SpanContext(trace_id, parent, False, _SAMPLED) if parent is not None else None
        )
        span = ReadableSpan(
            name=name,
            context=context,
            parent=parent_context,
            resource=resource or route.resource,
            attributes=dict(attributes or {}),
            kind=kind,
            status=status or Status(StatusCode.UNSET),
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_scope=scope,
        )
        route.processor.on_end(span)
        self.spans += 1

    def emit(self, c: Completion) -> None:
        if c.pd is not None:
            self._emit_disaggregated(c)
            return
        r = c.record
        server = self._route(r.instance)
        trace_id = int(r.trace_id, 16)
        span_id = int(r.span_id, 16)
        start_ns = int(r.start.timestamp() * _NS)
        end_ns = start_ns + int((r.e2e_s or 0.0) * _NS)
        parent = self._client_spans(c, trace_id, span_id, start_ns, end_ns)
        if parent is None and c.parent_span_id:  # a caller that sent its traceparent
            parent = int(c.parent_span_id, 16)
        if self._tokenizer_spans and r.preprocess_s is not None:
            self._span(
                server,
                "tokenize",
                SpanKind.INTERNAL,
                trace_id,
                _derived(span_id, 0x5BD1E995),
                span_id,
                start_ns,
                start_ns + int(r.preprocess_s * _NS),
            )
        server_parent = parent
        gateway: tuple[int, int, int] | None = None
        if r.gateway_s:
            half_ns = round(r.gateway_s * _NS / 2)
            gateway = (_derived(span_id, 0x3C6EF372), start_ns - half_ns, end_ns + half_ns)
            server_parent = gateway[0]
        # Parallel sampling: vLLM ends one ``llm_request`` span per sequence, each with the
        # request's id and ``n`` = 1, below the same parent.
        for part in c.sequences or (r,):
            status = None
            attributes = span_attributes(dataclasses.replace(c, record=part))
            if part.is_error:
                status = Status(StatusCode.ERROR, part.error_type)
                attributes["error.type"] = part.error_type
            part_start = int(part.start.timestamp() * _NS)
            self._span(
                server,
                "llm_request",
                SpanKind.SERVER,
                trace_id,
                int(part.span_id, 16),
                server_parent,
                part_start,
                part_start + int((part.e2e_s or 0.0) * _NS),
                attributes,
                status,
            )
        if gateway is not None:
            self._span(
                server,
                f"gateway POST /v1/{r.operation or 'chat'}/completions",
                SpanKind.SERVER,
                trace_id,
                gateway[0],
                parent,
                gateway[1],
                gateway[2],
            )

    def _emit_disaggregated(self, c: Completion) -> None:
        """A split request's decode side: the decode instance's own ``llm_request`` span, a
        child of the proxy's ``decode`` leg, and the proxy's ``forward_request`` /
        ``prefill`` / ``decode`` spans (llm-d's ``pkg/sidecar/proxy``), exported by the proxy
        in the decode pod to that pod's endpoint, in the same exports as the decode
        instance's span (their own resource). (The prefill instance's span is its own
        completion, a child of the ``prefill`` leg.)"""
        legs = c.pd
        assert legs is not None
        self.emit(dataclasses.replace(c, record=legs.engine, pd=None))
        r = c.record
        proxy = self._route(r.instance)
        if r.instance not in self._proxies:
            self._proxies[r.instance] = Resource.create(
                {
                    "service.name": PROXY_SERVICE,
                    "service.instance.id": f"{PROXY_SERVICE}@{r.instance}",
                    "host.name": r.instance,
                }
            )
        resource = self._proxies[r.instance]
        trace_id = int(r.trace_id, 16)
        start_ns = int(r.start.timestamp() * _NS)
        request = int(legs.request_span, 16)

        def at(offset_s: float) -> int:
            return start_ns + round(offset_s * _NS)

        connector = {"llm_d.pd_proxy.connector": legs.connector}
        target = {"llm_d.pd_proxy.prefill_target": legs.prefill_target}
        self._span(
            proxy,
            "prefill",
            SpanKind.INTERNAL,
            trace_id,
            int(legs.prefill_span, 16),
            request,
            at(legs.route_s),
            at(legs.route_s + legs.prefill_leg_s),
            {**target, **connector},
            scope=_PROXY_SCOPE,
            resource=resource,
        )
        self._span(
            proxy,
            "decode",
            SpanKind.INTERNAL,
            trace_id,
            int(legs.decode_span, 16),
            request,
            at(legs.decode_from_s),
            at(legs.decode_from_s + legs.decode_leg_s),
            connector,
            scope=_PROXY_SCOPE,
            resource=resource,
        )
        self._span(
            proxy,
            "forward_request",
            SpanKind.SERVER,
            trace_id,
            request,
            None,
            start_ns,
            at(legs.total_s),
            {**connector, "llm_d.pd_proxy.disaggregation_used": True, **target},
            Status(StatusCode.ERROR, r.error_type) if r.is_error else None,
            scope=_PROXY_SCOPE,
            resource=resource,
        )

    def _client_spans(
        self, c: Completion, trace_id: int, span_id: int, start_ns: int, end_ns: int
    ) -> int | None:
        """The application's spans of request ``c``; returns the server span's parent."""
        client = self._client
        if client is None:
            return None
        r = c.record
        app = self._route(r.instance, client.service)
        net = int(client.network_s * _NS)
        gateway_ns = int(client.gateway_s * _NS)
        outer = int((r.gateway_s or 0.0) * _NS / 2)
        call_start = start_ns - outer - net
        call_end = end_ns + outer + net
        tok_end = call_start - gateway_ns
        root_start = tok_end - int(client.tokenize_s * _NS)
        root = _derived(span_id, 0x27D4EB2F)
        call = _derived(span_id, 0x165667B1)
        self._span(
            app,
            "tokenize_prompt",
            SpanKind.INTERNAL,
            trace_id,
            _derived(span_id, 0x61C88647),
            root,
            root_start,
            tok_end,
            {"app.prompt.tokens": r.input_tokens or 0},
            scope=_CLIENT_SCOPE,
        )
        if gateway_ns:
            self._span(
                app,
                "gateway",
                SpanKind.INTERNAL,
                trace_id,
                _derived(span_id, 0x7F4A7C15),
                root,
                tok_end,
                call_start,
                scope=_CLIENT_SCOPE,
            )
        model = r.adapter or r.model  # a client names the adapter it asked for
        self._span(
            app,
            f"chat {model}",
            SpanKind.CLIENT,
            trace_id,
            call,
            root,
            call_start,
            call_end,
            {  # what opentelemetry-instrumentation-openai-v2 records on its CLIENT span
                "gen_ai.operation.name": "chat",
                "gen_ai.system": "openai",
                "gen_ai.request.model": model,
                "gen_ai.response.model": model,
                "gen_ai.usage.input_tokens": r.input_tokens or 0,
                "gen_ai.usage.output_tokens": r.output_tokens or 0,
                "server.address": r.instance,
                "server.port": 8000,
            },
            scope=_CLIENT_SCOPE,
        )
        self._span(
            app,
            "answer_question",
            SpanKind.SERVER,
            trace_id,
            root,
            None,
            root_start,
            call_end + 100_000,
            scope=_CLIENT_SCOPE,
        )
        return call

    def write(self, batch: Batch) -> None:
        for c in batch.completions:
            self.emit(c)
        if self._flush_on_write:
            self.flush()

    def flush(self) -> bool:
        return all(r.processor.force_flush(self._flush_ms) for r in self._routes.values())

    def close(self) -> None:
        for route in self._routes.values():
            route.processor.force_flush(self._flush_ms)
            route.processor.shutdown()  # type: ignore[no-untyped-call]

    @property
    def exported(self) -> int:
        return sum(e.exported for e in self.exporters.values())

    @property
    def failed(self) -> int:
        return sum(e.failed for e in self.exporters.values())
