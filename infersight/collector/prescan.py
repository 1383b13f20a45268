"""Bounding the cost of decoding an OTLP body before it is decoded.

Decoding builds one object per message (protobuf) or per container (JSON), and an export
can pack them densely: two bytes make an empty ``ResourceSpans``, three bytes an empty JSON
object, so 20 MiB could become ten million objects and gigabytes of memory before any
per-export limit is checked on the result. These checks bound that number first, in time
linear in the body and without building anything:

* protobuf: every embedded message starts with a tag byte whose field number is below 16
  (all message-typed fields of the OTLP trace schema are) and whose wire type is 2, so the
  count of such bytes is an upper bound on the messages a parse creates. A body of no more
  bytes than the budget is within it as it is; a larger one has them counted in one pass
  (``bytes.translate`` deleting the 15 tag bytes, a chunk at a time). Only when that bound
  exceeds the budget (a large export with much binary or text content) is the wire format
  walked exactly, by the schema, stopping as soon as the budget is spent.
* JSON: ``{`` and ``[`` bytes bound the containers a parse creates; when they exceed the
  budget (brackets inside strings count too), the bound is retaken outside string literals.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from infersight.core.errors import InvalidInput, TooLarge

#: One-byte tags of length-delimited fields 1..15 (``field << 3 | 2``).
_LEN_TAGS: Final = bytes(field << 3 | 2 for field in range(1, 16))
#: Bytes counted per step (a chunk's copy without the tags is the only allocation).
_CHUNK: Final = 1 << 20
#: The decoder's own nesting limit (upb refuses deeper messages).
MAX_WIRE_DEPTH: Final = 100
#: Sizes of the fixed-width wire types (64-bit, 32-bit).
_FIXED: Final = {1: 8, 5: 4}
_JSON_STRING: Final = re.compile(rb'"[^"]*"')


def _schema(root: Descriptor) -> dict[str, dict[int, str]]:
    """Message-typed fields of every message reachable from ``root``: number → type name."""
    out: dict[str, dict[int, str]] = {}
    todo = [root]
    while todo:
        message = todo.pop()
        if message.full_name in out:
            continue
        children = {
            f.number: f.message_type
            for f in message.fields
            if f.type == FieldDescriptor.TYPE_MESSAGE
        }
        out[message.full_name] = {n: t.full_name for n, t in children.items()}
        todo.extend(children.values())
    return out


_SCHEMA: Final = _schema(ExportTraceServiceRequest.DESCRIPTOR)
_ROOT: Final = ExportTraceServiceRequest.DESCRIPTOR.full_name


def _too_many(kind: str, limit: int) -> TooLarge:
    return TooLarge(
        f"the export holds more than {limit} {kind}",
        details={"limit": limit, "reason": "too_many_messages"},
    )


#: Full names of the entry messages that ``check_protobuf`` may count against their limits.
RESOURCE_SPANS: Final = "opentelemetry.proto.trace.v1.ResourceSpans"
SCOPE_SPANS: Final = "opentelemetry.proto.trace.v1.ScopeSpans"
SPAN: Final = "opentelemetry.proto.trace.v1.Span"


def check_protobuf(
    body: bytes | bytearray,
    max_messages: int,
    entries: Mapping[str, tuple[int, Callable[[], TooLarge]]] | None = None,
) -> None:
    """``TooLarge`` if parsing ``body`` would build more than ``max_messages`` messages.

    When the exact walk runs, it also raises the error made by ``entries`` for a message
    type as soon as more than its limit of that type is seen: a body of a million empty
    ``ResourceSpans`` is refused after ``max_resources`` steps, not ``max_messages``. (The
    error is made when raised: one made beforehand would hold the frames, and so the body,
    in a reference cycle.)
    """
    # A body of no more bytes than the budget holds no more tag bytes either: not counted
    # (counting costs about 10 instructions a byte, as much as parsing the body).
    if len(body) <= max_messages or count_tags(body) <= max_messages:
        return
    _Walk(body, max_messages, entries or {}).walk(0, len(body), _ROOT, 0)


def nesting_exceeds(body: bytes | bytearray, kind: str, depth: int) -> bool:
    """Whether ``body``, the content of a ``kind`` message (a full name of the export's
    schema) that sits ``depth`` levels deep in an export (the export is level 0), nests a
    message deeper than ``MAX_WIRE_DEPTH``, or is not one the walk can follow."""
    try:
        _Walk(body, len(body), {}).walk(0, len(body), kind, depth)
    except InvalidInput:  # too deep, or malformed (every message costs two bytes at least)
        return True
    return False


def count_tags(body: bytes | bytearray) -> int:
    """How many bytes of ``body`` are one-byte tags of length-delimited fields 1..15."""
    tags = 0
    for start in range(0, len(body), _CHUNK):
        chunk = body[start : start + _CHUNK]
        tags += len(chunk) - len(chunk.translate(None, _LEN_TAGS))
    return tags


def _undecodable() -> InvalidInput:
    return InvalidInput("undecodable OTLP protobuf", details={"reason": "undecodable"})


def _varint(body: bytes | bytearray, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        try:
            byte = body[pos]
        except IndexError:
            raise _undecodable() from None
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _undecodable()


class _Walk:
    def __init__(
        self,
        body: bytes | bytearray,
        max_messages: int,
        entries: Mapping[str, tuple[int, Callable[[], TooLarge]]],
    ) -> None:
        self.body = body
        self.limit = max_messages
        self.left = max_messages
        self.remaining = {kind: limit for kind, (limit, _) in entries.items()}
        self.errors = {kind: error for kind, (_, error) in entries.items()}

    def walk(self, pos: int, end: int, kind: str, depth: int) -> None:
        """Count the messages in ``body[pos:end]`` (a ``kind``) against the budgets."""
        body = self.body
        children = _SCHEMA[kind]
        while pos < end:
            tag = body[pos]
            pos += 1
            if tag >= 0x80:
                tag, pos = _varint(body, pos - 1)
            wire = tag & 7
            if wire == 2:
                size = body[pos] if pos < end else 0x80
                if size < 0x80:
                    pos += 1
                else:
                    size, pos = _varint(body, pos)
                if pos + size > end:
                    raise _undecodable()
                child = children.get(tag >> 3)
                if child is not None:
                    self.enter(child, depth + 1)
                    self.walk(pos, pos + size, child, depth + 1)
                pos += size
            elif wire == 0:
                _, pos = _varint(body, pos)
            else:
                pos += _FIXED.get(wire, end + 1)  # groups (3, 4) and 6, 7 do not occur in OTLP
        if pos != end:
            raise _undecodable()

    def enter(self, kind: str, depth: int) -> None:
        self.left -= 1
        if self.left < 0:
            raise _too_many("messages", self.limit)
        if depth > MAX_WIRE_DEPTH:
            raise InvalidInput("OTLP protobuf nested too deeply", details={"reason": "too_deep"})
        remaining = self.remaining.get(kind)
        if remaining is not None:
            self.remaining[kind] = remaining - 1
            if remaining < 1:
                raise self.errors[kind]()


def check_json(body: bytes | bytearray, max_containers: int) -> None:
    """``TooLarge`` if parsing ``body`` would build more than ``max_containers`` objects
    and arrays."""
    if body.count(b"{") + body.count(b"[") <= max_containers:
        return
    # Retaken outside string literals, in C and linear time: escape pairs are removed first
    # (left to right, as JSON reads them), so every quote left delimits a string and a
    # pattern with no alternatives to retry finds them.
    bare = body.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in body else body
    bare = _JSON_STRING.sub(b"", bare)
    if bare.count(b"{") + bare.count(b"[") > max_containers:
        raise _too_many("JSON objects and arrays", max_containers)
