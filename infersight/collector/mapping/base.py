"""The core every engine mapper shares: context, outcomes, model attribution, outcome fields
(status, error type, finish reason), derived latencies and stage fragments (which request they
belong to and how they are merged into it: ``collector.assembly``).

An engine mapper only extracts numbers from its engine's attribute shape into ``Timings``;
``build_row`` turns them into a validated record the same way for all engines: a
``RecordRow``, the record's values as the spool stores them, which ``RecordRow.record`` makes a
``RequestRecord`` of (``mapping.map_span``). The ingest path spools the row as it is
(``codec.encode_row``): every span received is mapped, and building, validating and taking
apart a ``RequestRecord`` (30 fields, a ``datetime``, three enums) cost more than reading the
span's attributes did.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any, Final, NamedTuple

from infersight.collector.mapping.spans import (
    STATUS_ERROR,
    AttrValue,
    SpanView,
    as_int,
    as_str,
    first_finish_reason,
)
from infersight.core.attribution import AttributionMap
from infersight.core.client import ClientRecord
from infersight.core.errors import InvalidRecord
from infersight.core.records import (
    DURATION_FIELDS,
    MAX_DURATION_S,
    MAX_LABEL_LEN,
    MAX_TOKENS,
    RECORD_FIELDS,
    SIDECAR_FIELDS,
    TOKEN_FIELDS,
    Engine,
    RequestRecord,
    Role,
    Status,
)

#: Stage names a fragment may carry → the record field it fills.
STAGE_FIELDS: Final = {
    "gateway": "gateway_s",
    "preprocess": "preprocess_s",
    "queue": "queue_s",
    "prefill": "prefill_s",
    "decode": "decode_s",
    "postprocess": "postprocess_s",
}
#: The spans a disaggregated-serving proxy (llm-d's routing sidecar) makes of one user
#: request: the request as it entered the proxy, its prefill leg and its decode leg. They
#: fill no stage by name: ``collector.assembly.fold_disaggregated`` turns a decode instance's
#: record below them into the user's request.
PD_STAGES: Final = ("pd_request", "pd_prefill", "pd_decode")

MODEL_ATTRS: Final = ("gen_ai.response.model", "gen_ai.request.model", "model", "model_id")
#: The model a caller asked for (a client's or gateway's span).
REQUEST_MODEL: Final = "gen_ai.request.model"
TENANT_ATTRS: Final = ("infersight.tenant", "tenant", "tenant.id")
PRIORITY_ATTRS: Final = ("infersight.priority", "gen_ai.request.priority", "priority")
OPERATION_ATTRS: Final = ("gen_ai.operation.name",)
#: The engine's own id of a request (vLLM: the external request id every child sequence of an
#: ``n`` > 1 request carries).
REQUEST_ID_ATTRS: Final = ("gen_ai.request.id",)
ERROR_TYPE: Final = "error.type"
#: Where a request's finish reasons are, in order (vLLM: a JSON list in a string).
FINISH_ATTRS: Final = ("gen_ai.response.finish_reasons", "finish_reason")


def no_scraped_model() -> str:
    """No model scraped (a function, not a lambda, so that a context can be pickled)."""
    return ""


def no_scraped_adapters() -> frozenset[str]:
    """No LoRA adapter scraped (a function, not a lambda, so that a context can be pickled)."""
    return frozenset()


@dataclass(frozen=True, slots=True)
class MappingContext:
    """What the sidecar knows besides the span: its own identity and model attribution."""

    instance: str
    model: str = ""
    service_models: Mapping[str, str] = field(default_factory=dict)
    #: The model name scraped from the server's /metrics when it serves exactly one.
    scraped_model: Callable[[], str] = no_scraped_model
    #: The instance's part in disaggregated serving: on a prefill instance every request
    #: span is a prefill leg (``Role.PREFILL``); a decode instance's records become the
    #: user's requests when the P/D proxy's spans are found above them.
    role: Role = Role.UNIFIED
    #: LoRA adapter names the instance was declared to serve (``--adapter``).
    adapters: frozenset[str] = frozenset()
    #: The adapters the server's /metrics named so far (vLLM: ``vllm:lora_requests_info``);
    #: evaluated once per span that names a model, so it must be cheap (a cached set).
    scraped_adapters: Callable[[], frozenset[str]] = no_scraped_adapters
    #: Which attributes of a gateway's or client's span name who its trace's requests are for
    #: (``core.attribution``: ``INFERSIGHT_ATTRIBUTION``); ``None``: only a client span's own
    #: tenant attribute is read.
    attribution: AttributionMap | None = None

    def __post_init__(self) -> None:
        if not self.instance:
            raise InvalidRecord("the sidecar's instance name must not be empty")

    def base_model(self, span: SpanView) -> str:
        """The model a span that names none (or names an adapter) is of: ``--model``, else
        ``service.name`` → model, else the one the server's /metrics report."""
        return self.model or self.service_models.get(span.service, "") or self.scraped_model()

    def attribute(self, span: SpanView, engine: Engine) -> tuple[str, str]:
        """The request's base model and LoRA adapter ("" for the base model itself).

        A span names the model its request asked for (vLLM's ``gen_ai.response.model`` is
        the adapter's name when the request targeted one). That name is an adapter when the
        instance was declared to serve it (``--adapter``) or its /metrics listed it as running
        or waiting; on a vLLM span, also when the scraper knows the one base model served and
        the name differs from it. The model is then the base: ``--model``, else the
        ``service.name`` mapping, else the scraped one; the adapter's own name when none is
        known (the adapter still counts apart from it)."""
        return self.attributed(span.label(MODEL_ATTRS), span.service, engine)

    def attributed(self, name: str, service: str, engine: Engine) -> tuple[str, str]:
        """``attribute`` of a span of ``service`` that names the model ``name`` ("": none)."""
        if not name:
            return self._base(service), ""
        if name in self.adapters or name in self.scraped_adapters():
            return (self._base(service) or name), name
        if engine is Engine.VLLM:
            base = self.scraped_model()
            if base and name != base:
                return base, name
        return name, ""

    def _base(self, service: str) -> str:
        return self.model or self.service_models.get(service, "") or self.scraped_model()


