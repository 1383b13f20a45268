"""One request inside a simulated server: its mutable engine state, and the records it becomes.

``RequestState`` is engine-internal bookkeeping (mutable, slotted, never shared). When the
request finishes, ``finished_record`` / ``refused_record`` turn it into the normalised,
validated ``core.records.RequestRecord`` with vLLM V1's stage definitions: queue = scheduled −
queued, prefill = first token − scheduled, decode = last token − first token, TTFT and E2E from
arrival at the frontend (so tokenization counts). A gateway in front of the server adds its own
time as ``gateway_s`` only (the engine's timings are what the engine sees).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from infersight.core.records import Engine, RequestRecord, Status
from infersight.simulator.events import Completion
from infersight.simulator.workload import Arrival


class TokenListener(Protocol):
    """Told when a streamed request produces tokens and when it finishes (real-time mode)."""

    def on_token(self, t: float) -> None: ...

    def on_finish(self, completion: Completion) -> None: ...


class RequestState:
    """Mutable engine-internal state of one request."""

    __slots__ = (
        "adapter",
        "arrival",
        "c0",
        "computed",
        "external",
        "family",
        "finish_at",
        "first_sched",
        "first_token",
        "g0",
        "gateway_s",
        "gen",
        "gen_at_join",
        "generation",
        "input_tokens",
        "join_counter",
        "kv_failed",
        "kv_prompt",
        "kv_ready",
        "listener",
        "max_tokens",
        "output_tokens",
        "parent_span_id",
        "preemptions",
        "prefill_left",
        "priority",
        "queued",
        "rid",
        "siblings",
        "temperature",
        "tenant",
        "tokenize_s",
        "top_p",
        "trace_id",
    )

    def __init__(self, rid: int, a: Arrival, queued: float, tokenize_s: float) -> None:
        self.rid = rid
        self.arrival = a.t
        self.queued = queued
        self.tokenize_s = tokenize_s
        self.input_tokens = a.input_tokens
        self.output_tokens = max(1, min(a.output_tokens, a.max_tokens))
        self.max_tokens = a.max_tokens
        self.tenant = a.tenant
        self.priority = a.priority
        self.gateway_s = a.gateway_s
        self.trace_id = a.trace_id
        self.parent_span_id = a.parent_span_id if a.trace_id else ""
        self.temperature = 0.7
        self.top_p = 0.95
        self.prefill_left = a.input_tokens
        self.computed = 0
        self.gen = 0
        self.gen_at_join = 0
        self.join_counter = 0
        self.finish_at = 0
        self.generation = 0
        self.preemptions = 0
        self.first_sched = -1.0
        self.first_token = -1.0
        self.g0 = 0.0
        self.c0 = 0.0
        self.listener: TokenListener | None = None
        #: Disaggregated decode: prompt tokens whose KV cache comes from the prefill instance
        #: (not computed here), when it has arrived (virtual s; < 0: nothing to wait for),
        #: and whether the transfer fails.
        self.external = 0
        self.kv_ready = -1.0
        self.kv_failed = False
        self.adapter = a.adapter
        #: Parallel sampling: the other sequences' output lengths (forked when the prompt's
        #: prefill completes), the family the sequences share, and the prompt tokens of
        #: the KV cache this sequence holds (the shared prompt is split among them).
        self.siblings = a.sibling_outputs
        self.family: Family | None = None
        self.kv_prompt = a.input_tokens

    def fork(self, rid: int, output_tokens: int) -> RequestState:
        """Another sequence of this request, forked when its prompt's prefill completed:
        the same arrival, schedule and first token, its own output length."""
        child = copy.copy(self)
        child.rid = rid
        child.output_tokens = max(1, min(output_tokens, self.max_tokens))
        child.siblings = ()
        child.listener = None
        child.preemptions = 0
        child.generation = 0
        return child


class Family:
    """The sequences of one parallel-sampling request: their records as they finish."""

    __slots__ = ("left", "listener", "preemptions", "records", "request_id", "trace_id")

    def __init__(self, n: int, listener: TokenListener | None) -> None:
        self.left = n
        self.listener = listener
        self.records: list[RequestRecord] = []
        self.trace_id = ""
        self.request_id = ""
        self.preemptions = 0


def fold_sequences(records: list[RequestRecord]) -> RequestRecord:
    """The user's request from its sequences' records, as ``collector.assembly`` folds the
    spans of an ``n`` > 1 request: the labels, prompt and stages up to the first token of the
    sequence whose first token came first (ties: the lowest span id); end to end to the last
    sequence's end; output tokens summed; TPOT weighted by each sequence's tokens after its
    first; decode the longest; the finish reason of the sequence that ended last."""
    first = min(records, key=lambda r: (r.ttft_s if r.ttft_s is not None else 1e300, r.span_id))
    start = min(r.start for r in records)
    ends = [r.start + timedelta(seconds=r.e2e_s or 0.0) for r in records]
    weighted = [
        (r.tpot_s, r.output_tokens - 1)
        for r in records
        if r.tpot_s is not None and r.output_tokens is not None and r.output_tokens > 1
    ]
    weight = sum(w for _, w in weighted)
    last = max(records, key=lambda r: (r.e2e_s or 0.0, r.span_id))
    failed = next((r for r in records if r.is_error), None)
    if failed is not None:
        first = dataclasses.replace(first, status=failed.status, error_type=failed.error_type)
    return dataclasses.replace(
        first,
        start=start,
        e2e_s=(max(ends) - start).total_seconds(),
        tpot_s=sum(v * w for v, w in weighted) / weight if weight else first.tpot_s,
        output_tokens=sum(r.output_tokens or 0 for r in records),
        decode_s=max((r.decode_s for r in records if r.decode_s is not None), default=None),
        finish_reason=last.finish_reason,
    )


@dataclass(frozen=True, slots=True)
class Labels:
    """What every record of one server carries."""

    instance: str
    service: str
    model: str
    epoch: datetime


class IdSource:
    """Trace, span and request ids from a byte source, drawn in blocks (deterministic)."""

    __slots__ = ("_draw", "_pool")

    def __init__(self, draw: Callable[[int], bytes]) -> None:
        self._draw = draw
        self._pool = memoryview(b"")

    def next(self) -> tuple[str, str, str]:
        if len(self._pool) < 36:
            self._pool = memoryview(self._draw(36 * 1024))
        raw, self._pool = bytes(self._pool[:36]), self._pool[36:]
        trace = raw[:16].hex()
        span = raw[16:24].hex()
        if trace == "0" * 32:
            trace = "1".rjust(32, "0")
        if span == "0" * 16:
            span = "1".rjust(16, "0")
        return trace, span, "cmpl-" + raw[24:].hex()


def finished_record(
    r: RequestState, labels: Labels, trace_id: str, span_id: str, end: float
) -> RequestRecord:
    out = r.output_tokens
    decode = end - r.first_token
    return RequestRecord(
        trace_id=trace_id,
        span_id=span_id,
        start=labels.epoch + timedelta(seconds=r.arrival),
        instance=labels.instance,
        service=labels.service,
        engine=Engine.VLLM,
        model=labels.model,
        adapter=r.adapter,
        tenant=r.tenant,
        priority=r.priority,
        operation="chat",
        ttft_s=r.first_token - r.arrival,
        tpot_s=decode / (out - 1) if out > 1 else None,
        e2e_s=end - r.arrival,
        queue_s=r.first_sched - r.queued,
        prefill_s=r.first_token - r.first_sched,
        decode_s=decode,
        preprocess_s=r.queued - r.arrival,
        gateway_s=r.gateway_s or None,
        input_tokens=r.input_tokens,
        output_tokens=out,
        status=Status.OK,
        finish_reason="length" if out >= r.max_tokens else "stop",
    )


def refused_record(
    r: RequestState,
    labels: Labels,
    trace_id: str,
    span_id: str,
    t: float,
    error_type: str = "context_length_exceeded",
) -> RequestRecord:
    return RequestRecord(
        trace_id=trace_id,
        span_id=span_id,
        start=labels.epoch + timedelta(seconds=r.arrival),
        instance=labels.instance,
        service=labels.service,
        engine=Engine.VLLM,
        model=labels.model,
        adapter=r.adapter,
        tenant=r.tenant,
        priority=r.priority,
        operation="chat",
        e2e_s=t - r.arrival,
        queue_s=t - r.queued,
        preprocess_s=r.queued - r.arrival,
        gateway_s=r.gateway_s or None,
        input_tokens=r.input_tokens,
        output_tokens=0,
        status=Status.ERROR,
        error_type=error_type,
        finish_reason="abort",
    )
