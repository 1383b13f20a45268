"""OTLP/protobuf exports read with their span attribute values left as bytes (issue 35).

Reading a span's attributes through protobuf's Python API builds, for every attribute, a
``KeyValue`` and an ``AnyValue`` wrapper and asks the latter which member it holds: about
1 µs an attribute, most of what ingesting a span cost. Here the export is parsed (by upb, as
before) with a schema of the same wire format in which a span attribute is a ``key`` string
and a ``value`` *bytes* field, the ``AnyValue`` still serialised: a double is its tag and
eight bytes, an int its tag and a varint, a string its tag, length and UTF-8. Those are read
in Python, into a dict by ``attributes`` (what a ``SpanView`` holds) or into the slots a table
names by ``read_slots`` (``mapping.requests``); any other value (an array, a key-value list,
bytes, a member given twice, unknown fields) is parsed as the ``AnyValue`` it is.

What comes out is exactly what ``otlp.span_views`` makes of the same body parsed with the
OpenTelemetry schema, and so are the refusals: whatever the shortcut cannot vouch for is
decoded the old way instead (``NotCanonical``):

* upb merges a ``KeyValue``'s ``value`` given twice, while a bytes field keeps the last one:
  a body is read here only when the parsed export re-serialises to the body's own size (a
  member given twice, or a non-minimal encoding anywhere, would make it shorter), which an
  exporter's own serialisation always does;
* upb validates every string of the export as UTF-8 and refuses a message nested more than
  100 deep: a string value is decoded strictly, and a value parsed on its own, at a depth
  below the export's, is first walked for its depth when it is long enough to be too deep;
  a span with more attributes than are kept is left to upb whole (it validates them all).

Everything besides span attributes (resources, scopes, events, links, status) keeps the
OpenTelemetry schema's own message types.
"""

from __future__ import annotations

import struct
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1 import trace_pb2

from infersight.collector.mapping.spans import AttrValue, attr_size
from infersight.collector.prescan import MAX_WIRE_DEPTH, nesting_exceeds
from infersight.core.records import MAX_DURATION_S, MAX_TOKENS

_PACKAGE: Final = "infersight.collector.wire"


class NotCanonical(Exception):
    """The body is not one this reader vouches for: decode it with the OpenTelemetry schema
    (which then gives the old answer or the old refusal)."""


def _schema() -> type[Message]:
    """``ExportTraceServiceRequest`` with ``Span.attributes`` as (key, serialised value)
    pairs, every other message the OpenTelemetry schema's own."""
    pool = descriptor_pool.Default()
    name = _PACKAGE.replace(".", "/") + ".proto"
    try:
        pool.FindFileByName(name)
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto(name=name, package=_PACKAGE, syntax="proto3")
        proto.dependency.extend(
            [trace_pb2.DESCRIPTOR.name, trace_service_pb2.DESCRIPTOR.name]
        )  # the Resource, Event, Link, Status and scope types come through these
        field = descriptor_pb2.FieldDescriptorProto
        pair = proto.message_type.add(name="KeyValue")
        pair.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
        # Present even when empty (an ``AnyValue`` with no member set), as the message was:
        # otherwise such a body would not re-serialise to its own size.
        pair.oneof_decl.add(name="_value")
        pair.field.add(
            name="value", number=2, type=field.TYPE_BYTES, label=field.LABEL_OPTIONAL,
            oneof_index=0, proto3_optional=True,
        )  # fmt: skip
        retyped = (
            (trace_pb2.Span, "attributes", "KeyValue"),
            (trace_pb2.ScopeSpans, "spans", "Span"),
            (trace_pb2.ResourceSpans, "scope_spans", "ScopeSpans"),
            (trace_service_pb2.ExportTraceServiceRequest, "resource_spans", "ResourceSpans"),
        )
        for message, field_name, local in retyped:
            copy = proto.message_type.add()
            message.DESCRIPTOR.CopyToProto(copy)
            # Nested types stay the originals' (``Span.Event`` …): fields name them in full.
            del copy.nested_type[:]
            del copy.enum_type[:]
            for each in copy.field:
                if each.name == field_name:
                    each.type_name = f".{_PACKAGE}.{local}"
        pool.Add(proto)
    request = pool.FindMessageTypeByName(f"{_PACKAGE}.ExportTraceServiceRequest")
    cls: type[Message] = message_factory.GetMessageClass(request)
    return cls


#: The export with span attribute values as bytes (``_schema``).
ExportRequest: Final = _schema()

