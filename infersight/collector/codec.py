"""Spool payload encoding: request records (with their place in the trace), trace pieces
(stage fragments and links) and samples, as compact JSON.

Records are a JSON list in ``SIDECAR_FIELDS`` order (the record's fields but the labels only
the store sets from a trace's attribution) with the start as epoch seconds (a
``mapping.RecordRow``, which the ingestor encodes as it is: ``encode_row``). Only
records that passed ``RequestRecord`` validation are ever encoded (by the ingestor, into this
process's own spool), so decoding rebuilds them with ``RequestRecord.trusted`` instead of
validating every field a second time; a payload of the wrong shape or with an unknown enum
value is still refused, and the store's writer checks what it stores.

Records are encoded and decoded with ``orjson`` (every span received is encoded once and
decoded once; the standard library's ``json`` took three times as long). The bytes are plain
JSON either way, so a spool written by an older sidecar, or read by a newer Python, decodes
the same; JSON is also safe to decode whatever the file holds, unlike pickle or marshal.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from enum import IntEnum
from operator import attrgetter
from typing import Any, Final

import orjson

from infersight.collector.mapping.base import Link, Place, RecordRow, StageFragment
from infersight.core.attribution import ATTRIBUTION_FIELDS, Attribution
from infersight.core.client import CLIENT_FIELDS, ClientRecord, TtftSource
from infersight.core.records import (
    RECORD_FIELDS,
    SIDECAR_FIELDS,
    Engine,
    RequestRecord,
    Role,
    Status,
)
from infersight.core.samples import EngineSample, GpuSample, ServerSample

_START_AT: Final = RECORD_FIELDS.index("start")
_ENGINE_AT: Final = RECORD_FIELDS.index("engine")
_STATUS_AT: Final = RECORD_FIELDS.index("status")
#: A sidecar's record leaves the store's attribution labels out (``SIDECAR_FIELDS``).
_VALUES: Final = attrgetter(*SIDECAR_FIELDS)
_ATTRIBUTED_DEFAULTS: Final = ("",) * (len(RECORD_FIELDS) - len(SIDECAR_FIELDS))
#: Records spooled by a sidecar before the serving-topology fields (adapter, role, peer,
#: route_s, kv_transfer_s) were added have this many values; the rest take their defaults.
_BEFORE_TOPOLOGIES: Final = RECORD_FIELDS.index("adapter")
_TOPOLOGY_DEFAULTS: Final = tuple(
    f.default
    for f in dataclasses.fields(RequestRecord)
    if f.name in SIDECAR_FIELDS[_BEFORE_TOPOLOGIES:]
)
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"))
#: Enum members by value: a dict lookup instead of the enum's own (much slower) value lookup.
#: An unknown value is passed on as it is, and ``RequestRecord.trusted`` refuses it.
_ENGINES: Final[dict[object, Engine]] = {member.value: member for member in Engine}
_STATUSES: Final[dict[object, Status]] = {member.value: member for member in Status}
_ROLES: Final[dict[object, Role]] = {member.value: member for member in Role}
_ROLE_AT: Final = RECORD_FIELDS.index("role")


class Kind(IntEnum):
    """What a spool entry holds."""

    RECORD = 1
    #: A trace piece waiting for its request: a stage fragment, or a link (a span that is
    #: neither a request nor a stage, kept for the ancestry it tells).
    STAGE = 2
    GPU = 3
    SERVER = 4
    #: A client record (``core.client``): shipped as it comes, no reassembly to wait for.
    CLIENT = 5
    #: What a gateway's or client's span named of its trace (``core.attribution``): shipped
    #: as it comes; the store fills the trace's requests from it.
    ATTRIBUTION = 7


def encode_record(record: RequestRecord, place: Place | None = None) -> bytes:
    """The record as a list in ``SIDECAR_FIELDS`` order, then its ``Place`` when given."""
    values: list[Any] = list(_VALUES(record))
    values[_START_AT] = record.start.timestamp()
    if place is not None:
        values.append(list(place))
    try:
        return orjson.dumps(values)
    except orjson.JSONEncodeError:  # a lone surrogate (from a command-line label): escaped
        return _ENCODER.encode(values).encode()


def encode_row(row: RecordRow, place: Place | None = None) -> bytes:
    """What ``encode_record`` writes for ``row.record(…)``: the row is that list already."""
    values: list[Any] = list(row)
    if place is not None:
        values.append(list(place))
    try:
        return orjson.dumps(values)
    except orjson.JSONEncodeError:  # a lone surrogate (from a command-line label): escaped
        return _ENCODER.encode(values).encode()


def encode_placed(
    row: RecordRow, parent_span_id: str, start_ns: int, end_ns: int, request_id: str
) -> bytes:
    """``encode_row(row, Place(parent_span_id, start_ns, end_ns, request_id))``."""
    values: list[Any] = [*row, [parent_span_id, start_ns, end_ns, request_id]]
    try:
        return orjson.dumps(values)
    except orjson.JSONEncodeError:  # a lone surrogate (from a command-line label): escaped
        return _ENCODER.encode(values).encode()


def decode_record(payload: bytes) -> RequestRecord:
    """A record this sidecar validated and spooled (see the module docstring)."""
    return decode_placed(payload)[0]


def decode_placed(payload: bytes) -> tuple[RequestRecord, Place | None]:
    """A spooled record and its ``Place`` (``None`` when spooled without one)."""
    try:
        values = orjson.loads(payload)
    except orjson.JSONDecodeError:  # escaped lone surrogates are JSON, but not for orjson
        values = json.loads(payload)
    place: Place | None = None
    if isinstance(values, list) and values and isinstance(values[-1], list):
        place = _place(values.pop())
    if isinstance(values, list) and len(values) == _BEFORE_TOPOLOGIES:
        values.extend(_TOPOLOGY_DEFAULTS)  # spooled before the serving-topology fields
    if not isinstance(values, list) or len(values) != len(SIDECAR_FIELDS):
        raise ValueError("a spooled record must be a list with one value per field")
    values.extend(_ATTRIBUTED_DEFAULTS)
    values[_START_AT] = datetime.fromtimestamp(values[_START_AT], tz=UTC)
    engine, status = values[_ENGINE_AT], values[_STATUS_AT]
    values[_ENGINE_AT] = _ENGINES.get(engine, engine)
    values[_STATUS_AT] = _STATUSES.get(status, status)
    values[_ROLE_AT] = _ROLES.get(values[_ROLE_AT], values[_ROLE_AT])
    return RequestRecord.trusted(values), place


def _place(value: Any) -> Place:
    # Three values: spooled before the request id was kept.
    if not isinstance(value, list) or len(value) not in (3, len(Place._fields)):
        raise ValueError(
            "a spooled record's place must be [parent, start_ns, end_ns(, request_id)]"
        )
    parent, start_ns, end_ns, *rest = value
    return Place(str(parent), int(start_ns), int(end_ns), str(rest[0]) if rest else "")


def encode_fragment(fragment: StageFragment) -> bytes:
    f = fragment
    values = [f.span_id, f.stage, f.seconds, f.parent_span_id, f.service, f.kind]
    values += [f.start_ns, f.end_ns]
    if f.detail:
        values.append(f.detail)
    return json.dumps(values).encode()


def encode_link(link: Link) -> bytes:
    values = [link.span_id, None, None, link.parent_span_id, link.service, link.kind]
    if link.model:
        values.append(link.model)
    return json.dumps(values).encode()


def decode_piece(trace_id: str, payload: bytes) -> StageFragment | Link | None:
    """A trace piece spooled under ``Kind.STAGE``: a stage fragment or a link. ``None`` for
    a fragment spooled by an older sidecar (``[span_id, stage, seconds]``: where it sits in
    the trace is unknown, so it can belong to no request; it expires as an orphan)."""
    values = json.loads(payload)
    if not isinstance(values, list):
        raise ValueError("a spooled trace piece must be a list")
    if len(values) == 3:
        return None
    span_id, stage, seconds, parent, service, kind, *times = values
    if stage is None:
        model = str(times[0]) if times else ""
        return Link(trace_id, str(span_id), str(parent), str(service), int(kind), model)
    start_ns, end_ns = (int(t) for t in times[:2]) if times else (0, 0)
    detail = str(times[2]) if len(times) > 2 else ""
    return StageFragment(
        trace_id,
        str(span_id),
        str(stage),
        float(seconds),
        str(parent),
        str(service),
        int(kind),
        start_ns,
        end_ns,
        detail,
    )


_CLIENT_VALUES: Final = attrgetter(*CLIENT_FIELDS)
_CLIENT_START_AT: Final = CLIENT_FIELDS.index("start")


def encode_client(record: ClientRecord) -> bytes:
    """A client record as a list in ``CLIENT_FIELDS`` order, the start as epoch seconds."""
    values: list[Any] = list(_CLIENT_VALUES(record))
    values[_CLIENT_START_AT] = record.start.timestamp()
    return _ENCODER.encode(values).encode()


def decode_client(payload: bytes) -> ClientRecord:
    """A spooled client record, validated again (few of them: one per call a client made)."""
    values = json.loads(payload)
    if not isinstance(values, list) or len(values) != len(CLIENT_FIELDS):
        raise ValueError("a spooled client record must be a list with one value per field")
    fields = dict(zip(CLIENT_FIELDS, values, strict=True))
    fields["start"] = datetime.fromtimestamp(fields["start"], tz=UTC)
    fields["status"] = _STATUSES.get(fields["status"], fields["status"])
    fields["ttft_source"] = TtftSource(fields["ttft_source"])
    return ClientRecord(**fields)


_ATTRIBUTION_VALUES: Final = attrgetter(*ATTRIBUTION_FIELDS)
_ATTRIBUTION_START_AT: Final = ATTRIBUTION_FIELDS.index("start")


def encode_attribution(item: Attribution) -> bytes:
    """An attribution as a list in ``ATTRIBUTION_FIELDS`` order, the start as epoch seconds."""
    values: list[Any] = list(_ATTRIBUTION_VALUES(item))
    values[_ATTRIBUTION_START_AT] = item.start.timestamp()
    return _ENCODER.encode(values).encode()


def decode_attribution(payload: bytes) -> Attribution:
    """A spooled attribution, validated again (one per gateway or client span)."""
    values = json.loads(payload)
    if not isinstance(values, list) or len(values) != len(ATTRIBUTION_FIELDS):
        raise ValueError("a spooled attribution must be a list with one value per field")
    fields = dict(zip(ATTRIBUTION_FIELDS, values, strict=True))
    fields["start"] = datetime.fromtimestamp(fields["start"], tz=UTC)
    return Attribution(**fields)


def encode_sample(sample: GpuSample | ServerSample) -> bytes:
    values = dataclasses.asdict(sample)
    values["ts"] = sample.ts.timestamp()
    if isinstance(sample, GpuSample):
        values["throttle_reasons"] = list(sample.throttle_reasons)
    return json.dumps(values, separators=(",", ":")).encode()


def decode_gpu(payload: bytes) -> GpuSample:
    values = json.loads(payload)
    values["ts"] = datetime.fromtimestamp(values["ts"], tz=UTC)
    values["throttle_reasons"] = tuple(values["throttle_reasons"])
    return GpuSample(**values)


def decode_server(payload: bytes) -> ServerSample:
    """A server sample; one spooled by an older sidecar has no ``per_engine`` and decodes with
    none."""
    values = json.loads(payload)
    values["ts"] = datetime.fromtimestamp(values["ts"], tz=UTC)
    values["per_engine"] = tuple(EngineSample(**e) for e in values.get("per_engine", ()))
    return ServerSample(**values)
