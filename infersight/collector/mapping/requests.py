"""A vLLM-family request span (``llm_request``: vLLM V0 / V1, TensorRT-LLM) read in one pass,
from a table keyed by attribute name, straight into its record's row (issue 35).

The general path builds a ``SpanView`` with every attribute decoded into a dict, dispatches it
(``dispatch.map_row``), reads the engine's timings from the dict (``vllm.timings``), builds
and checks the row (``base.build_row``), then checks it again against the plausibility rules
(``validation.check``). For the span most servers send most of, the ingest path instead reads
each attribute once: ``LLM_REQUEST`` says, for every attribute name the mapper, the model
attribution and the rules read, into which slot its value goes and how it is read
(``otlp_wire.read_slots``); ``row`` makes the row of the slots.

It takes only what is plainly well formed: a double where a time is read, an int where a
count is, a string where a label is, each in the record's range, nothing dropped by a limit,
no attribute that could make another mapper claim the span (``REFUSED``). Anything else
(``None`` from ``read_slots`` or ``row``) goes the general way, which stores, refuses and
counts it exactly as before; the row made here is the one the general path makes of the same
span (``tests/collector/test_collector_ingest_golden.py`` holds both to the code before).

To read one more attribute into a record (another tenant attribute, say): add its name to the
tuple the mapper reads it from (``base.TENANT_ATTRS``): ``LLM_REQUEST`` is built from those
tuples. A new record field needs a slot here and its place in ``row``.
"""

from __future__ import annotations

from typing import Final

from infersight.collector import engines, validation
from infersight.collector.mapping import gateways, pd_proxy, sglang, tgi, trtllm, vllm
from infersight.collector.mapping.base import (
    _EARLIEST_S,
    _LATEST_S,
    ERROR_TYPE,
    FINISH_ATTRS,
    MODEL_ATTRS,
    OPERATION_ATTRS,
    PRIORITY_ATTRS,
    REQUEST_ID_ATTRS,
    TENANT_ATTRS,
    MappingContext,
    RecordRow,
    epoch_seconds,
    outcome_of,
    tpot_of,
)
from infersight.collector.mapping.client import OPENINFERENCE_KIND
from infersight.collector.mapping.spans import KIND_CLIENT, STATUS_ERROR
from infersight.core.records import MAX_DURATION_S, MAX_LABEL_LEN, Engine, Status

#: How a slot's value is read (``otlp_wire.read_slots``): a time in seconds, a token count, a
#: label, or not at all (a name that sends the span the general way).
SECONDS, COUNT, TEXT, REFUSED = range(4)

#: Every token count the plausibility rules check (the vLLM-family mapper's among them), and
#: the timings that mapper reads.
_COUNTS: Final = validation.TOKEN_ATTRIBUTES
_TIMES: Final = (vllm.TTFT, vllm.E2E, vllm.QUEUE, vllm.PREFILL, vllm.DECODE, trtllm.KV_TRANSFER)
_LABELS: Final = (
    *MODEL_ATTRS, *TENANT_ATTRS, *PRIORITY_ATTRS, *OPERATION_ATTRS, *REQUEST_ID_ATTRS,
    ERROR_TYPE, *FINISH_ATTRS,
)  # fmt: skip
#: Attributes that make another mapper claim an ``llm_request`` span: an OpenInference LLM
#: span is a client's; TGI's spans carry ``total_time`` and ``inference_time`` strings.
_REFUSED: Final = (OPENINFERENCE_KIND, "total_time", "inference_time")


def _table() -> tuple[dict[str, int], tuple[int, int, int]]:
    kinds: dict[str, int] = {}
    for how, names in ((SECONDS, _TIMES), (COUNT, _COUNTS), (TEXT, _LABELS), (REFUSED, _REFUSED)):
        for name in names:
            if kinds.setdefault(name, how) != how:
                raise ImportError(f"{name!r} is read as two kinds of value")
    ordered = sorted(kinds, key=lambda name: kinds[name])  # stable: by kind, then as listed
    bounds = tuple(next(i for i, name in enumerate(ordered) if kinds[name] >= how)
                   for how in (COUNT, TEXT, REFUSED))  # fmt: skip
    return {name: slot for slot, name in enumerate(ordered)}, bounds  # type: ignore[return-value]


#: Attribute name → slot for an ``llm_request`` span, slots of times first, then of counts,
#: of labels and of refused names, starting at ``BOUNDS`` (``otlp_wire.read_slots``).
LLM_REQUEST, BOUNDS = _table()
SLOTS: Final = len(LLM_REQUEST)
#: The longest name read: a limit on attribute sizes below it drops some (the general way).
LONGEST_NAME: Final = max(map(len, LLM_REQUEST))


def _slot(name: str) -> int:
    return LLM_REQUEST[name]


