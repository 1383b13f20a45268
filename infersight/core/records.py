"""The normalised request record: one row per finished inference request, whatever the engine.

Units are seconds and tokens. A stage timing that the engine did not report is ``None`` (never
zero: TGI reports no TTFT, and a zero would drag percentiles down). Labels that are unknown are
the empty string, so that grouping and unique keys never meet SQL NULL semantics.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from operator import attrgetter
from typing import Final, TypeVar

from infersight.core.errors import InvalidRecord

#: Latency fields of a record, in the order the stage breakdown reports them.
DURATION_FIELDS: Final = (
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "queue_s",
    "prefill_s",
    "decode_s",
    "preprocess_s",
    "postprocess_s",
    "gateway_s",
    "route_s",
    "kv_transfer_s",
)
TOKEN_FIELDS: Final = ("input_tokens", "output_tokens", "cached_tokens")
#: Labels a query may filter and group by (``adapter``: the LoRA adapter, "" for the base
#: model; ``team`` and ``workload``: who the request was for, beside ``tenant``, from its
#: trace's gateway or client span; each later one last, so that the older labels keep their
#: positions).
GROUP_LABELS: Final = ("model", "instance", "tenant", "priority", "adapter", "team", "workload")
#: Labels only the store sets, from the trace's attribution (``core.attribution``): a
#: sidecar's record leaves them empty, and its spool and wire entries leave them out.
ATTRIBUTED_LABELS: Final = ("team", "workload")

MAX_LABEL_LEN: Final = 256
MAX_DURATION_S: Final = 7 * 86400.0
MAX_TOKENS: Final = 100_000_000
_EARLIEST: Final = datetime(2000, 1, 1, tzinfo=UTC)
_LATEST: Final = datetime(2200, 1, 1, tzinfo=UTC)
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX16 = re.compile(r"[0-9a-f]{16}")
#: Label fields in the order ``__post_init__`` checks them.
_LABEL_FIELDS: Final = (
    "instance",
    "service",
    "model",
    "tenant",
    "priority",
    "operation",
    "error_type",
    "finish_reason",
    "adapter",
    "peer",
    "team",
    "workload",
)
_LABEL_VALUES: Final = attrgetter(*_LABEL_FIELDS)
_DURATION_VALUES: Final = attrgetter(*DURATION_FIELDS)
_TOKEN_VALUES: Final = attrgetter(*TOKEN_FIELDS)
_SET: Final = object.__setattr__


class Engine(StrEnum):
    """The inference server kind a record came from."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TGI = "tgi"
    TRTLLM = "trtllm"
    GENERIC = "generic"


class Role(StrEnum):
    """What part of a user's request a record is (disaggregated prefill/decode serving).

    ``UNIFIED``: the whole request on one instance (the usual case). ``DECODE``: a user's
    request served disaggregated, recorded where its answer was streamed (the decode side):
    its TTFT and end to end time are the user's, its stages include the prefill leg and the
    KV transfer, and ``peer`` names the prefill side. ``PREFILL``: the prefill leg on a
    prefill instance, a *part* of some user's request and not a request of its own: stored
    apart (``storage.tables.request_parts``), never counted as a request or its tokens again.
    """

    UNIFIED = ""
    PREFILL = "prefill"
    DECODE = "decode"


class Status(StrEnum):
    OK = "ok"
    ERROR = "error"


def normalise_trace_id(value: str | bytes | int) -> str:
    """A trace id as 32 lowercase hex digits; 64-bit ids (SGLang) are left-padded."""
    if isinstance(value, bytes):
        value = value.hex()
    elif isinstance(value, int):
        if value < 0 or value >= 1 << 128:
            raise InvalidRecord("trace id out of range", details={"trace_id": value})
        value = f"{value:032x}"
    text = value.strip().lower()
    if 0 < len(text) < 32 and all(c in "0123456789abcdef" for c in text):
        text = text.rjust(32, "0")
    return text