_DOUBLE: Final = struct.Struct("<xd").unpack  # the tag byte, then the double
_ANY_VALUE: Final = AnyValue.DESCRIPTOR.full_name
#: ``AnyValue`` members: double, int, bool, string (tag bytes of fields 4, 3, 2, 1).
_TAG_DOUBLE: Final = 0x21
_TAG_INT: Final = 0x18
_TAG_BOOL: Final = 0x10
_TAG_STRING: Final = 0x0A
#: A span attribute's value sits this deep in an export (request, resource spans, scope spans,
#: span, key-value); upb refuses an export nested more than ``MAX_WIRE_DEPTH`` deep.
_VALUE_DEPTH: Final = 5
#: A value shorter than this cannot nest deep enough to be refused (two bytes a level).
_DEEP_BYTES: Final = 2 * (MAX_WIRE_DEPTH - _VALUE_DEPTH)
#: ``AnyValue`` kinds whose value is a number or a bool (never over the size limit).
_NUMERIC: Final = frozenset({"double_value", "int_value", "bool_value"})
#: The size of a value that is none (``attr_size(None)``).
_NONE_SIZE: Final = attr_size(None)


def parse(body: bytes | bytearray) -> Any:
    """The export, or ``NotCanonical`` when the body does not parse as one or does not
    re-serialise to its own size."""
    try:
        message = ExportRequest.FromString(body)
    except (DecodeError, RuntimeError):
        raise NotCanonical from None
    if message.ByteSize() != len(body):
        raise NotCanonical
    return message


def attributes(items: Any, limit: int, most: int) -> tuple[dict[str, AttrValue], int]:
    """``otlp._attributes`` of span attributes given as (key, serialised value) pairs: the
    same dict and the same count of dropped attributes."""
    if len(items) > most:
        # upb validates the values past the first ``most`` too: left to it.
        raise NotCanonical
    out: dict[str, AttrValue] = {}
    dropped = 0
    value: AttrValue
    try:
        for kv in items:
            key: str = kv.key
            raw: bytes = kv.value
            size = len(raw)
            tag = raw[0] if size else 0
            if tag == _TAG_DOUBLE and size == 9:
                value, too_big = _DOUBLE(raw)[0], False
            elif tag == _TAG_STRING and size > 1 and raw[1] == size - 2 < 0x80:
                value = raw[2:].decode()
                too_big = len(value) > limit
            elif tag == _TAG_INT and size == 2 and raw[1] < 0x80:
                value, too_big = raw[1], False
            else:
                value, too_big = _value(raw, limit)
            if too_big or len(key) > limit:
                dropped += 1
                continue
            out[key] = value
    except UnicodeDecodeError:
        raise NotCanonical from None  # upb refuses the export
    return out, dropped


def read_slots(  # noqa: PLR0911, PLR0912, PLR0915 (one loop: a call per attribute costs)
    items: Any, table: dict[str, int], bounds: tuple[int, int, int], slots: int, limit: int,
    most: int,
) -> list[object] | None:  # fmt: skip
    """The values of the attributes ``table`` names (name → slot), in a list of ``slots``
    (``None`` where absent; of a name given twice, the last). ``bounds`` are where the slots
    of counts, labels and refused names start: below the first, a slot holds a time in seconds
    (a double in 0 … ``MAX_DURATION_S``), then a token count (an int in 0 … ``MAX_TOKENS``),
    then a label (a string within ``limit``); a refused name is read as nothing.

    ``None`` when an attribute is not plainly what its slot holds, or is refused, or would be
    dropped by a limit, or another attribute is anything but a number, a bool or a string
    within the limit: such a span is left to the general way. The names in ``table`` must be
    within ``limit``."""
    if len(items) > most:
        return None
    counts, labels, refused = bounds
    values: list[object] = [None] * slots
    value: object
    try:
        for kv in items:
            raw: bytes = kv.value
            key: str = kv.key
            slot = table.get(key)
            tag = raw[0]  # ``IndexError`` when empty (no member set)
            if tag == _TAG_DOUBLE:
                if slot is None:
                    if len(raw) != 9 or len(key) > limit:
                        return None
                    continue
                if slot >= counts:
                    return None
                seconds: float = _DOUBLE(raw)[0]  # ``struct.error`` unless one double alone
                if not 0.0 <= seconds <= MAX_DURATION_S:  # NaN is not
                    return None
                value = seconds
            elif tag == _TAG_INT:
                size = len(raw)
                if size == 2 and raw[1] < 0x80:
                    value = raw[1]
                elif size == 3 and raw[1] >= 0x80 > raw[2]:
                    value = raw[1] & 0x7F | raw[2] << 7
                else:
                    value = _varint(raw)
                    if value is None:
                        return None
                if slot is None:
                    if len(key) > limit:
                        return None
                    continue
                if not counts <= slot < labels or not 0 <= value <= MAX_TOKENS:
                    return None
            elif tag == _TAG_STRING:
                size = len(raw)
                if size > 1 and raw[1] == size - 2 < 0x80:
                    value = raw[2:].decode()
                else:
                    value = _long_string(raw)
                    if value is None:
                        return None
                if len(value) > limit:
                    return None
                if slot is None:
                    if len(key) > limit:
                        return None
                    continue
                if not labels <= slot < refused:
                    return None
            elif slot is None and tag == _TAG_BOOL and len(raw) == 2 and raw[1] < 2:
                if len(key) > limit:
                    return None
                continue
            else:
                return None
            values[slot] = value
    except (struct.error, IndexError):
        return None
    except UnicodeDecodeError:
        raise NotCanonical from None  # upb refuses the export
    return values


