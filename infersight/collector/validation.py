"""Plausibility rules a request span (or a client span: ``client_refusal``) must meet to be
acknowledged and stored.

The engine mappers turn attributes into numbers and the record refuses values that are
impossible on their own (negative, NaN, out of range); the rules here refuse combinations no
real request produces, and timestamps outside the accepted window. A refused span is reported
back in ``partial_success`` with its reason and counted in
``infersight_collector_spans_rejected_total{reason}``; nothing implausible is stored with a
flag or silently turned into NULL. Reasons:

- ``end_before_start``: the span ends before it starts (whatever its ``e2e`` attribute says).
- ``invalid_tokens``: a token-count attribute is present but is not an integer ≥ 0 (``1.5``,
  ``"abc"``, ``true``); an absent count stays unknown.
- ``ttft_exceeds_e2e`` / ``stage_exceeds_e2e``: the time to first token, or the queue, prefill
  or decode time, is longer than the end-to-end time by more than ``TOLERANCE_RATIO`` of it
  plus ``TOLERANCE_S`` (engines measure them with separate clock reads).
- ``start_too_old`` / ``start_in_future``: outside ``core.accept.AcceptWindow``.
"""

from __future__ import annotations

import math
from typing import Final, TypeVar

from infersight.collector.mapping import Mapped, Outcome, RecordRow, Skipped, SpanView
from infersight.collector.mapping.client import TOKEN_ATTRS as CLIENT_TOKEN_ATTRIBUTES
from infersight.core.accept import AcceptWindow
from infersight.core.client import ClientRecord
from infersight.core.records import RequestRecord

TOLERANCE_S: Final = 0.01
TOLERANCE_RATIO: Final = 0.01
#: Every attribute an engine mapper reads a token count from.
TOKEN_ATTRIBUTES: Final = (
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cached_tokens",
    "prompt_tokens",
    "completion_tokens",
    "generated_tokens",
    "cached_tokens",
)


#: A mapper's outcome, with a request as its record (``map_span``) or its row (``map_row``).
_Outcome = TypeVar("_Outcome", Outcome, Mapped)


def check(outcome: _Outcome, span: SpanView, now_s: float, window: AcceptWindow | None) -> _Outcome:
    """``outcome`` itself, or a rejection when a request (a record or its row) or a client
    record breaks a rule."""
    if isinstance(outcome, RecordRow):  # the ingest path's requests
        reason = refusal(outcome, span, now_s, window)
        return outcome if reason is None else Skipped(reason, outcome.engine, rejected=True)
    if isinstance(outcome, ClientRecord):
        reason = client_refusal(outcome, span, now_s, window)
        return outcome if reason is None else Skipped(reason, "client", rejected=True)
    if not isinstance(outcome, RequestRecord):
        return outcome
    reason = refusal(outcome, span, now_s, window)
    if reason is None:
        return outcome
    return Skipped(reason, outcome.engine.value, rejected=True)


def refusal(
    record: RequestRecord | RecordRow, span: SpanView, now_s: float, window: AcceptWindow | None
) -> str | None:
    """The first rule ``record`` (mapped from ``span``) breaks, or ``None``."""
    if span.end_ns < span.start_ns:
        return "end_before_start"
    if not _token_counts_are_integers(span):
        return "invalid_tokens"
    reason = timing_refusal(
        record.e2e_s, record.ttft_s, record.queue_s, record.prefill_s, record.decode_s
    )
    if reason is None and window is not None:
        return window.refusal(span.start_ns / 1e9, now_s)
    return reason


def timing_refusal(
    e2e: float | None,
    ttft: float | None,
    queue: float | None,
    prefill: float | None,
    decode: float | None,
) -> str | None:
    """The rule a request's timings break (TTFT, then a stage, longer than end to end)."""
    if e2e is not None:
        limit = e2e * (1.0 + TOLERANCE_RATIO) + TOLERANCE_S
        if ttft is not None and ttft > limit:
            return "ttft_exceeds_e2e"
        for value in (queue, prefill, decode):
            if value is not None and value > limit:
                return "stage_exceeds_e2e"
    return None


def client_refusal(
    record: ClientRecord, span: SpanView, now_s: float, window: AcceptWindow | None
) -> str | None:
    """The first rule a client record breaks, or ``None``: the request's rules that apply to
    what a client measures (its span's times, its token counts, TTFT within E2E)."""
    if span.end_ns < span.start_ns:
        return "end_before_start"
    if not _token_counts_are_integers(span, CLIENT_TOKEN_ATTRIBUTES):
        return "invalid_tokens"
    e2e = record.e2e_s
    ttft = record.ttft_s
    if e2e is not None and ttft is not None and ttft > e2e * (1 + TOLERANCE_RATIO) + TOLERANCE_S:
        return "ttft_exceeds_e2e"
    if window is not None:
        return window.refusal(span.start_ns / 1e9, now_s)
    return None


def _token_counts_are_integers(span: SpanView, names: tuple[str, ...] = TOKEN_ATTRIBUTES) -> bool:
    get = span.attributes.get
    for name in names:
        value = get(name)
        if value is None or (type(value) is int and value >= 0):
            continue
        if not _is_count(value):
            return False
    return True


def _is_count(value: object) -> bool:
    """An integer ≥ 0, given as an int, an integral float or a numeric string."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return False
    if isinstance(value, float):
        return math.isfinite(value) and value >= 0 and value == int(value)
    return False