def normalise_span_id(value: str | bytes | int) -> str:
    """A span id as 16 lowercase hex digits."""
    if isinstance(value, bytes):
        value = value.hex()
    elif isinstance(value, int):
        if value < 0 or value >= 1 << 64:
            raise InvalidRecord("span id out of range", details={"span_id": value})
        value = f"{value:016x}"
    text = value.strip().lower()
    if 0 < len(text) < 16 and all(c in "0123456789abcdef" for c in text):
        text = text.rjust(16, "0")
    return text


def check_ids(trace_id: str, span_id: str) -> None:
    """A W3C trace id (32 lowercase hex digits) and span id (16), neither all zero."""
    if not _HEX32.fullmatch(trace_id) or trace_id == "0" * 32:
        raise InvalidRecord(
            "trace_id must be 32 lowercase hex digits, not all zero",
            details={"trace_id": trace_id[:64]},
        )
    if not _HEX16.fullmatch(span_id) or span_id == "0" * 16:
        raise InvalidRecord(
            "span_id must be 16 lowercase hex digits, not all zero",
            details={"span_id": span_id[:64]},
        )


def check_timestamp(name: str, ts: datetime) -> None:
    """Timestamps are timezone-aware and in a plausible range (2000–2200)."""
    if ts.tzinfo is None or ts.utcoffset() is None:
        raise InvalidRecord(f"{name} must be timezone-aware", details={name: ts.isoformat()})
    if not _EARLIEST <= ts < _LATEST:
        raise InvalidRecord(f"{name} out of range", details={name: ts.isoformat()})


def check_label(name: str, value: str) -> None:
    if len(value) > MAX_LABEL_LEN:
        raise InvalidRecord(
            f"{name} longer than {MAX_LABEL_LEN} characters", details={name: value[:64] + "…"}
        )


def check_duration(name: str, value: float | None) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0.0 or value > MAX_DURATION_S:
        raise InvalidRecord(
            f"{name} must be a finite number of seconds in [0, {MAX_DURATION_S:g}]",
            details={name: repr(value)},
        )


def check_count(name: str, value: int | None, limit: int = MAX_TOKENS) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise InvalidRecord(f"{name} must be an integer in [0, {limit}]", details={name: value})


# The three checks below run for every span the sidecar receives: values that are plainly
# valid skip the per-field checks; anything else goes through them in field order, so a bad
# value is refused exactly as those checks word it.


def _check_labels(values: tuple[str, ...]) -> None:
    for value in values:
        if type(value) is not str or len(value) > MAX_LABEL_LEN:
            for name, each in zip(_LABEL_FIELDS, values, strict=True):
                check_label(name, each)
            return


def _check_durations(values: tuple[float | None, ...]) -> None:
    for value in values:
        if value is not None and not (type(value) is float and 0.0 <= value <= MAX_DURATION_S):
            for name, each in zip(DURATION_FIELDS, values, strict=True):
                check_duration(name, each)
            return


