"""OTLP/JSON bodies straight into ``SpanView`` lists, without a protobuf copy.

``google.protobuf.json_format.ParseDict`` over a ``json.loads`` tree held two full copies of
the export (the dict tree, then the protobuf tree) and cost, in pure Python, about seven
times the CPU per byte of decoding the same export as protobuf. Here orjson builds the tree
(its size bounded first by ``collector.prescan.check_json``) and one walk reads only what the
mapping needs, straight into span views; each span's subtree is released as soon as it is
read, so the peak is the tree plus the views, never two trees.

What it accepts follows ``ParseDict(..., ignore_unknown_fields=True)`` for the fields it
reads (``tests/collector/test_collector_otlp_json.py`` holds the two side by side):
lowerCamelCase or proto field names; 64-bit integers as numbers or decimal strings; enums by
name or number; ``bytesValue`` in base64; trace and span ids in hex, as OTLP/JSON specifies
(not base64). Unknown fields are ignored, and so are the fields nothing reads (links, dropped
counts, trace state), which are therefore not validated either; of the events only the
streamed-chunk ones are read (their time: a client's TTFT), and a malformed one is skipped.

Limits are those of the protobuf path: entries are counted before any span is read
(``TooLarge``), keyless attributes are dropped, attributes beyond ``max_attributes`` per
owner and values or keys over ``max_attribute_bytes`` are dropped and counted, and
attribute values may nest ``max_depth`` levels (``InvalidInput``, reason ``too_deep``).
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import orjson

from infersight.collector.mapping.spans import CHUNK_EVENTS, AttrValue, SpanView, attr_size
from infersight.collector.prescan import check_json
from infersight.core.errors import InvalidInput, TooLarge

if TYPE_CHECKING:
    from infersight.collector.otlp import Limits

_SPAN_KINDS: Final = {
    "SPAN_KIND_UNSPECIFIED": 0, "SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3, "SPAN_KIND_PRODUCER": 4, "SPAN_KIND_CONSUMER": 5,
}  # fmt: skip
_STATUS_CODES: Final = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}
_INT64: Final = (-(1 << 63), (1 << 63) - 1)
_UINT64: Final = (0, (1 << 64) - 1)
_INT32: Final = (-(1 << 31), (1 << 31) - 1)
#: ``AnyValue`` members, by both spellings, to the canonical one.
_VALUE_KINDS: Final = {
    "stringValue": "string", "string_value": "string",
    "boolValue": "bool", "bool_value": "bool",
    "intValue": "int", "int_value": "int",
    "doubleValue": "double", "double_value": "double",
    "arrayValue": "array", "array_value": "array",
    "kvlistValue": "kvlist", "kvlist_value": "kvlist",
    "bytesValue": "bytes", "bytes_value": "bytes",
}  # fmt: skip
_SPECIAL_DOUBLES: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def undecodable(error: str) -> InvalidInput:
    return InvalidInput("undecodable OTLP/JSON", details={"error": error[:200]})


def too_deep(limit: int) -> InvalidInput:
    return InvalidInput(
        f"OTLP/JSON nested too deeply (attribute values may nest {limit} levels)",
        details={"limit": limit, "reason": "too_deep"},
    )


def _field(node: dict[str, Any], camel: str, snake: str) -> Any:
    value = node.get(camel)
    return node.get(snake) if value is None else value


def _object(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise undecodable(f"{what} must be an object")
    return value


def _array(node: dict[str, Any], camel: str, snake: str) -> list[Any]:
    value = _field(node, camel, snake)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(f"OTLP/JSON {camel} must be an array")
    return value


def _entries(node: Any, camel: str, snake: str) -> list[Any]:
    """For counting only: what is not an object holds no entries (it is refused later)."""
    if not isinstance(node, dict):
        return []
    value = _field(node, camel, snake)
    return value if isinstance(value, list) else []


def _string(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise undecodable(f"{what} must be a string")
    return value


def _integer(value: Any, bounds: tuple[int, int], what: str) -> int:
    """A 64-bit (or 32-bit) integer given as a JSON number or a decimal string."""
    if value is None:
        return 0
    if isinstance(value, bool):
        raise undecodable(f"{what} must be an integer")
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        if not value.is_integer():
            raise undecodable(f"{what} must be an integer")
        number = int(value)
    elif isinstance(value, str) and " " not in value:
        try:
            number = int(value)
        except ValueError:
            raise undecodable(f"{what} must be an integer") from None
    else:
        raise undecodable(f"{what} must be an integer")
    if not bounds[0] <= number <= bounds[1]:
        raise undecodable(f"{what} out of range")
    return number


def _enum(value: Any, names: dict[str, int], what: str) -> int:
    if isinstance(value, str):
        number = names.get(value)
        if number is not None:
            return number
        try:
            return _integer(int(value), _INT32, what)
        except ValueError:
            return 0  # an unknown name is ignored, as ``ignore_unknown_fields`` does
    return _integer(value, _INT32, what)


def _id(value: Any, size: int) -> str:
    """Lowercase hex of a well-sized, non-zero id; "" otherwise (the mapper rejects it)."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str):
        raise undecodable("ids must be strings")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise InvalidInput(
            "OTLP/JSON ids must be hex strings", details={"id": value[:64]}
        ) from None
    if len(raw) != size or not any(raw):
        return ""
    return raw.hex()


