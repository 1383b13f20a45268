"""OTLP/trace payload decoding: protobuf and OTLP/JSON bodies into ``SpanView`` lists, and
the ``ExportTraceServiceResponse`` bodies sent back.

OTLP/JSON differs from protobuf's canonical JSON mapping in one way that matters here: trace
and span ids are hex strings, not base64; they are converted before ``json_format`` parses
the rest (which already accepts string-encoded 64-bit integers and enum numbers).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from collector.mapping.spans import AttrValue, SpanView
from core.errors import InvalidInput, TooLarge

PROTOBUF: Final = "application/x-protobuf"
JSON: Final = "application/json"
_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps on what one export may carry."""

    max_body_bytes: int = 20 * 1024 * 1024
    max_spans: int = 10_000
    max_attribute_bytes: int = 4096

    def __post_init__(self) -> None:
        if min(self.max_body_bytes, self.max_spans, self.max_attribute_bytes) <= 0:
            raise InvalidInput("limits must be positive")


@dataclass(frozen=True, slots=True)
class Decoded:
    spans: tuple[SpanView, ...]
    dropped_attributes: int


def parse_protobuf(body: bytes) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(body)
    except (DecodeError, RuntimeError) as exc:
        raise InvalidInput("undecodable OTLP protobuf", details={"error": str(exc)}) from None
    return message


def _hex_to_b64(value: Any) -> Any:
    if not isinstance(value, str) or not value:
        return value
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise InvalidInput(
            "OTLP/JSON ids must be hex strings", details={"id": value[:64]}
        ) from None
    return base64.b64encode(raw).decode("ascii")


def _fix_ids(node: Any) -> None:
    """Rewrite hex ids in place, in spans and in their links."""
    for resource_spans in node.get("resourceSpans") or ():
        for scope_spans in resource_spans.get("scopeSpans") or ():
            for span in scope_spans.get("spans") or ():
                for owner in (span, *(span.get("links") or ())):
                    for key in _ID_FIELDS:
                        if key in owner:
                            owner[key] = _hex_to_b64(owner[key])


def parse_json(body: bytes) -> ExportTraceServiceRequest:
    try:
        document = json.loads(body)
        if not isinstance(document, dict):
            raise InvalidInput("OTLP/JSON body must be an object")
        _fix_ids(document)
        message = ExportTraceServiceRequest()
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
        return message
    except (ValueError, TypeError, AttributeError, json_format.ParseError, binascii.Error) as exc:
        raise InvalidInput("undecodable OTLP/JSON", details={"error": str(exc)[:200]}) from None


def parse(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    media = content_type.split(";", 1)[0].strip().lower()
    if media == PROTOBUF:
        return parse_protobuf(body)
    if media == JSON:
        return parse_json(body)
    raise InvalidInput("unsupported content type", details={"content_type": content_type[:100]})


def _value(value: AnyValue) -> AttrValue:
    kind = value.WhichOneof("value")
    if kind is None or kind == "kvlist_value":
        return None
    if kind == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    result: AttrValue = getattr(value, kind)
    return result


def _size(value: AttrValue) -> int:
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, tuple):
        return sum(_size(item) for item in value)
    return 8


#: Scalar ``AnyValue`` kinds read inline, and whether their size counts against the limit.
_SCALAR_SIZED: Final = {
    "string_value": True,
    "double_value": False,
    "int_value": False,
    "bool_value": False,
}


def _attributes(items: Any, limit: int) -> tuple[dict[str, AttrValue], int]:
    """Attributes as a dict; values (or keys) over ``limit`` bytes are dropped and counted.

    The common scalar kinds are read inline: this loop runs for every attribute of every
    span and dominates decoding cost.
    """
    out: dict[str, AttrValue] = {}
    dropped = 0
    sized = _SCALAR_SIZED.get
    for kv in items:
        key = kv.key
        any_value = kv.value
        kind = any_value.WhichOneof("value")
        is_string = sized(kind)
        value: AttrValue
        if is_string is None:
            value = _value(any_value)
            too_big = _size(value) > limit
        else:
            value = getattr(any_value, kind)
            too_big = is_string and len(value) > limit  # type: ignore[arg-type]
        if too_big or len(key) > limit:
            dropped += 1
            continue
        out[key] = value
    return out, dropped


def span_views(message: ExportTraceServiceRequest, limits: Limits) -> Decoded:
    """Flatten the export into span views, enforcing the span and attribute limits."""
    count = sum(len(ss.spans) for rs in message.resource_spans for ss in rs.scope_spans)
    if count > limits.max_spans:
        raise TooLarge(
            "too many spans in one export", details={"spans": count, "limit": limits.max_spans}
        )
    return Decoded(*_collect(message, limits))


def _collect(
    message: ExportTraceServiceRequest, limits: Limits
) -> tuple[tuple[SpanView, ...], int]:
    views: list[SpanView] = []
    dropped = 0
    for span, resource, scope in _iter(message):
        attrs, lost = _attributes(span.attributes, limits.max_attribute_bytes)
        dropped += lost
        status = span.status
        views.append(
            SpanView(  # positional, in field order: this runs for every span received
                _hex_id(span.trace_id, 16),
                _hex_id(span.span_id, 8),
                span.name[: limits.max_attribute_bytes],
                span.start_time_unix_nano,
                span.end_time_unix_nano,
                _hex_id(span.parent_span_id, 8),
                span.kind,
                attrs,
                resource,
                scope,
                status.code,
                status.message[:256],
            )
        )
    return tuple(views), dropped


def _iter(message: ExportTraceServiceRequest) -> Iterator[tuple[Any, dict[str, AttrValue], str]]:
    for resource_spans in message.resource_spans:
        resource, _ = _attributes(resource_spans.resource.attributes, 4096)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                yield span, resource, scope


def _hex_id(raw: bytes, size: int) -> str:
    """Lowercase hex of a well-sized, non-zero id; "" otherwise (the mapper rejects it)."""
    if len(raw) != size or not any(raw):
        return ""
    return raw.hex()


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