@dataclass(frozen=True, slots=True)
class Skipped:
    """A span that yields no record. ``rejected`` spans are bad data (reported back in
    ``partial_success``); the others are simply not requests (counted as unmapped)."""

    reason: str
    engine: str = "generic"
    rejected: bool = False
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StageFragment:
    """The duration of one pipeline stage of a request, from a span of its trace.

    Where it sits in the trace (its parent, its service, its kind) and when it ran decide
    which request it belongs to, if any (``collector.assembly``); ``start_ns`` / ``end_ns``
    are 0 when unknown."""

    trace_id: str
    span_id: str
    stage: str
    seconds: float
    parent_span_id: str = ""
    service: str = ""
    kind: int = 0
    start_ns: int = 0
    end_ns: int = 0
    #: What a P/D proxy span names besides its times: the prefill leg's target.
    detail: str = ""

    def __post_init__(self) -> None:
        if self.stage not in STAGE_FIELDS and self.stage not in PD_STAGES:
            raise InvalidRecord("unknown stage", details={"stage": self.stage})


@dataclass(frozen=True, slots=True)
class Link:
    """A span of a trace that is neither a request nor a stage (a client's root span, an
    engine's thread span), kept only for where it sits: it lets a stage below it be traced
    to its request, or shown to belong to none."""

    trace_id: str
    span_id: str
    parent_span_id: str
    service: str
    kind: int
    #: The model a caller's span asked for (``gen_ai.request.model``: a client's or a
    #: gateway's), which names the LoRA adapter where the engine's own span does not.
    model: str = ""

    @classmethod
    def of(cls, span: SpanView) -> Link | None:
        """The link of ``span``, or ``None`` when it lacks the ids to place it."""
        if not span.trace_id or not span.span_id:
            return None
        service = span.service[:MAX_LABEL_LEN]
        model = as_str(span.attributes.get(REQUEST_MODEL))[:MAX_LABEL_LEN]
        return cls(span.trace_id, span.span_id, span.parent_span_id, service, span.kind, model)