def _double(value: Any) -> float:
    if isinstance(value, bool):
        raise undecodable("doubleValue must be a number")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        special = _SPECIAL_DOUBLES.get(value)
        if special is not None:
            return special
        try:
            return float(value)
        except ValueError:
            pass
    raise undecodable("doubleValue must be a number")


def _bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise undecodable("bytesValue must be a base64 string")
    try:
        return base64.urlsafe_b64decode(value.replace("+", "-").replace("/", "_") + "==")
    except (binascii.Error, ValueError):
        raise undecodable("bytesValue must be a base64 string") from None


def _member(node: dict[str, Any]) -> tuple[str | None, Any]:
    """The one value an ``AnyValue`` holds, as (canonical kind, value)."""
    kind = None
    value: Any = None
    for key, item in node.items():
        found = _VALUE_KINDS.get(key)
        if found is None or item is None:
            continue  # unknown fields are ignored
        if kind is not None:
            raise undecodable("an attribute value may hold one value only")
        kind, value = found, item
    return kind, value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise undecodable("boolValue must be true or false")
    return value


_SCALARS: Final[dict[str, Callable[[Any], AttrValue]]] = {
    "string": lambda value: _string(value, "stringValue"),
    "int": lambda value: _integer(value, _INT64, "intValue"),
    "double": _double,
    "bool": _bool,
    "bytes": _bytes,
}


def _value(node: Any, depth: int, limit: int) -> AttrValue:
    """An ``AnyValue`` object as the protobuf path reads it (``None`` for a key-value list or
    an empty value); refused past ``limit`` levels of arrays and key-value lists."""
    if depth > limit:
        raise too_deep(limit)
    if node is None:
        return None
    if not isinstance(node, dict):
        raise undecodable("attribute values must be objects")
    kind, value = _member(node)
    if kind is None:
        return None
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        result: AttrValue = scalar(value)
        return result
    values = _array(_object(value, kind + "Value"), "values", "values")
    if kind == "array":
        return tuple(_value(item, depth + 1, limit) for item in values)
    for item in values:  # a key-value list: nothing reads it, but its nesting is bounded
        _value(_object(item, "kvlistValue values").get("value"), depth + 1, limit)
    return None


def _attributes(
    owner: dict[str, Any], limit: int, most: int, depth: int
) -> tuple[dict[str, AttrValue], int]:
    """Attributes as a dict, as ``collector.otlp._attributes`` reads them from protobuf;
    keyless ones are dropped uncounted (they map to nothing)."""
    out: dict[str, AttrValue] = {}
    dropped = 0
    kept = 0
    for item in _array(owner, "attributes", "attributes"):
        key = item.get("key") if isinstance(item, dict) else None
        if not key:
            continue
        if kept == most:
            dropped += 1  # beyond the limit: dropped before it is read
            continue
        kept += 1
        if not isinstance(key, str):
            raise undecodable("attribute keys must be strings")
        value = _value(item.get("value"), 0, depth)
        if len(key) > limit or attr_size(value) > limit:
            dropped += 1
            continue
        out[key] = value
    return out, dropped


