"""The dashboard's hot reads answer as before after they moved their bucketing into SQL
(issue 35, item 4), on SQLite and PostgreSQL over the same seeded store.

``timeseries.request_series(bucket_s=…)`` is compared with the rollup-resolution rows added
up per chart bucket in Python (the old way, still what ``bucket_s=None`` returns), and the
GPU series read from rollups grouped per chart bucket by the database with the rollup rows
added up one by one (the old way) and with the raw samples: counts exactly, means to float
rounding (a sum in another order).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.query import Selector
from infersight.core.samples import GpuSample
from infersight.core.window import Resolution, Window
from infersight.storage import gpu_reads, timeseries
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

START = datetime(2026, 3, 2, 7, 13, tzinfo=UTC)
END = START + timedelta(days=3, hours=5)


@pytest.fixture
def seeded(store: Store) -> Store:
    writer = open_writer(store.engine)
    rng = np.random.default_rng(35)
    writer.write_requests(make_records(rng, START, 6000, span=END - START))
    samples = []
    at = START
    while at < END:
        for instance in ("gpu-0", "gpu-1"):
            for index in range(2):
                busy = float(rng.uniform(0.2, 1.0))
                hot = ("sw_thermal_slowdown",) if busy > 0.9 else ()
                samples.append(
                    GpuSample(
                        at, instance, index, name="NVIDIA H200", util_gpu=busy,
                        power_w=200.0 + 400 * busy, memory_used_bytes=busy * 1e11,
                        memory_total_bytes=1.4e11, sm_clock_mhz=1980.0 - 400 * busy,
                        temperature_c=50 + 30 * busy, throttle_reasons=hot,
                        ecc_sbe_total=float(index), xid_last=13 if hot else None,
                    )
                )  # fmt: skip
        at += timedelta(minutes=7)
    writer.write_gpu_samples(samples)
    return store


def _summed(
    found: dict[tuple[str, ...], dict[datetime, timeseries.Counts]], step_s: int
) -> dict[tuple[str, ...], dict[datetime, tuple[int, ...]]]:
    out: dict[tuple[str, ...], dict[datetime, list[int]]] = {}
    for labels, buckets in found.items():
        per = out.setdefault(labels, defaultdict(lambda: [0, 0, 0, 0]))
        for at, c in buckets.items():
            epoch = at.timestamp()
            key = datetime.fromtimestamp(epoch - epoch % step_s, UTC)
            for i, v in enumerate((c.requests, c.errors, c.input_tokens, c.output_tokens)):
                per[key][i] += v
    return {k: {at: tuple(v) for at, v in b.items()} for k, b in out.items()}


CASES = [
    (Window(START, END), Resolution.MINUTE, Resolution.HOUR, 21600, (), Selector()),
    (Window(START, END), Resolution.HOUR, Resolution.DAY, 43200, ("model",), Selector()),
    (Window(START, END), Resolution.MINUTE, Resolution.HOUR, 7200, ("model", "adapter"),
     Selector(instance="gpu-1")),
    (Window(START + timedelta(hours=30), START + timedelta(hours=33)), Resolution.MINUTE,
     Resolution.MINUTE, 120, ("instance",), Selector()),
    (Window(START + timedelta(minutes=3), START + timedelta(days=1)), Resolution.MINUTE,
     Resolution.HOUR, 600, (), Selector(model="llama-8b")),
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(CASES)))
def test_request_series_bucketed_in_sql_equals_the_rows_added_up(seeded: Store, case: int):
    window, step, coarsest, bucket_s, group_by, selector = CASES[case]
    old = timeseries.request_series(
        seeded.engine, window, step, selector, group_by, coarsest=coarsest
    )
    new = timeseries.request_series(
        seeded.engine, window, step, selector, group_by, coarsest=coarsest, bucket_s=bucket_s
    )
    expected = _summed(old, bucket_s)
    assert expected  # the case reads data
    got = {
        labels: {at: (c.requests, c.errors, c.input_tokens, c.output_tokens)
                 for at, c in buckets.items()}
        for labels, buckets in new.items()
    }  # fmt: skip
    assert got == expected
    assert all(at.tzinfo is not None for b in new.values() for at in b)


def test_request_series_refuses_a_bucket_that_is_not_a_multiple_of_the_rows(seeded: Store):
    with pytest.raises(ValueError, match="multiple"):
        timeseries.request_series(seeded.engine, Window(START, END), Resolution.HOUR, bucket_s=5400)


def _key(b: timeseries.GpuBucket) -> tuple[str, int, datetime]:
    return b.instance, b.gpu_index, b.bucket


def _same(a: list[timeseries.GpuBucket], b: list[timeseries.GpuBucket]) -> None:
    assert [_key(x) for x in a] == [_key(x) for x in b]
    for x, y in zip(a, b, strict=True):
        assert (x.samples, x.throttled_samples, x.reasons, x.name) == (
            y.samples, y.throttled_samples, y.reasons, y.name
        ), _key(x)  # fmt: skip
        assert (x.ecc_sbe_total, x.ecc_dbe_total, x.xid_last) == (
            y.ecc_sbe_total, y.ecc_dbe_total, y.xid_last
        )  # fmt: skip
        assert x.means.keys() == y.means.keys()
        for name, value in x.means.items():
            assert value == pytest.approx(y.means[name], rel=1e-12), (name, _key(x))


@pytest.mark.parametrize("step_s", [3600, 21600, 86400])
def test_gpu_series_from_rollups_grouped_in_sql_equals_row_by_row_and_raw(
    seeded: Store, step_s: int
):
    window = Window(START, END)
    new = timeseries.gpu_series(seeded.engine, window, step_s)
    # The old way: every rollup row of the plan added up in Python.
    old = timeseries._GpuAcc(step_s)
    coarsest = next(r for r in (Resolution.DAY, Resolution.HOUR, Resolution.MINUTE)
                    if step_s % r.seconds == 0)  # fmt: skip
    with seeded.engine.connect() as connection:
        segments = gpu_reads.plan(window, coarsest, Resolution.MINUTE)
        for seg in segments:
            if seg.raw:
                old.add_raw(timeseries._raw_gpu_rows(connection, seg.start, seg.end, step_s, None))
        rolled = [seg for seg in segments if not seg.raw]
        old.add_rollups(timeseries._rollup_gpu_rows(connection, rolled, None))
    assert len(new) > 8
    _same(new, old.buckets())
    _same(new, timeseries.gpu_series(seeded.engine, window, step_s, raw_only=True))
