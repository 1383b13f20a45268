"""OTLP/trace payload decoding: protobuf and OTLP/JSON bodies into ``SpanView`` lists, and
the ``ExportTraceServiceResponse`` bodies sent back.

OTLP/JSON is decoded straight into span views by ``collector.otlp_json`` (no protobuf copy
of the export is built); protobuf is parsed by upb, then walked.

Every export is bounded by its structure before the expensive work: the messages (or JSON
containers) a parse would build are counted first (``collector.prescan``), then resource,
scope and span entries are counted on the parsed export (or JSON document) before any span
is walked, attributes beyond ``max_attributes`` per owner are dropped and counted, and JSON
attribute values may nest at most ``max_depth`` levels. So the CPU and memory an export costs
are bounded by the limits, not by how densely a hostile body packs empty entries.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from infersight.collector import otlp_json, otlp_wire
from infersight.collector.mapping.spans import CHUNK_EVENTS, AttrValue, SpanView
from infersight.collector.prescan import RESOURCE_SPANS, SCOPE_SPANS, SPAN, check_protobuf
from infersight.core.errors import InvalidInput, TooLarge

PROTOBUF: Final = "application/x-protobuf"
_Read = TypeVar("_Read")
JSON: Final = "application/json"


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on what one export may carry (and so on what decoding it may cost)."""

    max_body_bytes: int = 20 * 1024 * 1024
    max_spans: int = 10_000
    max_attribute_bytes: int = 4096
    #: ``ResourceSpans`` and ``ScopeSpans`` entries (each, per export).
    max_resources: int = 10_000
    max_scopes: int = 10_000
    #: Attributes kept per span, resource or scope (the OpenTelemetry SDK's default limit);
    #: the rest are dropped and counted.
    max_attributes: int = 128
    #: Messages a protobuf parse may build: about 32 MB of parsed protobuf (64 bytes a
    #: message). A 10,000-span vLLM export holds about 280,000.
    max_messages: int = 500_000
    #: The same for OTLP/JSON, whose objects cost far more (a Python dict each, 200 bytes
    #: and up): about 70 MB. A 10,000-span vLLM export in OTLP/JSON holds about 280,000.
    max_json_containers: int = 300_000
    #: Nesting of attribute values (arrays in arrays, key-value lists) in OTLP/JSON.
    max_depth: int = 16
    #: Concatenated gzip members in one body.
    max_members: int = 64
    #: Inflated size over compressed size (checked past the first MiB inflated).
    max_inflation_ratio: int = 256

    def __post_init__(self) -> None:
        values = (
            self.max_body_bytes, self.max_spans, self.max_attribute_bytes, self.max_resources,
            self.max_scopes, self.max_attributes, self.max_messages, self.max_depth,
            self.max_members, self.max_inflation_ratio, self.max_json_containers,
        )  # fmt: skip
        if min(values) <= 0:
            raise InvalidInput("limits must be positive")


@dataclass(frozen=True, slots=True)
class Decoded:
    spans: tuple[SpanView, ...]
    dropped_attributes: int


def _refused(message: str, reason: str, **details: Any) -> TooLarge:
    return TooLarge(message, details={**details, "reason": reason})


def _too_many_resources(limits: Limits) -> TooLarge:
    return _refused("too many resources in one export", "too_many_resources",
                    limit=limits.max_resources)  # fmt: skip


def _too_many_scopes(limits: Limits) -> TooLarge:
    return _refused("too many scopes in one export", "too_many_scopes",
                    limit=limits.max_scopes)  # fmt: skip


def _too_many_spans(limits: Limits) -> TooLarge:
    return _refused("too many spans in one export", "too_many_spans", limit=limits.max_spans)


def parse_protobuf(
    body: bytes | bytearray, limits: Limits | None = None
) -> ExportTraceServiceRequest:
    limits = limits or Limits()
    prescan_protobuf(body, limits)
    return parse_checked(body)


def prescan_protobuf(body: bytes | bytearray, limits: Limits) -> None:
    """Refuse a body whose parse would cost more than the limits allow (``prescan``)."""
    entries = {
        RESOURCE_SPANS: (limits.max_resources, lambda: _too_many_resources(limits)),
        SCOPE_SPANS: (limits.max_scopes, lambda: _too_many_scopes(limits)),
        SPAN: (limits.max_spans, lambda: _too_many_spans(limits)),
    }
    check_protobuf(body, limits.max_messages, entries)


def parse_checked(body: bytes | bytearray) -> ExportTraceServiceRequest:
    """The export, its cost bounded already (``_prescan``)."""
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(body)
    except (DecodeError, RuntimeError) as exc:
        raise InvalidInput("undecodable OTLP protobuf", details={"error": str(exc)}) from None
    return message