def _too_many(what: str, limit: int) -> TooLarge:
    return TooLarge(f"too many {what} in one export",
                    details={"limit": limit, "reason": f"too_many_{what}"})  # fmt: skip


def _count(resources: list[Any], limits: Limits) -> None:
    """``TooLarge`` before anything is read when the export holds too many entries."""
    if len(resources) > limits.max_resources:
        raise _too_many("resources", limits.max_resources)
    scopes = spans = 0
    for resource_spans in resources:
        entries = _entries(resource_spans, "scopeSpans", "scope_spans")
        scopes += len(entries)
        if scopes > limits.max_scopes:
            raise _too_many("scopes", limits.max_scopes)
        for scope_spans in entries:
            spans += len(_entries(scope_spans, "spans", "spans"))
            if spans > limits.max_spans:
                raise _too_many("spans", limits.max_spans)


def load(body: bytes | bytearray, limits: Limits) -> dict[str, Any]:
    """The document as orjson's tree, its size bounded first."""
    check_json(body, limits.max_json_containers)
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc) or "recursion" in str(exc).lower():
            raise too_deep(limits.max_depth) from None
        raise undecodable(str(exc)) from None
    if not isinstance(document, dict):
        raise InvalidInput("OTLP/JSON body must be an object")
    return document


def decode(body: bytes | bytearray, limits: Limits) -> tuple[tuple[SpanView, ...], int]:
    """The export's span views and the number of attributes dropped."""
    document = load(body, limits)
    resources = _array(document, "resourceSpans", "resource_spans")
    _count(resources, limits)
    views: list[SpanView] = []
    dropped = 0
    most, size, depth = limits.max_attributes, limits.max_attribute_bytes, limits.max_depth
    for index, entry in enumerate(resources):
        resources[index] = None  # released once read
        resource_spans = _object(entry, "resourceSpans entries")
        resource_node = _object(resource_spans.get("resource"), "resource")
        resource, _ = _attributes(resource_node, 4096, most, depth)
        for scope_entry in _array(resource_spans, "scopeSpans", "scope_spans"):
            scope_spans = _object(scope_entry, "scopeSpans entries")
            scope = _string(_object(scope_spans.get("scope"), "scope").get("name"), "scope name")
            spans = _array(scope_spans, "spans", "spans")
            for position, node in enumerate(spans):
                spans[position] = None
                if not isinstance(node, dict):
                    raise InvalidInput("OTLP/JSON spans must be objects")
                attrs, lost = _attributes(node, size, most, depth)
                dropped += lost
                status = _object(node.get("status"), "status")
                views.append(
                    SpanView(
                        _id(_field(node, "traceId", "trace_id"), 16),
                        _id(_field(node, "spanId", "span_id"), 8),
                        _string(node.get("name"), "name")[:size],
                        _integer(_field(node, "startTimeUnixNano", "start_time_unix_nano"),
                                 _UINT64, "startTimeUnixNano"),
                        _integer(_field(node, "endTimeUnixNano", "end_time_unix_nano"),
                                 _UINT64, "endTimeUnixNano"),
                        _id(_field(node, "parentSpanId", "parent_span_id"), 8),
                        _enum(node.get("kind"), _SPAN_KINDS, "kind"),
                        attrs,
                        resource,
                        scope,
                        _enum(status.get("code"), _STATUS_CODES, "status code"),
                        _string(status.get("message"), "status message")[:256],
                        _first_chunk(node),
                    )
                )  # fmt: skip
    return tuple(views), dropped


def _first_chunk(node: dict[str, Any]) -> int:
    """The time of the earliest streamed-chunk event of a span (0: none). Events are read
    only for this; one that is malformed is skipped, as the fields nothing reads are."""
    events = node.get("events")
    if not events or not isinstance(events, list):
        return 0
    earliest = 0
    for event in events:
        if not isinstance(event, dict) or event.get("name") not in CHUNK_EVENTS:
            continue
        try:
            at = _integer(_field(event, "timeUnixNano", "time_unix_nano"), _UINT64, "time")
        except InvalidInput:
            continue
        if at and (not earliest or at < earliest):
            earliest = at
    return earliest
