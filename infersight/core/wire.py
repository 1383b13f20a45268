"""The central-ingest wire format: one batch of one kind, as a sidecar ships it to the API.

A body is ``MAGIC``, one byte naming the kind (``WireKind``: the spool's kind numbers), a
4-byte big-endian count, then that many entries, each a 4-byte big-endian length and a JSON
list or object: a request or client record as its values in field order (``RECORD_FIELDS``,
``CLIENT_FIELDS``; the start as integer microseconds since the epoch, so it round-trips
exactly; a request record without the labels only the store sets from a trace's attribution
leaves them out, ``SIDECAR_FIELDS``, as sidecars before them wrote it), a GPU or server
sample as its fields by name (``ts`` in microseconds). The body may
be gzip-compressed (``Content-Encoding: gzip``); ``decode_batch`` inflates it within a bound.

A batch of late parallel-sampling sequences (``WireKind.SEQUENCE``, added after the first
four kinds: a sidecar shipping them to an older API gets a 400 naming the unknown kind, and
falls back, ``collector.remote_sink``) holds one object per ``core.sequences.LateSequence``:
``{"request": [start, trace id, span id], "record": [values], "members": [span ids]}`` (the
stored request's key, the sequences' record as a request record's entry, the span ids of the
sequences it holds, at most ``MAX_MEMBERS``). Keys other than these are ignored, so that a
later sidecar may add some.

A batch of attributions (``WireKind.ATTRIBUTION``, what gateway and client spans named of
their traces: ``core.attribution``) holds one list per ``Attribution`` in
``ATTRIBUTION_FIELDS`` order, the start in microseconds; an API older than it answers 400
naming the unknown kind (``KindUnsupported`` to the sender).

Decoding trusts nothing: every value goes through the record's or sample's constructor, so a
batch from the wire is validated exactly as one from an exporter; any malformed entry refuses
the whole batch with ``InvalidInput`` (the sender isolates the bad one, as it does for the
store). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum, IntEnum
from operator import attrgetter
from typing import Any, Final

from infersight.core.attribution import ATTRIBUTION_FIELDS, Attribution
from infersight.core.client import CLIENT_FIELDS, ClientRecord, TtftSource
from infersight.core.errors import InvalidInput, TooLarge
from infersight.core.records import RECORD_FIELDS, SIDECAR_FIELDS, RequestRecord, check_ids
from infersight.core.samples import EngineSample, GpuSample, ServerSample
from infersight.core.sequences import LateSequence

MAGIC: Final = b"ISW1"
#: The media type of a body.
MEDIA_TYPE: Final = "application/vnd.infersight.batch"
#: The most entries one body may hold (the shipper's batches are 2,000).
MAX_ENTRIES: Final = 20_000
#: The most bytes a gzip body may inflate to.
MAX_INFLATED_BYTES: Final = 64 * 1024 * 1024
#: The most sequences one late-sequence entry may hold (vLLM's ``n`` is far below it).
MAX_MEMBERS: Final = 1024
_HEAD: Final = struct.Struct(">4sBI")
_LEN: Final = struct.Struct(">I")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class WireKind(IntEnum):
    """What a batch holds (the spool's numbers for the same kinds)."""

    RECORD = 1
    GPU = 3
    SERVER = 4
    CLIENT = 5
    #: Late parallel-sampling sequences to fold into stored requests (no spool kind).
    SEQUENCE = 6
    #: What gateway and client spans named of their traces (``core.attribution``).
    ATTRIBUTION = 7


class KindUnsupported(InvalidInput):
    """The receiving API predates a batch kind (it answered 400, unknown batch kind)."""


Batch = (
    list[RequestRecord]
    | list[ClientRecord]
    | list[GpuSample]
    | list[ServerSample]
    | list[LateSequence]
    | list[Attribution]
)

_RECORD_VALUES: Final = attrgetter(*RECORD_FIELDS)
_ATTRIBUTION_VALUES: Final = attrgetter(*ATTRIBUTION_FIELDS)
_CLIENT_VALUES: Final = attrgetter(*CLIENT_FIELDS)


def _micros(ts: datetime) -> int:
    return (ts - _EPOCH) // timedelta(microseconds=1)


def _from_micros(value: Any) -> datetime:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput("a timestamp must be integer microseconds since the epoch")
    try:
        return _EPOCH + timedelta(microseconds=value)
    except OverflowError:
        raise InvalidInput("a timestamp is out of range") from None


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    raise TypeError(f"cannot encode {type(value).__name__}")


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), default=_plain).encode()


