"""Late parallel-sampling sequences (#30): each sequence of an ``n`` > 1 request is exported
when it ends; one that reaches the sidecar after its request was stored (later than the
reassembly window) is folded into the stored row by the store writer: output tokens summed,
end to end time extended, the prompt counted once, the rollups corrected, and each sequence
folded exactly once (a retry, or a replay after a crash, adds nothing).

Spans are made by the OpenTelemetry SDK in vLLM's shape, sent by its OTLP/HTTP exporter to
running sidecars, and read back from SQLite and PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from sqlalchemy import func, select

from infersight.collector.assembly import Request, SequenceMemory
from infersight.collector.mapping import Place
from infersight.collector.sidecar import Sidecar
from infersight.core.errors import Unavailable
from infersight.core.records import Engine, RequestRecord
from infersight.core.sequences import LateSequence
from infersight.core.sketch import QuantileSketch
from infersight.storage.tables import request_rollups, request_sequences, requests
from infersight.storage.writer import open_writer
from tests.collector.harness import export_spans, running_sidecar, sidecar_config
from tests.collector.test_collector_parallel_sampling import PROMPT, VllmServer
from tests.waiting import until

pytestmark = pytest.mark.e2e

S = 1_000_000_000


def two_sequences() -> tuple[ReadableSpan, ReadableSpan]:
    """One request with n = 2: a short sequence (first token 0.21 s, 40 tokens, ends at
    1.0 s) and a long one (0.25 s, 300 tokens, ends at 6.0 s), the shorter exported first."""
    spans = VllmServer().request(
        "chatcmpl-late", [(0.21, 1.0, 40), (0.25, 6.0, 300)], time.time_ns() - 30 * S
    )
    short, long = sorted(
        (s for s in spans if s.name == "llm_request"), key=lambda s: s.end_time or 0
    )
    return short, long


def stored(store) -> list[dict]:
    with store.engine.connect() as c:
        return [dict(r._mapping) for r in c.execute(select(requests))]


def rollups(store) -> dict[str, dict]:
    with store.engine.connect() as c:
        rows = [dict(r._mapping) for r in c.execute(select(request_rollups))]
    return {row["resolution"]: row for row in rows}


def folded_count(store) -> int:
    with store.engine.connect() as c:
        return int(c.execute(select(func.count()).select_from(request_sequences)).scalar_one())


def assert_one_request_of_both(store) -> None:
    (row,) = stored(store)
    assert row["input_tokens"] == PROMPT  # the prompt once
    assert row["output_tokens"] == 340
    assert row["ttft_s"] == pytest.approx(0.21)
    assert row["e2e_s"] == pytest.approx(6.0)
    assert row["decode_s"] == pytest.approx(6.0 - 0.25)
    by_resolution = rollups(store)
    assert by_resolution  # minute, hour and day
    for roll in by_resolution.values():
        assert (roll["requests"], roll["input_tokens"], roll["output_tokens"]) == (1, PROMPT, 340)
        e2e = QuantileSketch.from_bytes(roll["e2e_sketch"])
        assert (e2e.count, e2e.sum) == (1, pytest.approx(6.0))
        assert QuantileSketch.from_bytes(roll["ttft_sketch"]).count == 1
    assert folded_count(store) == 1


def test_a_sequence_later_than_the_window_folds_into_its_stored_request(
    store, tmp_path: Path
) -> None:
    short, long = two_sequences()
    config = sidecar_config("vllm-0", tmp_path / "spool", window_s=0.5, model="llama-8b")
    with running_sidecar(open_writer(store.engine), config) as app:
        export_spans(app, [short])
        until(lambda: len(stored(store)) == 1, "the first sequence stored")
        assert stored(store)[0]["output_tokens"] == 40
        export_spans(app, [long])  # its request was stored seconds ago: the window was 0.5 s
        until(lambda: stored(store)[0]["output_tokens"] == 340, "the late sequence folded")
        assert app.metrics.value("infersight_collector_sequences_merged_total") == 1
    assert_one_request_of_both(store)


def test_a_late_sequence_shipped_again_is_not_added_twice(store, tmp_path: Path) -> None:
    """The writer's fold is exactly-once per sequence: the same fold again is a duplicate."""
    short, long = two_sequences()
    config = sidecar_config("vllm-0", tmp_path / "spool", window_s=0.5, model="llama-8b")
    writer = open_writer(store.engine)
    with running_sidecar(writer, config) as app:
        export_spans(app, [short])
        until(lambda: len(stored(store)) == 1, "the first sequence stored")
        export_spans(app, [long])
        until(lambda: stored(store)[0]["output_tokens"] == 340, "the late sequence folded")
    row = stored(store)[0]
    late_span = f"{long.context.span_id:016x}"
    from infersight.core.records import Engine, RequestRecord

    again = RequestRecord(
        trace_id=row["trace_id"], span_id=late_span, start=row["start"], instance="vllm-0",
        engine=Engine.VLLM, model="llama-8b", ttft_s=0.25, e2e_s=6.0, input_tokens=PROMPT,
        output_tokens=300,
    )  # fmt: skip
    fold = LateSequence((row["start"], row["trace_id"], row["span_id"]), again, (late_span,))
    result = writer.fold_sequences([fold])
    assert (result.inserted, result.duplicates) == (0, 1)
    assert_one_request_of_both(store)