def _string(raw: bytes) -> str | None:
    """A string member alone (its tag first), or ``None``; ``NotCanonical`` when it is not
    UTF-8 (upb refuses the export)."""
    size = len(raw)
    if size > 1 and raw[1] == size - 2 < 0x80:
        try:
            return raw[2:].decode()
        except UnicodeDecodeError:
            raise NotCanonical from None
    return _long_string(raw)


def _value(raw: bytes, limit: int) -> tuple[AttrValue, bool]:
    """A value ``attributes`` does not read inline, and whether it is over ``limit``."""
    if not raw:
        return None, limit < _NONE_SIZE  # no member set: sized as a number
    tag = raw[0]
    if tag == _TAG_INT:
        number = _varint(raw)
        if number is not None:
            return number, False
    elif tag == _TAG_BOOL and len(raw) == 2 and raw[1] < 2:
        return raw[1] == 1, False
    elif tag == _TAG_STRING:
        text = _long_string(raw)
        if text is not None:
            return text, len(text) > limit
    # Anything else is parsed as what it is; upb refuses it as it would in the export, but
    # for its depth, which is checked against the export's.
    if len(raw) >= _DEEP_BYTES and nesting_exceeds(raw, _ANY_VALUE, _VALUE_DEPTH):
        raise NotCanonical
    try:
        parsed = AnyValue.FromString(raw)
    except (DecodeError, RuntimeError):
        raise NotCanonical from None
    return read_any(parsed, limit)


def read_any(value: AnyValue, limit: int) -> tuple[AttrValue, bool]:
    """An ``AnyValue``'s value, and whether it is over ``limit``: the bytes of a string or
    bytes, summed over an array's items; a number or a bool never is."""
    kind = value.WhichOneof("value")
    if kind in _NUMERIC:
        return getattr(value, kind), False
    if kind == "string_value":
        text: str = value.string_value
        return text, len(text) > limit
    plain = any_value(value)
    return plain, attr_size(plain) > limit


def any_value(value: AnyValue) -> AttrValue:
    """An ``AnyValue`` as a plain value: arrays as tuples, key-value lists as ``None``."""
    kind = value.WhichOneof("value")
    if kind is None or kind == "kvlist_value":
        return None
    if kind == "array_value":
        return tuple(any_value(item) for item in value.array_value.values)
    result: AttrValue = getattr(value, kind)
    return result


def _varint(raw: bytes) -> int | None:
    """An int member alone (tag, varint to the end) as an int64, or ``None``."""
    size = len(raw)
    if size > 11 or raw[-1] >= 0x80:
        return None
    number = 0
    for position in range(1, size):
        byte = raw[position]
        if (byte >= 0x80) != (position < size - 1):
            return None
        number |= (byte & 0x7F) << (7 * (position - 1))
    if number >> 64:
        return None  # more than 64 bits: left to upb
    return number - (1 << 64) if number >> 63 else number


def _long_string(raw: bytes) -> str | None:
    """A string member alone with a length of two or three varint bytes, or ``None``."""
    size = len(raw)
    if size < 3 or raw[1] < 0x80:
        return None
    if raw[2] < 0x80:
        length, start = (raw[1] & 0x7F) | raw[2] << 7, 3
    elif size > 3 and raw[3] < 0x80:
        length, start = (raw[1] & 0x7F) | (raw[2] & 0x7F) << 7 | raw[3] << 14, 4
    else:
        return None
    if size - start != length:
        return None
    try:
        return raw[start:].decode()
    except UnicodeDecodeError:
        raise NotCanonical from None
