"""The vectorised rollup deltas equal a plain per-record computation, in memory and in store.

The reference below walks the records one at a time: one counter bump and one ``add`` per
sketched value, into every resolution's bucket. ``rollup.deltas_from_batch`` (bucket counts
over the whole batch's columns) and the writer (new rollup rows inserted with their delta,
existing ones merged) must agree with it exactly, for late records, repeated keys inside a
batch, replays, "not reported" and zero latencies.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy import select

from infersight.core.records import GROUP_LABELS, RequestRecord, Status
from infersight.core.sketch import QuantileSketch
from infersight.core.window import Resolution
from infersight.storage import rollup
from infersight.storage.batch import Batch
from infersight.storage.rollup import COUNTERS, RollupKey
from infersight.storage.tables import SKETCH_COLUMNS, request_rollups, requests
from infersight.storage.writer import _ROWS_PER_WRITE, open_writer
from tests.factories import make_records

T0 = datetime(2026, 11, 2, 23, 10, tzinfo=UTC)


def per_record(records: list[RequestRecord]) -> dict[RollupKey, tuple[dict, dict]]:
    """Counters and sketches per rollup key, built one record and one value at a time."""
    unique = {(r.trace_id, r.span_id): r for r in records}  # a repeated key: its last copy
    counters: dict[RollupKey, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTERS, 0))
    sketches: dict[RollupKey, dict[str, QuantileSketch]] = defaultdict(dict)
    for r in unique.values():
        for resolution in Resolution:
            key = RollupKey(
                resolution.value,
                resolution.floor(r.start),
                *(getattr(r, name) for name in GROUP_LABELS),
            )
            c = counters[key]
            c["requests"] += 1
            c["errors"] += r.status is Status.ERROR
            for name in ("input_tokens", "output_tokens", "cached_tokens"):
                c[name] += getattr(r, name) or 0
            for column, name in SKETCH_COLUMNS.items():
                value = getattr(r, name)
                if value is not None:
                    sketches[key].setdefault(column, QuantileSketch()).add(value)
    return {key: (counters[key], sketches[key]) for key in counters}


def random_batch(seed: int) -> list[RequestRecord]:
    """Records over two hours, plus late ones from earlier days, with gaps, zeros and repeats."""
    rng = np.random.default_rng(seed)
    records = make_records(rng, T0, 1500, span=timedelta(hours=2))
    late = make_records(rng, T0 - timedelta(days=3), 200, span=timedelta(days=2))
    records = records + late
    changed = []
    for i, original in enumerate(records):
        r = original
        roll = rng.random()
        if roll < 0.15:  # stages this engine did not report
            r = dataclasses.replace(r, queue_s=None, prefill_s=None, cached_tokens=None)
        elif roll < 0.2:
            r = dataclasses.replace(r, ttft_s=0.0, cached_tokens=int(rng.integers(0, 50)))
        if i % 7 == 0:
            r = dataclasses.replace(r, preprocess_s=None)  # mixed None and numbers
        changed.append(r)
    order = rng.permutation(len(changed))  # late rows interleaved with current ones
    shuffled = [changed[i] for i in order]
    # Repeated keys inside the batch, once with different values (the last copy counts).
    again = [
        dataclasses.replace(r, ttft_s=r.ttft_s * 2 if r.ttft_s else 1.0) for r in shuffled[:40]
    ]
    return shuffled + shuffled[100:160] + again


def as_map(deltas: list[rollup.RollupDelta]) -> dict[RollupKey, tuple[dict, dict]]:
    mapped = {d.key: (d.counters, d.sketches) for d in deltas}
    assert len(mapped) == len(deltas), "one delta per key"
    return mapped


def test_vectorised_deltas_equal_the_per_record_computation():
    for seed in (1, 2, 3):
        records = random_batch(seed)
        expected = per_record(records)
        got = as_map(rollup.deltas_from_batch(Batch.of(records)))
        assert got.keys() == expected.keys()
        for key, (counters, sketches) in expected.items():
            assert got[key][0] == counters, key
            assert got[key][1].keys() == sketches.keys(), key
            for column, sketch in sketches.items():
                assert got[key][1][column] == sketch, (key, column)


def stored_rollups(store) -> dict[RollupKey, tuple[dict, dict]]:
    with store.engine.connect() as c:
        rows = c.execute(select(request_rollups)).mappings().all()
    return {
        RollupKey(row["resolution"], row["bucket"], *(row[n] for n in GROUP_LABELS)): (
            {name: row[name] for name in COUNTERS},
            {
                column: QuantileSketch.from_bytes(row[column])
                for column in SKETCH_COLUMNS
                if row[column] is not None
            },
        )
        for row in rows
    }


def test_stored_rollups_of_overlapping_batches_equal_the_per_record_computation(store):
    records = random_batch(4)
    writer = open_writer(store.engine)
    # Overlapping, replayed and out-of-order batches: some rollup rows are created by a
    # batch's insert, others merged into; each request must count once. Within a batch a
    # repeated key keeps its last copy; across batches the copy stored first stays.
    stored: dict[tuple[str, str], RequestRecord] = {}
    # The batches: all new; mostly new; all old; mostly old; mostly new; all old.
    batches = (records[:700], records[500:1200], records[:300], records[:1250], records[1100:])
    for batch in (*batches, records):
        writer.write_requests(batch)
        for key, record in {(r.trace_id, r.span_id): r for r in batch}.items():
            stored.setdefault(key, record)
    expected = per_record(list(stored.values()))
    got = stored_rollups(store)
    assert got.keys() == expected.keys()
    for key, (counters, sketches) in expected.items():
        assert got[key][0] == counters, key
        assert got[key][1] == sketches, key


def test_inputs_added_a_slice_at_a_time_give_the_deltas_of_the_whole_batch():
    """The PostgreSQL writer converts a batch's rollup inputs slice by slice as it streams
    the batch into COPY: the deltas must not depend on where the slices fall, including a
    series whose labels hold the key separator in one slice and not in another's rows."""
    records = list({(r.trace_id, r.span_id): r for r in random_batch(5)}.values())
    odd = [
        dataclasses.replace(r, model="m\x1fi", instance="x") if i % 97 == 0 else r
        for i, r in enumerate(records)
    ]
    whole = as_map(rollup.deltas_from_batch(Batch.of(odd)))
    for size in (1, 7, 500, len(odd)):
        inputs = rollup.RollupInputs()
        for i in range(0, len(odd), size):
            inputs.add(Batch.verbatim(odd[i : i + size]).fields())
        assert len(inputs) == len(odd)
        got = as_map(inputs.deltas())
        assert got.keys() == whole.keys(), size
        for key, (counters, sketches) in whole.items():
            assert got[key][0] == counters, (size, key)
            assert got[key][1] == sketches, (size, key)