def parse(
    body: bytes | bytearray, content_type: str, limits: Limits | None = None
) -> ExportTraceServiceRequest:
    """A protobuf body as its message (OTLP/JSON is decoded straight into views: ``decode``)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == PROTOBUF:
        return parse_protobuf(body, limits)
    raise InvalidInput("unsupported content type", details={"content_type": content_type[:100]})


def decode(body: bytes | bytearray, content_type: str, limits: Limits | None = None) -> Decoded:
    """The span views of a protobuf or OTLP/JSON body, every limit enforced."""
    limits = limits or Limits()
    media = content_type.split(";", 1)[0].strip().lower()
    if media == PROTOBUF:
        return decode_protobuf(body, limits)
    if media == JSON:
        return Decoded(*otlp_json.decode(body, limits))
    raise InvalidInput("unsupported content type", details={"content_type": content_type[:100]})


def decode_protobuf(body: bytes | bytearray, limits: Limits) -> Decoded:
    """The span views of a protobuf body (``read_protobuf``)."""
    return read_protobuf(
        body,
        limits,
        lambda message: Decoded(*_collect(message, limits, otlp_wire.attributes)),
        lambda message: span_views(message, limits),
    )


def read_protobuf(
    body: bytes | bytearray,
    limits: Limits,
    walk: Callable[[Any], _Read],
    walk_parsed: Callable[[ExportTraceServiceRequest], _Read],
) -> _Read:
    """``walk`` of the export read with span attribute values as bytes (``collector.
    otlp_wire``), its entries counted; where that reader does not vouch for the body,
    ``walk_parsed`` of it parsed with the OpenTelemetry schema. Every limit is enforced and
    every refusal is the one the OpenTelemetry schema's parse gives, in the same order."""
    prescan_protobuf(body, limits)
    try:
        message = otlp_wire.parse(body)
        check_structure(message, limits)
        return walk(message)
    except otlp_wire.NotCanonical:
        pass
    except TooLarge:
        parse_checked(body)  # a body upb refuses is refused as undecodable first, as before
        raise
    return walk_parsed(parse_checked(body))


def _attributes(items: Any, limit: int, most: int) -> tuple[dict[str, AttrValue], int]:
    """Attributes as a dict; values (or keys) over ``limit`` bytes, and attributes beyond
    the first ``most``, are dropped and counted; of a key given twice, the last one kept.
    (A span's attributes are mostly read by ``otlp_wire.attributes``; this reads a
    resource's, and a span's where that reader does not vouch for the body.)
    """
    out: dict[str, AttrValue] = {}
    dropped = 0
    if len(items) > most:
        dropped = len(items) - most
        items = items[:most]
    read = otlp_wire.read_any
    for kv in items:
        key = kv.key
        value, too_big = read(kv.value, limit)
        if too_big or len(key) > limit:
            dropped += 1
            continue
        out[key] = value
    return out, dropped


def check_structure(message: Any, limits: Limits) -> None:
    """``TooLarge`` when the export holds too many resource, scope or span entries; stops
    counting at the first limit exceeded, so it costs at most ``max_scopes`` steps."""
    resources = message.resource_spans
    if len(resources) > limits.max_resources:
        raise _too_many_resources(limits)
    scopes = spans = 0
    for resource_spans in resources:
        scope_spans = resource_spans.scope_spans
        scopes += len(scope_spans)
        if scopes > limits.max_scopes:
            raise _too_many_scopes(limits)
        for entry in scope_spans:
            spans += len(entry.spans)
            if spans > limits.max_spans:
                raise _too_many_spans(limits)


def span_views(message: ExportTraceServiceRequest, limits: Limits) -> Decoded:
    """Flatten the export into span views, enforcing the entry and attribute limits."""
    check_structure(message, limits)
    return Decoded(*_collect(message, limits, _attributes))


def _collect(
    message: Any, limits: Limits, read: Callable[[Any, int, int], tuple[dict[str, AttrValue], int]]
) -> tuple[tuple[SpanView, ...], int]:
    """The views of ``message`` (an ``ExportTraceServiceRequest`` or ``otlp_wire``'s), its
    span attributes read by ``read`` (``_attributes`` or ``otlp_wire.attributes``)."""
    views: list[SpanView] = []
    append = views.append
    dropped = 0
    most = limits.max_attributes
    size = limits.max_attribute_bytes
    for resource_spans in message.resource_spans:
        resource = resource_attributes(resource_spans, most)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                view, lost = view_of(span, resource, scope, size, most, read)
                dropped += lost
                append(view)
    return tuple(views), dropped


def resource_attributes(resource_spans: Any, most: int) -> dict[str, AttrValue]:
    """The attributes of a ``ResourceSpans``' resource (values up to 4096 bytes)."""
    return _attributes(resource_spans.resource.attributes, 4096, most)[0]


def view_of(
    span: Any,
    resource: dict[str, AttrValue],
    scope: str,
    size: int,
    most: int,
    read: Callable[[Any, int, int], tuple[dict[str, AttrValue], int]],
) -> tuple[SpanView, int]:
    """The view of one span, and how many of its attributes were dropped."""
    attrs, dropped = read(span.attributes, size, most)
    status = span.status
    events = span.events
    return (
        SpanView(  # positional, in field order: this runs for every span received
            hex_id(span.trace_id, ZERO_TRACE),
            hex_id(span.span_id, ZERO_SPAN),
            span.name[:size],
            span.start_time_unix_nano,
            span.end_time_unix_nano,
            hex_id(span.parent_span_id, ZERO_SPAN),
            span.kind,
            attrs,
            resource,
            scope,
            status.code,
            status.message[:256],
            _first_chunk(events) if events else 0,
        ),
        dropped,
    )


def _first_chunk(events: Any) -> int:
    """The time of the earliest streamed-chunk event (0: none); events are bounded by the
    export's message count (``Limits.max_messages``)."""
    times = [e.time_unix_nano for e in events if e.name in CHUNK_EVENTS and e.time_unix_nano]
    return min(times) if times else 0


ZERO_TRACE: Final = bytes(16)
ZERO_SPAN: Final = bytes(8)


def hex_id(raw: bytes, zero: bytes) -> str:
    """Lowercase hex of an id of ``zero``'s size that is not ``zero``; "" otherwise (the
    mapper rejects it)."""
    return raw.hex() if len(raw) == len(zero) and raw != zero else ""


def response_body(rejected: int, message: str, content_type: str) -> bytes:
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.CopyFrom(
            ExportTracePartialSuccess(rejected_spans=rejected, error_message=message)
        )
    if content_type.split(";", 1)[0].strip().lower() == JSON:
        return json.dumps(json_format.MessageToDict(response)).encode()
    body: bytes = response.SerializeToString()
    return body
