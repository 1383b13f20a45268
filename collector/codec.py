"""Spool payload encoding: request records, stage fragments and samples as compact JSON.

Records are a JSON list in ``RECORD_FIELDS`` order with the start as epoch seconds. Only
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

from collector.mapping.base import StageFragment
from core.records import RECORD_FIELDS, Engine, RequestRecord, Status
from core.samples import EngineSample, GpuSample, ServerSample

_START_AT: Final = RECORD_FIELDS.index("start")
_ENGINE_AT: Final = RECORD_FIELDS.index("engine")
_STATUS_AT: Final = RECORD_FIELDS.index("status")
_VALUES: Final = attrgetter(*RECORD_FIELDS)
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"))
#: Enum members by value: a dict lookup instead of the enum's own (much slower) value lookup.
#: An unknown value is passed on as it is, and ``RequestRecord.trusted`` refuses it.
_ENGINES: Final[dict[object, Engine]] = {member.value: member for member in Engine}
_STATUSES: Final[dict[object, Status]] = {member.value: member for member in Status}


class Kind(IntEnum):
    """What a spool entry holds."""

    RECORD = 1
    STAGE = 2
    GPU = 3
    SERVER = 4


def encode_record(record: RequestRecord) -> bytes:
    values: list[Any] = list(_VALUES(record))
    values[_START_AT] = record.start.timestamp()
    try:
        return orjson.dumps(values)
    except orjson.JSONEncodeError:  # a lone surrogate (from a command-line label): escaped
        return _ENCODER.encode(values).encode()


def decode_record(payload: bytes) -> RequestRecord:
    """A record this sidecar validated and spooled (see the module docstring)."""
    try:
        values = orjson.loads(payload)
    except orjson.JSONDecodeError:  # escaped lone surrogates are JSON, but not for orjson
        values = json.loads(payload)
    if not isinstance(values, list) or len(values) != len(RECORD_FIELDS):
        raise ValueError("a spooled record must be a list with one value per field")
    values[_START_AT] = datetime.fromtimestamp(values[_START_AT], tz=UTC)
    engine, status = values[_ENGINE_AT], values[_STATUS_AT]
    values[_ENGINE_AT] = _ENGINES.get(engine, engine)
    values[_STATUS_AT] = _STATUSES.get(status, status)
    return RequestRecord.trusted(values)


def encode_fragment(fragment: StageFragment) -> bytes:
    return json.dumps([fragment.span_id, fragment.stage, fragment.seconds]).encode()


def decode_fragment(trace_id: str, payload: bytes) -> StageFragment:
    span_id, stage, seconds = json.loads(payload)
    return StageFragment(trace_id, span_id, stage, float(seconds))


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
