"""What the store-side fold of late parallel-sampling sequences relies on (#30): a sketch
gives back values it held exactly (counts, buckets, sum), and ``rollup.correction`` turns a
stored row's rollup contribution into its corrected row's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert, select

from infersight.core.errors import InvalidInput
from infersight.core.records import Engine, RequestRecord
from infersight.core.sketch import QuantileSketch
from infersight.storage import rollup
from infersight.storage.batch import Batch
from infersight.storage.maintenance import RetentionPolicy, maintain
from infersight.storage.tables import request_sequences


def test_a_sketch_gives_back_exactly_what_it_held() -> None:
    kept = [0.1, 0.25, 0.25, 3.0, 0.0]
    sketch = QuantileSketch.of([*kept, 7.5, 0.0])
    sketch.subtract(QuantileSketch.of([7.5, 0.0]))
    expected = QuantileSketch.of(kept)
    assert (sketch.count, sketch.zero_count) == (expected.count, expected.zero_count)
    assert sketch.sum == pytest.approx(expected.sum)
    assert sketch.buckets == expected.buckets
    assert sketch.quantile(0.5) == pytest.approx(expected.quantile(0.5))
    assert sketch.max == 7.5  # a bound still, no longer reached


def test_a_sketch_refuses_to_give_back_what_it_never_held() -> None:
    sketch = QuantileSketch.of([0.1, 0.2])
    with pytest.raises(InvalidInput):
        sketch.subtract(QuantileSketch.of([50.0]))
    with pytest.raises(InvalidInput):
        sketch.subtract(QuantileSketch.of([0.1, 0.1]))
    assert sketch.count == 2


def _record(out: int, e2e: float) -> RequestRecord:
    return RequestRecord(
        trace_id="a" * 32, span_id="b" * 16, start=datetime(2026, 12, 6, 9, 0, 30, tzinfo=UTC),
        instance="vllm-0", engine=Engine.VLLM, model="m", ttft_s=0.2, e2e_s=e2e,
        input_tokens=900, output_tokens=out,
    )  # fmt: skip


def test_a_correction_moves_a_rows_contribution_to_its_corrected_values() -> None:
    old, new = _record(40, 1.0), _record(340, 6.0)
    deltas = rollup.correction(Batch.of([old]), Batch.of([new]))
    assert {d.key.resolution for d in deltas} == {"1m", "1h", "1d"}
    for delta in deltas:
        assert delta.counters["requests"] == 0
        assert delta.counters["input_tokens"] == 0
        assert delta.counters["output_tokens"] == 300
        assert delta.removed["e2e_sketch"].sum == pytest.approx(1.0)
        assert delta.sketches["e2e_sketch"].sum == pytest.approx(6.0)


def test_folded_sequences_go_with_their_requests_raw_days(store) -> None:
    """``request_sequences`` rows older than the raw retention are deleted with the raw days."""
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    rows = [
        {"trace_id": "a" * 32, "span_id": "1" * 16, "request_span_id": "0" * 16,
         "start": now - timedelta(days=30)},
        {"trace_id": "b" * 32, "span_id": "2" * 16, "request_span_id": "0" * 16,
         "start": now - timedelta(hours=2)},
    ]  # fmt: skip
    with store.engine.begin() as c:
        c.execute(insert(request_sequences), rows)
    maintain(store.engine, now, RetentionPolicy(raw_days=7, partition_ahead_days=1))
    with store.engine.connect() as c:
        left = [r.trace_id for r in c.execute(select(request_sequences.c.trace_id))]
    assert left == ["b" * 32]