class Place(NamedTuple):
    """Where a request span sits in its trace: its parent, its own start and end (ns), and
    the engine's request id (``gen_ai.request.id``), which the spans of one request's
    parallel sequences (``n`` > 1) share."""

    parent_span_id: str = ""
    start_ns: int = 0
    end_ns: int = 0
    request_id: str = ""


class RecordRow(NamedTuple):
    """A request record as the sidecar spools it: its values in ``RECORD_FIELDS`` order, the
    start in epoch seconds (to the microsecond, as the record's ``datetime`` holds it) and the
    enums as their values. Made only by ``build_row``, which validates it as
    ``RequestRecord`` would; ``record`` is that ``RequestRecord``.

    A ``NamedTuple``: one is made for every request span, and the spool's encoding writes it
    as it is (``codec.encode_row``)."""

    trace_id: str
    span_id: str
    start: float
    instance: str
    service: str
    engine: str
    model: str
    tenant: str
    priority: str
    operation: str
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None
    queue_s: float | None
    prefill_s: float | None
    decode_s: float | None
    preprocess_s: float | None
    postprocess_s: float | None
    gateway_s: float | None
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    status: str
    error_type: str
    finish_reason: str
    adapter: str
    role: str
    peer: str
    route_s: float | None
    kv_transfer_s: float | None

    def record(self, start: datetime) -> RequestRecord:
        """The ``RequestRecord`` of these values, validated; ``start`` is the ``datetime`` the
        row's start was taken from (raises ``InvalidRecord`` for a value it refuses). The
        labels only the store sets (``ATTRIBUTED_LABELS``) are left empty."""
        values: list[Any] = list(self)
        values[_START_AT] = start
        return RequestRecord(*values)


if RecordRow._fields != SIDECAR_FIELDS:  # one order for the row, the record and the spool
    raise ImportError("RecordRow's fields must be RequestRecord's a sidecar sets, in its order")
_START_AT: Final = RECORD_FIELDS.index("start")
#: The start's range a record accepts (2000–2200, ``core.records.check_timestamp``), a second
#: inside it: a start within a second of either end is left to the record to judge.
_EARLIEST_S: Final = datetime(2000, 1, 1, tzinfo=UTC).timestamp() + 1.0
_LATEST_S: Final = datetime(2200, 1, 1, tzinfo=UTC).timestamp() - 1.0
_PREFILL: Final = Role.PREFILL.value
_UNIFIED: Final = Role.UNIFIED.value
_HEX: Final = "0123456789abcdef"
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16
_DURATIONS: Final = attrgetter(*DURATION_FIELDS)
_COUNTS: Final = attrgetter(*TOKEN_FIELDS)

Outcome = RequestRecord | ClientRecord | StageFragment | Skipped
#: What a mapper makes of a span: a request as its ``RecordRow`` (``Outcome`` has the
#: ``RequestRecord`` instead).
Mapped = RecordRow | ClientRecord | StageFragment | Skipped


class Timings(NamedTuple):
    """What an engine mapper extracted; ``None`` means the engine did not report it: the
    measured part of ``RequestRecord``, its fields the record's own (checked below: names,
    order and types), so that ``build_row`` places each where the record has it.

    A ``NamedTuple``: one is built for every request span, and a tuple is the cheapest
    immutable value to build."""

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
    #: The time the request waited for its KV cache from another instance (TensorRT-LLM's
    #: ``gen_ai.latency.kv_cache_transfer_time`` on a disaggregated generation server).
    kv_transfer_s: float | None = None


def _is_measured_part(part: type[tuple[Any, ...]]) -> bool:
    """Whether every field of ``part`` is a ``RequestRecord`` field of the same type, ``None``
    by default, and they come in the record's order."""
    kinds = {f.name: f.type for f in dataclasses.fields(RequestRecord)}
    names: tuple[str, ...] = getattr(part, "_fields")  # noqa: B009 (a NamedTuple's)
    defaults: dict[str, Any] = getattr(part, "_field_defaults")  # noqa: B009
    declared = {name: getattr(kind, "__forward_arg__", kind) for name, kind in
                part.__annotations__.items()}  # fmt: skip
    return (
        all(name in kinds and declared[name] == str(kinds[name]) for name in names)
        and list(names) == sorted(names, key=RECORD_FIELDS.index)
        and defaults.keys() == set(names)
        and not any(value is not None for value in defaults.values())
    )


