"""``storage.timeseries`` on SQLite and PostgreSQL: per-bucket series agree with the records."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.quantiles import exact_quantiles
from infersight.core.query import Selector
from infersight.core.records import GROUP_LABELS
from infersight.core.samples import GpuSample
from infersight.core.window import Resolution, Window
from infersight.storage import timeseries
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

START = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
WINDOW = Window(START, START + timedelta(hours=2))


@pytest.fixture
def records(store: Store):
    rows = make_records(np.random.default_rng(5), START, 4000, span=timedelta(hours=2))
    open_writer(store.engine).write_requests(rows)
    return rows


def test_request_series_counts_every_request_once_per_bucket(store: Store, records):
    series = timeseries.request_series(
        store.engine, WINDOW, Resolution.MINUTE, Selector(model="llama-8b"), ["instance"]
    )
    expected = Counter(
        (r.instance, Resolution.MINUTE.floor(r.start)) for r in records if r.model == "llama-8b"
    )
    got = {
        (labels[0], at): counts.requests
        for labels, by_time in series.items()
        for at, counts in by_time.items()
    }
    assert got == dict(expected)
    errors = sum(c.errors for by_time in series.values() for c in by_time.values())
    assert errors == sum(r.is_error for r in records if r.model == "llama-8b")


def test_hour_buckets_hold_the_same_totals_as_minute_buckets(store: Store, records):
    def total(step: Resolution) -> int:
        series = timeseries.request_series(store.engine, WINDOW, step)
        return sum(c.output_tokens for by_time in series.values() for c in by_time.values())

    assert (
        total(Resolution.HOUR)
        == total(Resolution.MINUTE)
        == sum(r.output_tokens or 0 for r in records)
    )


def test_bucket_sketches_answer_each_buckets_quantiles_within_one_percent(store: Store, records):
    sketches = timeseries.bucket_sketches(
        store.engine, "ttft", WINDOW, Resolution.HOUR, Selector(), ["model"]
    )
    assert set(sketches) == {("llama-8b",), ("llama-70b",)}
    for (model,), by_time in sketches.items():
        assert set(by_time) == {START, START + timedelta(hours=1)}
        for at, sketch in by_time.items():
            values = [
                r.ttft_s
                for r in records
                if r.model == model and at <= r.start < at + timedelta(hours=1)
            ]
            exact = exact_quantiles(values, (0.5, 0.99))
            assert sketch.count == len(values)
            for q, value in exact.items():
                assert sketch.quantile(q) == pytest.approx(value, rel=0.011)


def test_label_sets_list_the_series_seen_in_the_window(store: Store, records):
    sets = timeseries.label_sets(store.engine, WINDOW)
    assert set(sets) == {tuple(getattr(r, n) for n in GROUP_LABELS) for r in records}
    later = Window(WINDOW.end + timedelta(hours=3), WINDOW.end + timedelta(hours=4))
    assert timeseries.label_sets(store.engine, later) == []


def _gpu(ts: datetime, index: int, busy: float, reasons: tuple[str, ...] = ()) -> GpuSample:
    return GpuSample(
        ts, "gpu-0", index, name="NVIDIA H200", util_gpu=busy, power_w=300.0 + 400 * busy,
        memory_used_bytes=50e9, memory_total_bytes=100e9, sm_clock_mhz=1980.0 - 500 * busy,
        temperature_c=60.0, throttle_reasons=reasons, ecc_sbe_total=float(index),
    )  # fmt: skip


def test_gpu_series_average_per_bucket_and_count_only_real_throttling(store: Store):
    samples = []
    for i in range(60):  # one sample every 10 s for 10 minutes, two GPUs
        ts = START + timedelta(seconds=10 * i)
        hot = ("sw_thermal_slowdown",) if i % 2 else ()
        samples.append(_gpu(ts, 0, 0.5 + 0.5 * (i % 2), hot))
        samples.append(_gpu(ts, 1, 0.0, ("gpu_idle",)))  # idle clocks are not throttling
    open_writer(store.engine).write_gpu_samples(samples)
    window = Window(START, START + timedelta(minutes=10))
    buckets = timeseries.gpu_series(store.engine, window, 300)
    later = START + timedelta(minutes=5)
    assert sorted((b.bucket, b.gpu_index) for b in buckets) == [
        (START, 0), (START, 1), (later, 0), (later, 1)
    ]  # fmt: skip
    assert [b.bucket for b in buckets] == sorted(b.bucket for b in buckets)
    busy = [b for b in buckets if b.gpu_index == 0]
    for b in busy:
        assert b.samples == 30
        assert b.means["util_gpu"] == pytest.approx(0.75)
        assert b.means["power_w"] == pytest.approx(600.0)
        assert b.throttled_share == pytest.approx(0.5)
        assert b.reasons == {"sw_thermal_slowdown": 15}
        assert b.name == "NVIDIA H200"
    for b in (b for b in buckets if b.gpu_index == 1):
        assert b.throttled_share == 0.0
        assert b.reasons == {}
        assert b.ecc_sbe_total == 1.0
    assert timeseries.gpu_series(store.engine, window, 300, ["other"]) == []


def test_a_sample_in_the_last_half_millisecond_of_a_second_stays_in_its_bucket(store: Store):
    """Buckets floor time exactly: a sample 0.1 ms before a 7-second bucket ends belongs to
    that bucket (SQLite's ``strftime('%s')`` of the full text rounded it to the millisecond
    first, so it fell into the next bucket)."""
    seconds = int(START.timestamp())
    first = START + timedelta(seconds=-seconds % 7)  # a bucket start (epoch-aligned)
    edge = first + timedelta(seconds=6, microseconds=999_900)
    after = first + timedelta(seconds=13)
    open_writer(store.engine).write_gpu_samples([_gpu(edge, 0, 0.5), _gpu(after, 0, 0.5)])
    window = Window(START, START + timedelta(minutes=1))
    buckets = timeseries.gpu_series(store.engine, window, 7, raw_only=True)
    assert [(b.bucket, b.samples) for b in buckets] == [
        (first, 1),
        (first + timedelta(seconds=7), 1),
    ]
