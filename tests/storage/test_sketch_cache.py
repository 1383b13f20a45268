"""Merged sketches kept by the digest of their rollup rows (``storage.sketch_cache``) give the
answers a fresh read gives, over many reads with fresh and late writes in between; new data
shows up at once (its rows' digest changed); unchanged parts are not decoded again; and the
cache stays within its bounds."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.query import Method, Selector
from infersight.core.sketch import QuantileSketch, merge_all
from infersight.core.window import Resolution, Window
from infersight.storage import queries, timeseries
from infersight.storage.sketch_cache import SketchCache
from infersight.storage.writer import open_writer
from tests.factories import make_records

START = datetime(2026, 11, 20, 12, 0, 17, tzinfo=UTC)
METRICS = ("ttft", "tpot", "e2e")
CHART_S = 6 * 3600
GROUPS = ("model", "instance")


def _fresh_chart(engine, metric, window):
    """The chart buckets from a plain read of the hour rows, merged per 6-hour bucket here."""
    fine = timeseries.bucket_sketches(engine, metric, window, Resolution.HOUR, group_by=GROUPS)
    out: dict[tuple[str, ...], dict[datetime, QuantileSketch]] = {}
    for labels, buckets in fine.items():
        parts: dict[datetime, list[QuantileSketch]] = defaultdict(list)
        for at, sketch in buckets.items():
            epoch = int(at.timestamp()) // CHART_S * CHART_S
            parts[datetime.fromtimestamp(epoch, UTC)].append(sketch)
        out[labels] = {at: merge_all(p) for at, p in parts.items()}
    return out


def _cached_chart(engine, window, cache):
    return timeseries.bucket_sketches_many(
        engine, METRICS, window, Resolution.HOUR, CHART_S, Selector(), GROUPS, cache=cache
    )


def test_cached_chart_buckets_and_tables_equal_fresh_reads_as_data_arrives(store):
    rng = np.random.default_rng(18)
    writer = open_writer(store.engine)
    writer.write_requests(
        make_records(rng, START - timedelta(days=4), 3000, span=timedelta(days=4))
    )
    cache = SketchCache()
    now = START
    for cycle in range(8):
        step = timedelta(seconds=int(rng.choice([30, 61, 600, 3600 + 13])))
        now += step
        writer.write_requests(make_records(rng, now - step, int(rng.integers(20, 120)), span=step))
        if cycle % 2:  # a spooled batch, into chart buckets the cache already holds
            back = timedelta(hours=float(rng.uniform(1, 30)))
            writer.write_requests(make_records(rng, now - back, 25, span=timedelta(minutes=2)))
        window = Window(now - timedelta(days=4), now)
        cached = _cached_chart(store.engine, window, cache)
        for metric in METRICS:
            assert cached[metric] == _fresh_chart(store.engine, metric, window), (cycle, metric)
        table = queries.latencies(
            store.engine, METRICS, window, group_by=GROUPS, quantiles=(0.5, 0.99), cache=cache
        )
        for metric in METRICS:
            with store.engine.connect() as connection:  # an empty cache: every row decoded
                plain = queries.group_sketches(
                    connection, f"{metric}_s", window, Selector(), GROUPS, cache=SketchCache()
                )
            expected = {key: sk.quantiles((0.5, 0.99)) for key, sk in plain.items()}
            assert {
                tuple(g.labels.values()): dict(g.quantiles) for g in table[metric].groups
            } == expected, (cycle, metric)
            assert table[metric].method is Method.SKETCH


def test_new_rows_show_up_and_unchanged_parts_are_not_decoded_again(store):
    rng = np.random.default_rng(3)
    writer = open_writer(store.engine)
    writer.write_requests(
        make_records(rng, START - timedelta(days=2), 2000, span=timedelta(days=2))
    )
    window = Window(START - timedelta(days=2), START)
    cache = SketchCache()
    first = _cached_chart(store.engine, window, cache)
    misses = cache.stats.misses
    again = _cached_chart(store.engine, window, cache)
    assert again == first
    assert cache.stats.misses == misses  # every part answered from the cache
    # A late request, far slower than any before, in a 6-hour bucket a day back.
    late_at = START - timedelta(hours=25)
    (late,) = make_records(
        rng, late_at, 1, span=timedelta(seconds=1), models=("llama-8b",), instances=("gpu-0",)
    )
    writer.write_requests([dataclasses.replace(late, ttft_s=42.0)])
    after = _cached_chart(store.engine, window, cache)
    assert cache.stats.misses == misses + 1  # only that one part was read again
    part = datetime.fromtimestamp(int(late_at.timestamp()) // CHART_S * CHART_S, UTC)
    labels = ("llama-8b", "gpu-0")
    assert after["ttft"][labels][part].count == first["ttft"][labels][part].count + 1
    assert after["ttft"] == _fresh_chart(store.engine, "ttft", window)


def test_the_cache_keeps_within_its_entries_and_bytes():
    one = QuantileSketch.of(np.linspace(0.01, 10.0, 2000))
    by_entries = SketchCache(max_entries=3)
    for i in range(10):
        by_entries.put(("f", i), (one,))
    assert len(by_entries) == 3
    assert by_entries.get(("f", 9)) == (one,)
    assert by_entries.get(("f", 0)) is None
    by_bytes = SketchCache(max_bytes=3 * 16 * one.buckets)
    for i in range(10):
        by_bytes.put(("f", i), (one,))
    assert 0 < len(by_bytes) <= 2
    assert by_bytes.bytes <= by_bytes.max_bytes
    assert by_bytes.stats.evicted == 10 - len(by_bytes)
    with pytest.raises(ValueError, match="room"):
        SketchCache(max_entries=0)


def test_sketches_of_several_columns_in_one_pass_equal_one_read_each_and_follow_new_rows(store):
    """``group_sketches_many`` (the Baselines page's capture reads its three latency sketches
    in one pass) answers what one ``group_sketches`` read per column answers, through the same
    cache, and a batch written into the window changes the answer at once."""
    rng = np.random.default_rng(23)
    writer = open_writer(store.engine)
    writer.write_requests(
        make_records(rng, START - timedelta(days=2), 2000, span=timedelta(days=2))
    )
    cache = SketchCache()
    columns = tuple(f"{m}_s" for m in METRICS)
    window = Window(START - timedelta(days=2, seconds=41), START)
    answers = []
    for _ in range(2):
        with store.engine.connect() as connection:
            many = queries.group_sketches_many(
                connection, columns, window, Selector(), ("model",), cache=cache
            )
            for column in columns:
                one = queries.group_sketches(
                    connection, column, window, Selector(), ("model",), cache=SketchCache()
                )
                assert many[column] == one, column
        answers.append(many)
        writer.write_requests(
            make_records(rng, START - timedelta(hours=5), 40, span=timedelta(minutes=3))
        )
    assert answers[0]["ttft_s"] != answers[1]["ttft_s"]