if not _is_measured_part(Timings):  # one declaration of what a record measures: the record's
    raise ImportError("Timings' fields must be RequestRecord's, in its order and of its types")


def derive_tpot(t: Timings) -> float | None:
    """Mean time per output token after the first: decode time (or e2e − TTFT) over n − 1."""
    return tpot_of(t.tpot_s, t.output_tokens, t.decode_s, t.e2e_s, t.ttft_s)


def tpot_of(
    tpot: float | None,
    output_tokens: int | None,
    decode: float | None,
    e2e: float | None,
    ttft: float | None,
) -> float | None:
    """``derive_tpot`` of these timings."""
    if tpot is not None:
        return tpot
    if output_tokens is None or output_tokens < 2:
        return None
    span = decode
    if span is None and e2e is not None and ttft is not None:
        span = e2e - ttft
    if span is None or span < 0:
        return None
    return span / (output_tokens - 1)


def outcome_fields(span: SpanView) -> tuple[Status, str, str]:
    """Status, error type and finish reason of the request span."""
    return outcome_of(
        span.status_code,
        span.attributes.get(ERROR_TYPE),
        span.attr(*FINISH_ATTRS),
    )


def outcome_of(
    status_code: int, error_value: AttrValue, finish_value: AttrValue
) -> tuple[Status, str, str]:
    """``outcome_fields`` of a span with this status code, ``error.type`` and finish
    reasons (``FINISH_ATTRS``) attributes."""
    error_type = as_str(error_value)
    is_error = status_code == STATUS_ERROR or bool(error_type)
    if is_error and not error_type:
        error_type = "error"
    finish = first_finish_reason(finish_value)
    if finish == "abort" and not is_error:
        is_error, error_type = True, "abort"
    status = Status.ERROR if is_error else Status.OK
    return status, error_type[:MAX_LABEL_LEN], finish[:MAX_LABEL_LEN]


def place_of(span: SpanView) -> Place:
    """Where ``span`` sits in its trace, with the engine's request id."""
    return Place(span.parent_span_id, span.start_ns, span.end_ns, span.label(REQUEST_ID_ATTRS))


def epoch_seconds(start_ns: int) -> float:
    """``datetime.fromtimestamp(start_ns / 1e9, UTC).timestamp()`` without the ``datetime``:
    the time rounded to the microsecond, half to even, as ``datetime`` rounds it."""
    fraction, whole = math.modf(start_ns / 1e9)
    return (int(whole) * 1_000_000 + round(fraction * 1e6)) / 1_000_000


def _durations_plain(values: tuple[float | None, ...]) -> bool:
    # A loop, not all() over a generator: half the cost, and it runs for every request span.
    for value in values:  # noqa: SIM110
        if value is not None and not 0.0 <= value <= MAX_DURATION_S:  # NaN is not
            return False
    return True


def _counts_plain(values: tuple[int | None, ...]) -> bool:
    for value in values:
        if value is not None and not (type(value) is int and 0 <= value <= MAX_TOKENS):
            return False
    return True


def _plainly_valid(row: RecordRow) -> bool:
    """Whether every value of ``row`` is plainly one that ``RequestRecord`` accepts: what a
    well-formed span gives, told in a few comparisons. Anything else (NaN, a negative or
    absurd number, an id that is not hex, a start near the range's ends, a long configured
    model name) is left to ``RequestRecord`` itself, so that it is refused exactly as before.
    The labels a mapper cuts to ``MAX_LABEL_LEN`` are not looked at again."""
    trace_id, span_id = row.trace_id, row.span_id
    return (
        _EARLIEST_S < row.start < _LATEST_S
        and len(trace_id) == 32
        and not trace_id.strip(_HEX)
        and trace_id != _ZERO_TRACE
        and len(span_id) == 16
        and not span_id.strip(_HEX)
        and span_id != _ZERO_SPAN
        and 0 < len(row.instance) <= MAX_LABEL_LEN
        and len(row.model) <= MAX_LABEL_LEN
        and _durations_plain(_DURATIONS(row))
        and _counts_plain(_COUNTS(row))
    )


