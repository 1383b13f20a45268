"""Trace assembly decided on its own (no IO): which fragments are a request's, which are
refused and why, which wait; and each stage's time counted once when spans overlap."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.collector.assembly import Reassembly, Refusal, Request, assemble, stage_seconds
from infersight.collector.codec import (
    decode_piece,
    decode_placed,
    encode_fragment,
    encode_link,
    encode_record,
)
from infersight.collector.mapping import Link, Place, StageFragment
from infersight.collector.mapping.spans import KIND_SERVER
from infersight.core.errors import InvalidInput
from infersight.core.records import RequestRecord

TRACE = "ab" * 16
T0 = 1_764_000_000_000_000_000
MS = 1_000_000


def request(span_id: str, parent: str = "", service: str = "vllm", e2e: float = 1.0) -> Request:
    record = RequestRecord(
        trace_id=TRACE,
        span_id=span_id,
        start=datetime.fromtimestamp(T0 / 1e9, tz=UTC),
        instance="node-1",
        service=service,
        e2e_s=e2e,
    )
    return Request(record, Place(parent, T0, T0 + int(e2e * 1e9)))


def fragment(
    span_id: str, parent: str, stage: str, start_ms: float, end_ms: float, service: str = "vllm"
) -> StageFragment:
    start, end = T0 + int(start_ms * MS), T0 + int(end_ms * MS)
    return StageFragment(TRACE, span_id, stage, (end - start) / 1e9, parent, service, 1, start, end)


def link(span_id: str, parent: str, service: str = "vllm") -> Link:
    return Link(TRACE, span_id, parent, service, 1)


S1, S2 = "1" * 16, "2" * 16


def test_a_fragment_below_an_unknown_parent_waits_and_merges_once_the_parent_is_known() -> None:
    decode = fragment("d" * 16, "a" * 16, "decode", 100, 900)
    first = assemble([request(S1)], [decode])
    assert first.merged == []
    assert first.refused == {}
    assert first.records[0].decode_s is None
    second = assemble([request(S1)], [decode, link("a" * 16, S1)])
    assert second.merged == [0]
    assert second.records[0].decode_s == pytest.approx(0.8)


def test_each_fragment_goes_to_the_nearest_request_above_it_in_a_trace_of_several() -> None:
    agent = link("a" * 16, "")  # an agent's root making two calls in one trace
    pieces = [
        agent,
        fragment("e" * 16, S1, "queue", 0, 10),
        fragment("f" * 16, S2, "queue", 0, 30),
    ]
    out = assemble([request(S1, "a" * 16), request(S2, "a" * 16)], pieces)
    assert [r.queue_s for r in out.records] == [pytest.approx(0.010), pytest.approx(0.030)]
    assert sorted(out.merged) == [1, 2]


def test_a_loop_of_parents_leads_to_no_request() -> None:
    looped = [link("a" * 16, "b" * 16), link("b" * 16, "a" * 16)]
    pieces = [*looped, fragment("c" * 16, "a" * 16, "queue", 0, 5)]
    out = assemble([request(S1)], pieces)
    assert out.refused == {Refusal.NOT_DESCENDANT: [2]}


def test_only_a_server_gateway_span_directly_in_front_is_the_requests_gateway() -> None:
    internal_gateway = StageFragment(TRACE, "9" * 16, "gateway", 2.0, "8" * 16, "vllm", 1)
    out = assemble([request(S1, parent="9" * 16)], [internal_gateway])
    assert out.refused == {Refusal.ANCESTOR: [0]}  # not of kind SERVER: a client's span
    server_gateway = StageFragment(TRACE, "9" * 16, "gateway", 1.5, "", "gw", KIND_SERVER)
    out = assemble([request(S1, parent="9" * 16)], [server_gateway])
    assert out.merged == [0]
    assert out.records[0].gateway_s == pytest.approx(0.5)


def test_trace_pieces_and_placed_records_survive_the_spool_and_old_fragments_are_inert() -> None:
    f = fragment("c" * 16, S1, "prefill", 5, 50)
    assert decode_piece(TRACE, encode_fragment(f)) == f
    lk = link("a" * 16, "", service="chat-app")
    assert decode_piece(TRACE, encode_link(lk)) == lk
    placed = request(S1, parent="a" * 16)
    assert decode_placed(encode_record(placed.record, placed.place)) == placed
    assert decode_placed(encode_record(placed.record)) == (placed.record, None)
    legacy = json.dumps(["c" * 16, "prefill", 0.045]).encode()  # spooled by an older sidecar
    assert decode_piece(TRACE, legacy) is None


def test_nested_and_parallel_spans_of_a_request_count_each_instant_once() -> None:
    pieces = [
        fragment("a" * 16, S1, "preprocess", 0, 100),  # a preprocess span …
        fragment("b" * 16, "a" * 16, "preprocess", 10, 60),  # … and its tokenize child
        fragment("c" * 16, S1, "decode", 100, 900),
        fragment("d" * 16, S1, "decode", 100, 900),  # a second rank's copy of the same step
        fragment("e" * 16, S1, "postprocess", 850, 1200),  # runs past the request's end
    ]
    out = assemble([request(S1)], pieces)
    record = out.records[0]
    assert record.preprocess_s == pytest.approx(0.100)
    assert record.decode_s == pytest.approx(0.750)  # 100–850, then postprocess started
    assert record.postprocess_s == pytest.approx(0.150)  # 850–1000: within the request only
    total = sum(getattr(record, f"{s}_s") for s in ("preprocess", "decode", "postprocess"))
    assert total <= record.e2e_s


intervals = st.lists(
    st.tuples(
        st.integers(0, 10_000),
        st.integers(0, 5_000),
        st.sampled_from(["preprocess", "queue", "prefill", "decode", "postprocess"]),
    ),
    max_size=30,
)


def as_fragments(items: list[tuple[int, int, str]]) -> list[StageFragment]:
    """(start, length, stage) in nanoseconds after ``T0``."""
    return [
        StageFragment(TRACE, f"{i + 1:016x}", stage, n / 1e9, S1, "vllm", 1, T0 + at, T0 + at + n)
        for i, (at, n, stage) in enumerate(items)
    ]


@given(intervals, st.integers(0, 20_000), st.integers(1, 20_000))
def test_stage_times_add_up_to_the_union_of_the_spans_within_the_request(
    items: list[tuple[int, int, str]], lo: int, width: int
) -> None:
    fragments = as_fragments(items)
    totals = stage_seconds(fragments, T0 + lo, T0 + lo + width)
    covered = _union([(max(at, lo), min(at + n, lo + width)) for at, n, _ in items])
    assert sum(totals.values()) == pytest.approx(covered / 1e9, abs=1e-12)
    assert sum(totals.values()) <= width / 1e9 + 1e-12
    assert stage_seconds(list(reversed(fragments)), T0 + lo, T0 + lo + width) == totals


@given(
    st.lists(st.tuples(st.integers(1, 1_000), st.sampled_from(["queue", "decode"])), max_size=20)
)
def test_stages_that_follow_one_another_keep_their_whole_durations(
    steps: list[tuple[int, str]],
) -> None:
    items, at = [], 0
    for length, stage in steps:
        items.append((at, length, stage))
        at += length
    totals = stage_seconds(as_fragments(items))
    for stage in {s for _, s in steps}:
        assert totals[stage] == pytest.approx(sum(n for n, s in steps if s == stage) / 1e9)


def _union(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for lo, hi in sorted(s for s in spans if s[1] > s[0]):
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total


def test_a_span_named_after_a_gateway_inside_the_request_is_no_gateway_in_front_of_it() -> None:
    inside = fragment("c" * 16, S1, "gateway", 100, 200)
    out = assemble([request(S1)], [inside])
    assert out.merged == [0]  # settled (it leaves the spool) …
    assert out.records[0].gateway_s is None  # … but it is the server's own time


def test_a_deep_chain_of_spans_is_settled_in_one_pass_over_it() -> None:
    depth = 20_000
    ids = [f"{i + 1:016x}" for i in range(depth)]
    chain = [link(ids[i], ids[i - 1] if i else S1) for i in range(depth)]
    below = [fragment(f"{depth + i + 1:016x}", ids[i], "decode", 0, 1) for i in range(0, depth, 7)]
    out = assemble([request(S1)], [*chain, *below])
    assert len(out.merged) == len(below)
    assert out.records[0].decode_s == pytest.approx(0.001)


def test_a_record_replayed_into_the_same_batch_gets_its_stages_in_both_copies() -> None:
    queue = fragment("c" * 16, S1, "queue", 0, 20)
    out = assemble([request(S1), request(S1)], [queue])
    assert [r.queue_s for r in out.records] == [pytest.approx(0.02), pytest.approx(0.02)]


def test_the_reassembly_window_and_orphan_ttl_are_counted_from_arrival() -> None:
    reassembly = Reassembly(window_s=2.0, orphan_ttl_s=300.0)
    assert reassembly.due_at(1000.0) == 1002.0
    assert reassembly.expired_before(1000.0) == 700.0
    assert Reassembly(0.0).due_at(1000.0) == 1000.0
    with pytest.raises(InvalidInput, match="must not be negative"):
        Reassembly(window_s=-1.0)
