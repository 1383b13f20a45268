"""Parallel sampling (``n`` > 1): one user request, several sequences, each traced apart.

vLLM emits one ``llm_request`` span per sequence of a request asked for ``n`` > 1 answers,
all with the request's ``gen_ai.request.id`` and the same parent; each is exported when its
sequence ends, and says ``n = 1``. The sidecar folds the siblings that meet within its
reassembly window (``collector.assembly.fold_sequences``, with ``merge_sequences``); a
sibling that comes later is folded into the request already stored (``fold_late_sequence``,
applied by the store writer: ``storage.writer``'s ``fold_sequences``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

from infersight.core.errors import InvalidRecord
from infersight.core.records import RequestRecord

#: What a stored request keeps whatever its late sequences say: its key, its place in time
#: (the stored row's primary key and rollup bucket) and its labels.
KEPT: Final = (
    "trace_id", "span_id", "start", "instance", "service", "engine", "model", "tenant",
    "priority", "operation", "adapter", "role", "peer", "input_tokens", "cached_tokens",
    "team", "workload",
)  # fmt: skip


def merge_sequences(siblings: Sequence[RequestRecord]) -> RequestRecord | None:
    """The user's request from its sequences' records: what the user felt and what was done.

    The key, labels, prompt and the stages up to the first token are those of the sequence
    whose first token came first (ties: the lowest span id, so a replay folds the same way);
    TTFT is that first token; end to end runs from the earliest start to the last sequence's
    end; output tokens are summed, the prompt (and its cached part) counted once; TPOT is the
    sequences' time per output token weighted by their tokens after the first; decode and
    postprocessing the longest; an error in any sequence fails the request. ``None`` when the
    folded record would be implausible (``RequestRecord``'s bounds)."""
    ordered = sorted(
        siblings,
        key=lambda r: (r.ttft_s if r.ttft_s is not None else math.inf, r.span_id),
    )
    first = ordered[0]
    start = min(r.start for r in siblings)
    ends = [r.start.timestamp() + r.e2e_s for r in siblings if r.e2e_s is not None]
    e2e = max(ends) - start.timestamp() if ends else first.e2e_s
    outputs = [r.output_tokens for r in siblings if r.output_tokens is not None]
    weighted = [
        (r.tpot_s, r.output_tokens - 1)
        for r in siblings
        if r.tpot_s is not None and r.output_tokens is not None and r.output_tokens > 1
    ]
    weight = sum(w for _, w in weighted)
    tpot = sum(v * w for v, w in weighted) / weight if weight else first.tpot_s
    failed = next((r for r in ordered if r.is_error), None)
    last = max(siblings, key=lambda r: (r.e2e_s or 0.0, r.span_id))
    updates: dict[str, Any] = {
        "start": start,
        "e2e_s": e2e,
        "tpot_s": tpot,
        "output_tokens": sum(outputs) if outputs else None,
        "decode_s": max((r.decode_s for r in siblings if r.decode_s is not None), default=None),
        "postprocess_s": max(
            (r.postprocess_s for r in siblings if r.postprocess_s is not None), default=None
        ),
        "finish_reason": last.finish_reason,
    }
    if failed is not None:
        updates.update(status=failed.status, error_type=failed.error_type)
    try:
        return dataclasses.replace(first, **updates)
    except InvalidRecord:
        return None


def fold_late_sequence(stored: RequestRecord, late: RequestRecord) -> RequestRecord | None:
    """The stored request with one of its sequences that came after it was stored: as
    ``merge_sequences`` folds them, keeping the stored row's key, start and labels (``KEPT``:
    the prompt is counted once), its end to end time running to the later end. ``None``
    when the result would be implausible."""
    merged = merge_sequences([stored, late])
    if merged is None:
        return None
    base = stored.start.timestamp()
    ends = [r.start.timestamp() + r.e2e_s for r in (stored, late) if r.e2e_s is not None]
    updates: dict[str, Any] = {name: getattr(stored, name) for name in KEPT}
    updates["e2e_s"] = max(ends) - base if ends else stored.e2e_s
    try:
        return dataclasses.replace(merged, **updates)
    except InvalidRecord:
        return None


class LateSequence(NamedTuple):
    """A request's sequence(s) that came after the request was stored: ``record`` (the
    sequences the sidecar assembled, folded together when several came at once), the stored
    request's key ``request`` (start, trace id, span id), and the span ids of every sequence
    in ``record`` (``members``), each folded once."""

    request: tuple[datetime, str, str]
    record: RequestRecord
    members: tuple[str, ...]