def build_record(span: SpanView, engine: Engine, t: Timings, ctx: MappingContext) -> Outcome:
    """The validated ``RequestRecord``, or ``Skipped(rejected=True)`` with the reason it is
    unusable (``build_row``, as a record)."""
    return as_outcome(build_row(span, engine, t, ctx), span)


def as_outcome(mapped: Mapped, span: SpanView) -> Outcome:
    """``mapped`` with a request's row as its ``RequestRecord``."""
    if isinstance(mapped, RecordRow):
        return mapped.record(datetime.fromtimestamp(span.start_ns / 1e9, tz=UTC))
    return mapped


def build_row(span: SpanView, engine: Engine, t: Timings, ctx: MappingContext) -> Mapped:
    """The validated record's row, or ``Skipped(rejected=True)`` with the reason it is
    unusable."""
    if not span.trace_id or not span.span_id:
        return Skipped("invalid_id", engine.value, rejected=True)
    if span.start_ns <= 0:
        return Skipped("invalid_time", engine.value, rejected=True)
    if t.e2e_s is None:
        t = t._replace(e2e_s=span.duration_s)
    status, error_type, finish = outcome_fields(span)
    model, adapter = ctx.attribute(span, engine)
    try:
        # Positional, in ``RECORD_FIELDS`` order: this runs for every request span.
        row = RecordRow(
            span.trace_id,
            span.span_id,
            epoch_seconds(span.start_ns),
            ctx.instance,
            span.service[:MAX_LABEL_LEN],
            engine._value_,  # the member's value, without the (slower) property
            model,
            span.label(TENANT_ATTRS),
            span.label(PRIORITY_ATTRS),
            span.label(OPERATION_ATTRS),
            t.ttft_s,
            derive_tpot(t),
            t.e2e_s,
            t.queue_s,
            t.prefill_s,
            t.decode_s,
            t.preprocess_s,
            t.postprocess_s,
            t.gateway_s,
            t.input_tokens,
            t.output_tokens,
            t.cached_tokens,
            status._value_,
            error_type,
            finish,
            adapter,
            _PREFILL if ctx.role is Role.PREFILL else _UNIFIED,
            "",
            None,
            t.kv_transfer_s,
        )
        if not _plainly_valid(row):
            row.record(datetime.fromtimestamp(span.start_ns / 1e9, tz=UTC))  # or it raises
    except (InvalidRecord, ValueError, OverflowError, OSError) as exc:
        return Skipped("invalid_value", engine.value, rejected=True, detail=str(exc)[:200])
    return row


def tokens(span: SpanView, *names: str) -> int | None:
    return as_int(span.attr(*names))


_STAGE_KEYWORDS: Final = (
    ("detokeniz", "postprocess"),
    ("postprocess", "postprocess"),
    ("post_process", "postprocess"),
    ("tokeniz", "preprocess"),
    ("preprocess", "preprocess"),
    ("pre_process", "preprocess"),
    ("chat_template", "preprocess"),
    ("gateway", "gateway"),
    ("prefill", "prefill"),
    ("decode", "decode"),
    ("queue", "queue"),
)


def classify_stage(name: str) -> str | None:
    """The pipeline stage a child span's name describes, if any."""
    lowered = name.lower()
    if "(host:" in lowered:  # SGLang per-thread spans cover a thread's whole share of a request
        return None
    for keyword, stage in _STAGE_KEYWORDS:
        if keyword in lowered:
            return stage
    return None


def stage_fragment(span: SpanView, stage: str, service: str = "") -> StageFragment | Skipped:
    seconds = span.duration_s
    if not span.trace_id or not span.span_id:
        return Skipped("invalid_id", rejected=True)
    if seconds is None:
        return Skipped("invalid_time", rejected=True)
    return StageFragment(
        span.trace_id,
        span.span_id,
        stage,
        seconds,
        span.parent_span_id,
        service or span.service[:MAX_LABEL_LEN],
        span.kind,
        span.start_ns,
        span.end_ns,
    )