def _slots(names: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(_slot(name) for name in names)


_TTFT, _E2E, _QUEUE, _PREFILL, _DECODE, _KV = _slots(_TIMES)
#: Each count's slot, then its fallback's (``vllm.timings``).
_PROMPT, _INPUT = _slots(vllm.PROMPT_TOKENS)
_COMPLETION, _OUTPUT = _slots(vllm.OUTPUT_TOKENS)
_CACHE_READ, _CACHED = _slots(vllm.CACHED_TOKENS)
_MODEL: Final = _slots(MODEL_ATTRS)
_TENANT: Final = _slots(TENANT_ATTRS)
_PRIORITY: Final = _slots(PRIORITY_ATTRS)
_OPERATION: Final = _slots(OPERATION_ATTRS)
_REQUEST_ID: Final = _slots(REQUEST_ID_ATTRS)
_ERROR: Final = _slot(ERROR_TYPE)
_FINISH: Final = _slots(FINISH_ATTRS)

NAME: Final = vllm.SPAN_NAME
_SHAPES_BEFORE: Final = (
    pd_proxy.claims,
    gateways.litellm_claims,  # never an ``llm_request`` span (``mapping.gateways``)
    tgi.claims,
    sglang.claims,
    trtllm.claims,
    vllm.claims,
)
# This reader stands in for the dispatch of an ``llm_request`` span: the shapes ahead of vLLM's
# in the registry must be the ones it knows would not claim it (or claim it as TensorRT-LLM).
if tuple(shape.claims for shape in engines.SPAN_SHAPES[: len(_SHAPES_BEFORE)]) != _SHAPES_BEFORE:
    raise ImportError("the span shapes ahead of vLLM's changed: update mapping.requests")


def plain_context(context: MappingContext) -> bool:
    """Whether rows of this context can be told valid by their values alone (an instance
    name a record accepts)."""
    return 0 < len(context.instance) <= MAX_LABEL_LEN


def _label(values: list[object], slots: tuple[int, ...]) -> str:
    for slot in slots:
        value = values[slot]
        if value is not None:
            return value[:MAX_LABEL_LEN]  # type: ignore[index,no-any-return]
    return ""


_OK: Final = Status.OK.value
_NEW_ROW: Final = tuple.__new__  # ``RecordRow(…)`` without its Python-level ``__new__``
_VLLM: Final = Engine.VLLM
_TRTLLM: Final = Engine.TRTLLM


def row(  # noqa: PLR0912 (one function: a call per field costs)
    values: list[object],
    trace_id: str,
    span_id: str,
    start_ns: int,
    end_ns: int,
    kind: int,
    status_code: int,
    service: str,
    scope: str,
    context: MappingContext,
    role: str,
    attributions: dict[tuple[str, str, Engine], tuple[str, str]],
) -> RecordRow | None:
    """The row ``map_row`` makes of this span (named ``llm_request``, its ids valid, ``start_ns``
    > 0 and ``end_ns`` ≥ it, its attributes read into ``values`` by ``LLM_REQUEST``), or
    ``None`` when it is not plainly one (the general way decides). ``attributions`` keeps
    ``context.attributed`` of the names seen in one export."""
    if kind == KIND_CLIENT or not _EARLIEST_S < (start := epoch_seconds(start_ns)) < _LATEST_S:
        return None
    engine = _TRTLLM if scope == trtllm.SCOPE else _VLLM
    e2e = values[_E2E]
    if e2e is None:
        e2e = (end_ns - start_ns) / 1e9
        if e2e > MAX_DURATION_S:
            return None
    name = ""
    for slot in _MODEL:
        if (value := values[slot]) is not None:
            name = value[:MAX_LABEL_LEN]  # type: ignore[index]
            break
    key = (name, service, engine)
    attribution = attributions.get(key)
    if attribution is None:
        attribution = attributions[key] = context.attributed(name, service, engine)
    model, adapter = attribution
    if len(model) > MAX_LABEL_LEN:
        return None
    output = values[_COMPLETION]
    if output is None:
        output = values[_OUTPUT]
    prompt = values[_PROMPT]
    if prompt is None:
        prompt = values[_INPUT]
    cached = values[_CACHE_READ]
    if cached is None:
        cached = values[_CACHED]
    error, finish = values[_ERROR], values[_FINISH[0]]
    if finish is None:
        finish = values[_FINISH[1]]
    if error is None and finish is None and status_code != STATUS_ERROR:
        status, error_type, finish_reason = _OK, "", ""
    else:
        outcome, error_type, finish_reason = outcome_of(status_code, error, finish)  # type: ignore[arg-type]
        status = outcome._value_
    ttft, decode = values[_TTFT], values[_DECODE]
    tenant = priority = operation = ""
    for slot in _TENANT:
        if (value := values[slot]) is not None:
            tenant = value[:MAX_LABEL_LEN]  # type: ignore[index]
            break
    for slot in _PRIORITY:
        if (value := values[slot]) is not None:
            priority = value[:MAX_LABEL_LEN]  # type: ignore[index]
            break
    for slot in _OPERATION:
        if (value := values[slot]) is not None:
            operation = value[:MAX_LABEL_LEN]  # type: ignore[index]
            break
    return _NEW_ROW(
        RecordRow,
        (
            trace_id,
            span_id,
            start,
            context.instance,
            service[:MAX_LABEL_LEN],
            engine._value_,
            model,
            tenant,
            priority,
            operation,
            ttft,
            tpot_of(None, output, decode, e2e, ttft),  # type: ignore[arg-type]
            e2e,
            values[_QUEUE],
            values[_PREFILL],
            decode,
            None,
            None,
            None,
            prompt,
            output,
            cached,
            status,
            error_type,
            finish_reason,
            adapter,
            role,
            "",
            None,
            values[_KV] if engine is _TRTLLM else None,
        ),
    )


def request_id(values: list[object]) -> str:
    """The engine's request id (``place_of``)."""
    return _label(values, _REQUEST_ID)