def _check_counts(values: tuple[int | None, ...]) -> None:
    for value in values:
        if value is not None and not (type(value) is int and 0 <= value <= MAX_TOKENS):
            for name, each in zip(TOKEN_FIELDS, values, strict=True):
                check_count(name, each)
            return


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One finished inference request.

    ``(trace_id, span_id)`` is the natural key: the same span shipped twice is one request.
    """

    trace_id: str
    span_id: str
    start: datetime
    instance: str
    service: str = ""
    engine: Engine = Engine.GENERIC
    model: str = ""
    tenant: str = ""
    priority: str = ""
    operation: str = ""
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    preprocess_s: float | None = None
    postprocess_s: float | None = None
    gateway_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    status: Status = Status.OK
    error_type: str = ""
    finish_reason: str = ""
    #: The LoRA adapter the request was served with ("": the base model, named in ``model``).
    adapter: str = ""
    role: Role = Role.UNIFIED
    #: The other side of a disaggregated request: on a decode record, its prefill instance
    #: (or the prefill target as the P/D proxy named it).
    peer: str = ""
    #: Disaggregated serving: the proxy's routing before the prefill leg, and the time from
    #: the prefill leg's end until the decode instance could schedule the request (the KV
    #: cache's transfer, and any wait for a slot behind it).
    route_s: float | None = None
    kv_transfer_s: float | None = None
    #: Who the request was for besides its tenant, from its trace's gateway or client span
    #: (``core.attribution``; set by the store, never by the sidecar): the team, and the
    #: workload (an API key's alias, an app's ``service.name``, an inference objective).
    team: str = ""
    workload: str = ""

    def __post_init__(self) -> None:
        check_ids(self.trace_id, self.span_id)
        check_timestamp("start", self.start)
        if not self.instance:
            raise InvalidRecord("instance must not be empty")
        _check_labels(_LABEL_VALUES(self))
        _check_durations(_DURATION_VALUES(self))
        _check_counts(_TOKEN_VALUES(self))
        # Enum fields accept their string values; store the enum so equality is uniform.
        if not isinstance(self.engine, Engine):
            object.__setattr__(self, "engine", _enum(Engine, "engine", self.engine))
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", _enum(Status, "status", self.status))
        if not isinstance(self.role, Role):
            object.__setattr__(self, "role", _enum(Role, "role", self.role))

    @classmethod
    def trusted(cls, values: Sequence[object]) -> RequestRecord:
        """A record from values in ``RECORD_FIELDS`` order that were validated before,
        **without re-validating them**: only for records this process validated on their way
        into its own storage (the sidecar's spool) and reads back. Anything from outside
        must go through the constructor. Enum fields given as strings are still converted
        (and refused with ``InvalidRecord`` when unknown), and the field count is checked.
        """
        if len(values) != len(RECORD_FIELDS):
            raise InvalidRecord(
                "a record needs one value per field",
                details={"values": len(values), "fields": len(RECORD_FIELDS)},
            )
        record = object.__new__(cls)
        for name, value in zip(RECORD_FIELDS, values, strict=True):
            _SET(record, name, value)
        if not isinstance(record.engine, Engine):
            _SET(record, "engine", _enum(Engine, "engine", record.engine))
        if not isinstance(record.status, Status):
            _SET(record, "status", _enum(Status, "status", record.status))
        if not isinstance(record.role, Role):
            _SET(record, "role", _enum(Role, "role", record.role))
        return record

    @property
    def end(self) -> datetime | None:
        """Arrival plus end-to-end time, when known."""
        if self.e2e_s is None:
            return None
        return self.start + timedelta(seconds=self.e2e_s)

    @property
    def is_error(self) -> bool:
        return self.status is Status.ERROR

    @property
    def is_part(self) -> bool:
        """A prefill leg: part of a user's request, not a request of its own."""
        return self.role is Role.PREFILL


_E = TypeVar("_E", bound=StrEnum)


def _enum(kind: type[_E], name: str, value: object) -> _E:
    try:
        return kind(str(value))
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise InvalidRecord(
            f"{name} must be one of {allowed}", details={name: str(value)[:64]}
        ) from None


#: Column order used by bulk writers and spools.
RECORD_FIELDS: Final = tuple(f.name for f in fields(RequestRecord))
#: The fields a sidecar's record carries, in order: all but ``ATTRIBUTED_LABELS`` (the last).
SIDECAR_FIELDS: Final = RECORD_FIELDS[: -len(ATTRIBUTED_LABELS)]
if RECORD_FIELDS[len(SIDECAR_FIELDS) :] != ATTRIBUTED_LABELS:
    raise ImportError("RequestRecord's attributed labels must be its last fields")

__all__ = [
    "ATTRIBUTED_LABELS",
    "DURATION_FIELDS",
    "GROUP_LABELS",
    "RECORD_FIELDS",
    "SIDECAR_FIELDS",
    "TOKEN_FIELDS",
    "Engine",
    "RequestRecord",
    "Role",
    "Status",
    "normalise_span_id",
    "normalise_trace_id",
]
