"""GPU-sample rollups answer what raw samples answer, on SQLite and PostgreSQL.

The samples are chosen so that every sum is exact in binary floating point (whole seconds,
utilisations in 64ths, whole watts and joules): the rollup path must then give the raw path's
GPU time, idle time, energy and money to the last digit, whatever order the batches came in.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import func, insert, select

from infersight.core.cost import CostModel, GpuPrice, price_instance
from infersight.core.query import Selector
from infersight.core.samples import GpuSample
from infersight.core.window import Resolution, Window
from infersight.storage import cost, gpu_rollup, migrate, timeseries
from infersight.storage.baselines import gpu_utilization
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import gpu_rollups, gpu_samples
from infersight.storage.writer import open_writer

T0 = datetime(2026, 11, 20, 23, 0, tzinfo=UTC)
STEP = 60
HOURS = 26
MODEL = CostModel(
    "rollup-test",
    "USD",
    {"H100": GpuPrice(Decimal("2.50"), Decimal("1.75"), Decimal("0.5"))},
    electricity_per_kwh=Decimal("0.13"),
    overhead_per_gpu_hour=Decimal("0.10"),
)
SILENCE = (T0 + timedelta(hours=9), T0 + timedelta(hours=9, minutes=20))


def _fleet() -> list[GpuSample]:
    """Three GPUs: a counter with a reset, power only with a silence and throttling, neither."""
    out, energy = [], 1_000_000.0
    for k in range(HOURS * 3600 // STEP):
        ts = T0 + timedelta(seconds=k * STEP)
        power = 100.0 + 10 * (k % 7)
        util = (k % 65) / 64
        out.append(GpuSample(ts, "a", 0, name="NVIDIA H100", util_gpu=util, power_w=power,
                             energy_j=energy))  # fmt: skip
        energy = 5.0 if k == 700 else energy + power * STEP
        if not SILENCE[0] <= ts < SILENCE[1]:
            out.append(
                GpuSample(ts, "a", 1, name="NVIDIA H100", power_w=power,
                          util_gpu=None if k % 5 == 0 else (k % 17) / 64,
                          throttle_reasons=("sw_thermal_slowdown",) if k % 11 == 0 else (),
                          temperature_c=60.0 + k % 3)
            )  # fmt: skip
        out.append(GpuSample(ts, "b", 0, name="NVIDIA H100", util_gpu=(k % 3) / 4,
                             ecc_sbe_total=float(k // 1000), xid_last=k // 2000))  # fmt: skip
    return out


@pytest.fixture
def fleet(store):
    """The samples written out of order, one batch replayed, a few arriving late."""
    samples = _fleet()
    late = samples[1501::499]
    early = [s for s in samples if s not in set(late)]
    writer = open_writer(store.engine)
    half = len(early) // 2
    for batch in (early[half:], early[:half], early[half : half + 500]):
        writer.write_gpu_samples(batch)
    assert writer.write_gpu_samples(late) == len(late)
    assert writer.write_gpu_samples(late) == 0
    return store, samples


WINDOWS = {
    "whole hours": Window(T0 + timedelta(hours=1), T0 + timedelta(hours=25)),
    "ragged ends": Window(T0 + timedelta(seconds=1017.5), T0 + timedelta(hours=25, seconds=43.25)),
    "past the last sample": Window(T0 - timedelta(hours=2), T0 + timedelta(hours=27)),
    "starting in a silence": Window(SILENCE[0] + timedelta(minutes=7), T0 + timedelta(hours=25)),
}


@pytest.mark.parametrize("window", WINDOWS.values(), ids=list(WINDOWS))
def test_gpu_time_energy_and_money_from_rollups_equal_the_raw_answer(fleet, window):
    store, _ = fleet
    with store.engine.connect() as connection:
        rolled = cost.gpu_usage(connection, window, MODEL)
        raw = cost.gpu_usage(connection, window, MODEL, raw_only=True)
    assert rolled == raw
    assert [u.instance for u in rolled] == ["a", "a", "b"]
    assert all(u.idle_seconds > 0 for u in rolled)
    for instance in ("a", "b"):
        mine = [u for u in rolled if u.instance == instance]
        theirs = [u for u in raw if u.instance == instance]
        assert price_instance(MODEL, instance, mine, True) == price_instance(
            MODEL, instance, theirs, True
        )


def test_a_short_window_past_raw_retention_is_priced_from_the_rollups(fleet):
    """Retention has dropped the raw samples of an old day: a three-hour window of it, read at
    hour resolution (what retention says is kept), still has its GPU time."""
    store, _ = fleet
    window = Window(T0 + timedelta(hours=2), T0 + timedelta(hours=5))
    with store.engine.connect() as connection:
        before = cost.gpu_usage(connection, window, MODEL, raw_only=True)
    with store.engine.begin() as connection:
        connection.execute(gpu_samples.delete())
    with store.engine.connect() as connection:
        after = cost.gpu_usage(connection, window, MODEL, finest=Resolution.HOUR)
    assert sum(u.gpu_seconds for u in before) > 0
    assert [(u.instance, u.gpu_index, u.gpu_seconds) for u in after] == [
        (u.instance, u.gpu_index, u.gpu_seconds) for u in before
    ]


def test_a_floor_between_histogram_edges_is_interpolated_within_its_bin(fleet):
    store, _ = fleet
    window = WINDOWS["whole hours"]
    model = CostModel("off-edge", "USD", idle_utilisation_floor=0.07)
    with store.engine.connect() as connection:
        rolled = {(u.instance, u.gpu_index): u for u in cost.gpu_usage(connection, window, model)}
        raw = cost.gpu_usage(connection, window, model, raw_only=True)
        # The bin holding 0.07 is [0.05, 0.10): interpolation stays within its seconds.
        bins = connection.execute(
            select(
                gpu_rollups.c.instance, gpu_rollups.c.gpu_index, gpu_rollups.c.util_bin_01
            ).where(gpu_rollups.c.resolution == "1d")
        ).all()
    for u in raw:
        slack = sum(b[2] for b in bins if (b[0], b[1]) == (u.instance, u.gpu_index))
        assert abs(float(rolled[(u.instance, u.gpu_index)].idle_seconds - u.idle_seconds)) <= slack
        assert rolled[(u.instance, u.gpu_index)].gpu_seconds == u.gpu_seconds


def test_rebuilding_the_rollups_from_stored_samples_gives_the_same_rows(fleet):
    store, _ = fleet
    with store.engine.connect() as connection:
        before = connection.execute(select(gpu_rollups).order_by(*gpu_rollups.primary_key)).all()
    with store.engine.begin() as connection:
        assert gpu_rollup.rebuild(connection) == len(_fleet())
    with store.engine.connect() as connection:
        after = connection.execute(select(gpu_rollups).order_by(*gpu_rollups.primary_key)).all()
    assert after == before


def test_the_gpu_page_buckets_from_rollups_equal_the_raw_buckets(fleet):
    store, samples = fleet
    window = WINDOWS["ragged ends"]
    rolled = timeseries.gpu_series(store.engine, window, 3600)
    raw = timeseries.gpu_series(store.engine, window, 3600, raw_only=True)
    assert len(rolled) == len(raw) > 60
    for mine, theirs in zip(rolled, raw, strict=True):
        assert (mine.instance, mine.gpu_index, mine.bucket, mine.samples) == (
            theirs.instance, theirs.gpu_index, theirs.bucket, theirs.samples
        )  # fmt: skip
        assert mine.throttled_samples == theirs.throttled_samples
        assert mine.reasons == theirs.reasons
        assert (mine.ecc_sbe_total, mine.xid_last) == (theirs.ecc_sbe_total, theirs.xid_last)
        # Means over the samples that reported the field (the raw path assumes a GPU reports
        # a field in all samples or none; this fleet's GPU a/1 misses utilisation in some).
        inside = [
            s for s in samples
            if s.ts in window and (s.instance, s.gpu_index) == (mine.instance, mine.gpu_index)
            and mine.bucket <= s.ts < mine.bucket + timedelta(hours=1)
        ]  # fmt: skip
        utils = [s.util_gpu for s in inside if s.util_gpu is not None]
        expected = {"util_gpu": pytest.approx(sum(utils) / len(utils))} if utils else {}
        assert {k: v for k, v in mine.means.items() if k == "util_gpu"} == expected
    assert any(b.throttled_samples for b in rolled)


def test_a_baselines_mean_utilisation_is_the_mean_of_its_samples(fleet):
    store, samples = fleet
    window = WINDOWS["ragged ends"]
    inside = [s.util_gpu for s in samples if s.ts in window and s.util_gpu is not None]
    mean = gpu_utilization(store.engine, window, Selector())
    assert mean == pytest.approx(sum(inside) / len(inside))


#: GpuSample fields whose columns revision 0021 added (issue 34: GPU slices).
SINCE_0021 = ("gpu_slice", "parent_uuid", "gpu_instance_id")


def test_upgrading_a_store_that_holds_samples_rolls_them_up(tmp_path):
    engine = create_store_engine(f"sqlite:///{tmp_path / 'old.db'}")
    try:
        migrate.upgrade(engine, "0006")
        rows = [
            {**{f.name: getattr(s, f.name) for f in fields(GpuSample) if f.name not in SINCE_0021},
             "throttle_reasons": ",".join(s.throttle_reasons)}
            for s in _fleet()
        ]  # fmt: skip
        with engine.begin() as connection:
            connection.execute(insert(gpu_samples), rows)
        migrate.upgrade(engine)
        window = WINDOWS["ragged ends"]
        with engine.connect() as connection:
            rolled = cost.gpu_usage(connection, window, MODEL)
            assert rolled == cost.gpu_usage(connection, window, MODEL, raw_only=True)
            assert connection.execute(select(func.count()).select_from(gpu_rollups)).scalar()
    finally:
        engine.dispose()


def test_a_sample_repeated_within_a_batch_keeps_its_last_copy_in_rows_and_rollups(store):
    first = GpuSample(T0, "a", 0, name="NVIDIA H100", util_gpu=0.1, power_w=100.0)
    last = GpuSample(T0, "a", 0, name="NVIDIA H100", util_gpu=0.9, power_w=300.0)
    assert open_writer(store.engine).write_gpu_samples([first, last]) == 1
    with store.engine.connect() as connection:
        stored = connection.execute(select(gpu_samples.c.util_gpu)).scalars().all()
        rolled = (
            connection.execute(
                select(gpu_rollups.c.util_gpu_sum).where(gpu_rollups.c.resolution == "1m")
            )
            .scalars()
            .all()
        )
    assert stored == [pytest.approx(0.9)]
    assert rolled == [pytest.approx(0.9)]


def test_the_tables_columns_are_the_core_rules() -> None:
    """``storage.tables`` declares the rollup columns ``core.gpu_intervals`` books into."""
    from infersight.core import gpu_intervals
    from infersight.storage import tables

    assert tables.GPU_ROLLUP_MEANS == gpu_intervals.GPU_ROLLUP_MEANS
    assert tables.GPU_ROLLUP_REASONS == gpu_intervals.GPU_ROLLUP_REASONS
    assert tables.GPU_UTIL_BINS == gpu_intervals.GPU_UTIL_BINS
    columns = {c.name for c in tables.gpu_rollups.columns}
    assert set(gpu_intervals.SUM_COLUMNS) | set(gpu_intervals.MAX_COLUMNS) <= columns