class CrashAfterFold:
    """The store writer, but the process 'crashes' right after a fold commits: the shipper
    sees an error, so the sequence stays in its spool (as after a kill -9 at that moment)."""

    def __init__(self, writer) -> None:
        self.writer = writer

    def __getattr__(self, name: str):
        return getattr(self.writer, name)

    def fold_sequences(self, late):
        self.writer.fold_sequences(late)
        raise Unavailable("crashed after the commit", details={"reason": "test"})


def test_a_fold_replayed_after_a_crash_is_not_stored_again(store, tmp_path: Path) -> None:
    short, long = two_sequences()
    spool = tmp_path / "spool"
    writer = open_writer(store.engine)
    config = sidecar_config("vllm-0", spool, window_s=0.5, model="llama-8b")
    with running_sidecar(CrashAfterFold(writer), config) as app:
        export_spans(app, [short])
        until(lambda: len(stored(store)) == 1, "the first sequence stored")
        export_spans(app, [long])
        until(lambda: folded_count(store) == 1, "the fold committed")
        until(lambda: app.spool.stats()[0] >= 1, "the sequence still spooled")
    assert_one_request_of_both(store)
    # The restarted sidecar remembers no request (its memory went with the process): the
    # spooled sequence would be a request of its own, but the store says it was folded.
    restarted: Sidecar
    with running_sidecar(writer, config) as restarted:
        until(lambda: restarted.spool.stats()[0] == 0, "the replay settled")
    assert_one_request_of_both(store)


def _request(span: int, request_id: str, *, parent: str = "p" * 16, out: int = 10):
    record = RequestRecord(
        trace_id="a" * 32, span_id=f"{span:016x}", start=datetime(2026, 12, 6, 9, tzinfo=UTC),
        instance="vllm-0", engine=Engine.VLLM, model="m", ttft_s=0.2, e2e_s=1.0,
        input_tokens=PROMPT, output_tokens=out,
    )  # fmt: skip
    return Request(record, Place(parent, 1, 2, request_id))


def test_the_memory_tells_late_sequences_from_replays_and_other_requests() -> None:
    now = [0.0]
    memory = SequenceMemory(capacity=2, keep_s=60.0, clock=lambda: now[0])
    first = [_request(1, "req-1")]
    assert memory.split([r.record for r in first], first) == ([first[0].record], [])
    memory.remember([first[0].record], first)
    # a sibling later: late, folded into the stored request
    later = [_request(2, "req-1"), _request(3, "req-2"), _request(4, "req-1", parent="q" * 16)]
    kept, late = memory.split([r.record for r in later], later)
    assert [r.span_id for r in kept] == [f"{3:016x}", f"{4:016x}"]  # another request, parent
    (fold,) = late
    assert fold.request == (first[0].record.start, "a" * 32, f"{1:016x}")
    assert fold.members == (f"{2:016x}",)
    # the stored request shipped again is no late sequence of itself
    assert memory.split([first[0].record], first) == ([first[0].record], [])
    # bounded: past keep_s, or beyond capacity, a group is forgotten
    now[0] = 61.0
    assert memory.split([later[0].record], later[:1]) == ([later[0].record], [])
    assert len(memory) == 0