def _values(record: RequestRecord | ClientRecord) -> list[Any]:
    if isinstance(record, RequestRecord):
        values = list(_RECORD_VALUES(record))
        values[RECORD_FIELDS.index("start")] = _micros(record.start)
        if not any(values[len(SIDECAR_FIELDS) :]):
            # A sidecar's record (no attributed labels): the entry an API before them reads.
            del values[len(SIDECAR_FIELDS) :]
    else:
        values = list(_CLIENT_VALUES(record))
        values[CLIENT_FIELDS.index("start")] = _micros(record.start)
    return values


def _sample(sample: GpuSample | ServerSample) -> dict[str, Any]:
    values = dataclasses.asdict(sample)
    values["ts"] = _micros(sample.ts)
    return values


def _late(fold: LateSequence) -> dict[str, Any]:
    start, trace_id, span_id = fold.request
    return {
        "request": [_micros(start), trace_id, span_id],
        "record": _values(fold.record),
        "members": list(fold.members),
    }


def _attribution(item: Attribution) -> list[Any]:
    values = list(_ATTRIBUTION_VALUES(item))
    values[ATTRIBUTION_FIELDS.index("start")] = _micros(item.start)
    return values


def encode_entries(kind: WireKind, items: Sequence[Any]) -> list[bytes]:
    """Each item's entry (unframed), for ``frame``."""
    if kind in (WireKind.RECORD, WireKind.CLIENT):
        return [_dump(_values(item)) for item in items]
    if kind is WireKind.ATTRIBUTION:
        return [_dump(_attribution(item)) for item in items]
    if kind is WireKind.SEQUENCE:
        return [_dump(_late(item)) for item in items]
    return [_dump(_sample(item)) for item in items]


def frame(kind: WireKind, entries: Sequence[bytes]) -> bytes:
    """A body (uncompressed) of ``entries`` from ``encode_entries``."""
    parts = [_HEAD.pack(MAGIC, int(kind), len(entries))]
    for entry in entries:
        parts += [_LEN.pack(len(entry)), entry]
    return b"".join(parts)


def encode_batch(kind: WireKind, items: Sequence[Any]) -> bytes:
    return frame(kind, encode_entries(kind, items))