def test_a_batch_streamed_in_many_slices_is_rolled_up_exactly(store):
    """A batch several times the writer's COPY slice (``_ROWS_PER_WRITE``), new rows and
    late ones, then the same batch again: stored rollups equal the per-record computation."""
    rng = np.random.default_rng(21)
    records = make_records(rng, T0, 3 * _ROWS_PER_WRITE + 17, span=timedelta(hours=3))
    records += make_records(rng, T0 - timedelta(days=2), 300, span=timedelta(hours=5))
    records = [records[i] for i in rng.permutation(len(records))]
    writer = open_writer(store.engine)
    assert writer.write_requests(records).inserted == len(records)
    assert writer.write_requests(records).inserted == 0
    expected = per_record(records)
    got = stored_rollups(store)
    assert got.keys() == expected.keys()
    for key, (counters, sketches) in expected.items():
        assert got[key][0] == counters, key
        assert got[key][1] == sketches, key


def test_counters_past_32_bits_are_merged_exactly(store):
    """Rollup counters are int8: a day's token count passes 2^31 in a busy fleet. Inserted
    past 2^31 by one batch and merged by the update path by the next, nothing is truncated."""
    rng = np.random.default_rng(22)
    records = make_records(rng, T0, 44, span=timedelta(seconds=10))
    big = 100_000_000  # the most output tokens one record may report
    writer = open_writer(store.engine)
    for batch in (records[:22], records[22:]):
        writer.write_requests(
            [
                dataclasses.replace(
                    r, output_tokens=big, model="m", instance="i", tenant="t", priority="p"
                )
                for r in batch
            ]
        )
    with store.engine.connect() as c:
        totals = dict(
            c.execute(
                select(request_rollups.c.resolution, request_rollups.c.output_tokens).where(
                    request_rollups.c.model == "m"
                )
            ).all()
        )
    assert totals == {"1m": 44 * big, "1h": 44 * big, "1d": 44 * big}  # one series


def test_a_first_batch_repeating_keys_within_itself_keeps_their_last_copies(store):
    """On PostgreSQL a new batch is streamed into COPY without looking for repeated keys
    first: the repeat makes the COPY fail, and the staging path keeps each key's last copy,
    as on SQLite and as the per-record computation does."""
    records = random_batch(6)  # repeats within, the last copy with other values
    result = open_writer(store.engine).write_requests(records)
    unique = {(r.trace_id, r.span_id): r for r in records}
    assert result.inserted == len(unique)
    assert result.duplicates == len(records) - len(unique)
    with store.engine.connect() as c:
        ttft = {
            (t, s): v
            for t, s, v in c.execute(
                select(requests.c.trace_id, requests.c.span_id, requests.c.ttft_s)
            )
        }
    assert ttft == {key: r.ttft_s for key, r in unique.items()}
    expected = per_record(records)
    got = stored_rollups(store)
    assert got.keys() == expected.keys()
    for key, (counters, sketches) in expected.items():
        assert got[key] == (counters, sketches), key