def inflate(body: bytes, limit: int = MAX_INFLATED_BYTES) -> bytes:
    """A gzip body inflated, refused with ``TooLarge`` beyond ``limit`` bytes."""
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise InvalidInput(f"the body is not valid gzip: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise TooLarge(f"the body inflates beyond {limit} bytes")
    if not inflater.eof:
        raise InvalidInput("the gzip body is truncated")
    return out


def decode_batch(body: bytes) -> tuple[WireKind, Batch]:
    """The kind and the validated items of an uncompressed body; ``InvalidInput`` otherwise."""
    if len(body) < _HEAD.size:
        raise InvalidInput("the body is too short for a batch")
    magic, kind_value, count = _HEAD.unpack_from(body)
    if magic != MAGIC:
        raise InvalidInput("the body is not an infersight batch (bad magic)")
    try:
        kind = WireKind(kind_value)
    except ValueError:
        raise InvalidInput(f"unknown batch kind {kind_value}") from None
    if count > MAX_ENTRIES:
        raise TooLarge(f"a batch holds at most {MAX_ENTRIES} entries")
    at, items = _HEAD.size, []
    for index in range(count):
        if at + _LEN.size > len(body):
            raise InvalidInput("the batch is truncated", details={"entry": index})
        (length,) = _LEN.unpack_from(body, at)
        at += _LEN.size
        if at + length > len(body):
            raise InvalidInput("the batch is truncated", details={"entry": index})
        try:
            items.append(_decode(kind, body[at : at + length]))
        except InvalidInput as exc:
            raise InvalidInput(f"entry {index}: {exc.message}", details={"entry": index}) from None
        except (ValueError, TypeError, KeyError, OverflowError) as exc:
            raise InvalidInput(f"entry {index} is malformed: {exc}"[:300]) from None
        at += length
    if at != len(body):
        raise InvalidInput("bytes follow the batch's last entry")
    return kind, items


def _decode(kind: WireKind, entry: bytes) -> Any:
    value = json.loads(entry)
    if kind is WireKind.RECORD:
        return RequestRecord(**_fields(value, RECORD_FIELDS))
    if kind is WireKind.SEQUENCE:
        return _decode_late(value)
    if kind is WireKind.CLIENT:
        fields = _fields(value, CLIENT_FIELDS)
        fields["ttft_source"] = TtftSource(fields["ttft_source"])
        return ClientRecord(**fields)
    if kind is WireKind.ATTRIBUTION:
        fields = _fields(value, ATTRIBUTION_FIELDS)
        if isinstance(fields["duration_s"], bool) or not isinstance(
            fields["duration_s"], int | float
        ):
            raise InvalidInput("an attribution's duration_s must be a number")
        fields["duration_s"] = float(fields["duration_s"])
        return Attribution(**fields)
    if not isinstance(value, dict):
        raise InvalidInput("a sample must be an object")
    value["ts"] = _from_micros(value.get("ts"))
    if kind is WireKind.GPU:
        value["throttle_reasons"] = tuple(value.get("throttle_reasons", ()))
        return GpuSample(**value)
    value["per_engine"] = tuple(EngineSample(**e) for e in value.get("per_engine", ()))
    return ServerSample(**value)


def _decode_late(value: Any) -> LateSequence:
    """A late sequence, checked: the request's key is a plausible one of the record's trace,
    the members are span ids, the record's own among them."""
    if not isinstance(value, dict):
        raise InvalidInput("a late sequence must be an object")
    record = RequestRecord(**_fields(value.get("record"), RECORD_FIELDS))
    request, members = value.get("request"), value.get("members")
    if not isinstance(request, list) or len(request) != 3:
        raise InvalidInput("a late sequence's request must be [start, trace id, span id]")
    start, trace_id, span_id = request
    if not isinstance(trace_id, str) or not isinstance(span_id, str):
        raise InvalidInput("a late sequence's request ids must be strings")
    check_ids(trace_id, span_id)
    if trace_id != record.trace_id:
        raise InvalidInput("a late sequence's request must be in the record's trace")
    if not isinstance(members, list) or not 0 < len(members) <= MAX_MEMBERS:
        raise InvalidInput(f"a late sequence must name 1 to {MAX_MEMBERS} member span ids")
    for member in members:
        if not isinstance(member, str):
            raise InvalidInput("a late sequence's members must be span ids")
        check_ids(trace_id, member)
    if record.span_id not in members or span_id in members:
        raise InvalidInput(
            "a late sequence's members must hold its record's span and not its request's"
        )
    return LateSequence((_from_micros(start), trace_id, span_id), record, tuple(members))


def _fields(value: Any, names: tuple[str, ...]) -> dict[str, Any]:
    if names is RECORD_FIELDS and isinstance(value, list) and len(value) == len(SIDECAR_FIELDS):
        names = SIDECAR_FIELDS  # a sidecar's record: the attributed labels stay empty
    if not isinstance(value, list) or len(value) != len(names):
        raise InvalidInput(f"a record must be a list of {len(names)} values")
    fields = dict(zip(names, value, strict=True))
    fields["start"] = _from_micros(fields["start"])
    return fields
