"""ClickHouse's GPU rollups (kept by the writer with ``core.gpu_intervals``) equal the SQL
store's ``gpu_rollups`` on the same samples — shipped out of order, every batch twice, and after
a batch cut off between its samples and its rollups — and the reads of them
(``hourly_gpu_usage``, ``gpu_utilization_of``, a long window's ``gpu_series``) answer as the
SQL store (SQLite and PostgreSQL).

The reads' tests read samples shipped once per module and SQL store, into stores of their own;
the tests that write (a replay, a cut-off batch) get empty stores each."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from infersight.core.errors import Unavailable
from infersight.core.gpu_intervals import COUNT_COLUMNS, MAX_COLUMNS, VALUE_COLUMNS
from infersight.core.query import Selector
from infersight.core.samples import GpuSample
from infersight.core.window import Resolution, Window
from infersight.storage.tables import gpu_rollups
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.samples import SampleWriter
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.clickhouse.test_samples_parity import (
    GPU_INSTANCES,
    T0,
    WINDOWS,
    FailsOnce,
    _gpu_samples,
    _same,
    own_stores,
)
from tests.conftest import BOTH_STORES, Store

COLUMNS = ("name", "gpu_slice", *COUNT_COLUMNS, *VALUE_COLUMNS, *MAX_COLUMNS)
Row = dict[str, Any]


def _sql_rollups(store: Store) -> dict[tuple[str, Any, str, int], Row]:
    r = gpu_rollups.c
    with store.engine.connect() as connection:
        rows = connection.execute(gpu_rollups.select()).mappings().all()
    out = {}
    for row in rows:
        bucket = row[r.bucket.name]
        out[(row["resolution"], bucket.timestamp(), row["instance"], int(row["gpu_index"]))] = {
            c: row[c] for c in COLUMNS
        }
    return out


def _ch_rollups(telemetry: Telemetry) -> dict[tuple[str, Any, str, int], Row]:
    out = {}
    for resolution in ("1m", "1h", "1d"):
        rows = telemetry.transport.rows(
            f"SELECT toUnixTimestamp(bucket), instance, gpu_index, {', '.join(COLUMNS)}"
            f" FROM {telemetry.layout.table(f'gpu_rollups_{resolution}')} FINAL"
        )
        for row in rows:
            key = (resolution, float(row[0]), str(row[1]), int(row[2]))
            out[key] = dict(zip(COLUMNS, row[3:], strict=True))
    return out


def _equal_rollups(store: Store, telemetry: Telemetry) -> int:
    """Every rollup row equal in both stores (floats to 1e-9 relative: sums in another
    order); the number of rows."""
    sql, ch = _sql_rollups(store), _ch_rollups(telemetry)
    assert sorted(sql) == sorted(ch)
    for key, row in sql.items():
        for column in COLUMNS:
            a, b = row[column], ch[key][column]
            if isinstance(a, float) or isinstance(b, float):
                assert a is not None, (key, column)
                assert b is not None, (key, column)
                assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6), (key, column, a, b)
            else:
                assert (a or None) == (b or None), (key, column, a, b)
    return len(sql)


def _ship(hybrid: HybridStore, samples: Sequence[GpuSample], size: int) -> None:
    sink = hybrid.ingest.open_writer()
    for i in range(0, len(samples), size):
        batch = samples[i : i + size]
        sink.write_gpu_samples(batch)
        assert sink.write_gpu_samples(batch) == 0


@pytest.fixture
def gpus(store: Store, telemetry: Telemetry) -> tuple[HybridStore, Store, list[GpuSample]]:
    """Samples in shuffled order (late ones cut their predecessors' intervals), batches of
    113, each shipped twice: into the test's own stores, for a test that writes more."""
    samples = _gpu_samples()
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    _ship(hybrid, samples, 113)
    return hybrid, store, samples


Shipped = tuple[HybridStore, Store, Telemetry, list[GpuSample]]


@pytest.fixture(scope="module", params=BOTH_STORES)
def shipped(
    request: pytest.FixtureRequest, chdb: ChdbTransport, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shipped]:
    """The samples of ``gpus`` shipped the same way, once per module and SQL store, into stores
    of their own: for the tests that only read."""
    with own_stores(request.param, chdb, tmp_path_factory, "rollups") as (store, telemetry):
        samples = _gpu_samples()
        hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
        _ship(hybrid, samples, 113)
        yield hybrid, store, telemetry, samples


def test_the_rollups_equal_the_sql_stores(shipped: Shipped) -> None:
    _, store, telemetry, samples = shipped
    rows = _equal_rollups(store, telemetry)
    assert rows > len(samples)  # minutes, hours and days
    # The day rows cover every sample and some GPU time.
    days = [v for k, v in _ch_rollups(telemetry).items() if k[0] == "1d"]
    assert sum(int(v["samples"]) for v in days) == len(samples)
    assert sum(float(v["covered_s"]) for v in days) > 0


def test_a_replay_adds_nothing(gpus: Any, telemetry: Telemetry) -> None:
    hybrid, store, samples = gpus
    before = _ch_rollups(telemetry)
    _ship(hybrid, samples[::-1], 500)
    after = _ch_rollups(telemetry)
    # The same rows; counts equal, sums re-added in another order by ClickHouse to 1e-12.
    assert sorted(after) == sorted(before)
    for key, row in before.items():
        for column, value in row.items():
            if isinstance(value, float):
                assert math.isclose(value, after[key][column], rel_tol=1e-12, abs_tol=1e-9)
            else:
                assert value == after[key][column], (key, column)
    _equal_rollups(store, telemetry)


def test_a_batch_cut_off_before_its_rollups_is_completed_by_a_larger_replay(
    store: Store, telemetry: Telemetry
) -> None:
    """The samples were stored, their rollups not; the replay carries them and more: the
    rollups equal the SQL store's, which stored the same samples."""
    samples = sorted(_gpu_samples(60), key=lambda s: s.ts)
    day = [s for s in samples if s.ts.date() == T0.date()]
    first, more = day[: len(day) // 2], day[len(day) // 2 :]
    failing = FailsOnce(telemetry.transport, "gpu_rollups_1m")
    writer = SampleWriter(failing, telemetry.layout)  # type: ignore[arg-type]
    with pytest.raises(Unavailable):
        writer.write_gpu_samples(first)
    assert failing.failed
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    sink = hybrid.ingest.open_writer()
    assert sink.write_gpu_samples([*first, *more]) == len(first) + len(more)
    _equal_rollups(store, telemetry)


#: Ranges of whole and ragged hours, one inside an hour, and one with no data.
RANGES = (
    (T0, T0 + timedelta(days=3)),
    (T0 + timedelta(hours=3, minutes=20), T0 + timedelta(days=1, hours=2, minutes=5)),
    (T0 + timedelta(hours=5, minutes=1), T0 + timedelta(hours=5, minutes=50)),
    (T0 - timedelta(days=2), T0 - timedelta(days=1)),
)


def test_hourly_gpu_usage_answers_as_the_sql_store(shipped: Shipped) -> None:
    hybrid, store, _, _ = shipped
    for start, end in RANGES:
        _same(
            hybrid.samples.hourly_gpu_usage(start, end),
            store.sql.samples.hourly_gpu_usage(start, end),
        )
    hours = hybrid.samples.hourly_gpu_usage(*RANGES[0])
    assert {h.instance for h in hours} == set(GPU_INSTANCES)
    assert sum(h.gpu_seconds for h in hours) > 0


@pytest.mark.parametrize("w", range(len(WINDOWS)))
def test_gpu_utilization_of_answers_as_the_sql_store(shipped: Shipped, w: int) -> None:
    hybrid, store, _, _ = shipped
    window = WINDOWS[w]
    for finest in (Resolution.MINUTE, Resolution.HOUR):
        for selector in (Selector(), Selector(model="nobody"), Selector(tenant="acme")):
            _same(
                hybrid.samples.gpu_utilization_of(window, selector, finest),
                store.sql.samples.gpu_utilization_of(window, selector, finest),
            )


def test_gpu_utilization_of_sees_the_data(shipped: Shipped) -> None:
    hybrid, _, _, samples = shipped
    mean = hybrid.samples.gpu_utilization_of(Window(T0, T0 + timedelta(days=3)), Selector())
    utils = [s.util_gpu for s in samples if s.util_gpu is not None]
    assert mean is not None
    assert math.isclose(mean, sum(utils) / len(utils), rel_tol=1e-9)


@pytest.mark.parametrize("w", [0, 1, 3, 4])
def test_a_long_gpu_series_answers_as_the_sql_store(shipped: Shipped, w: int) -> None:
    hybrid, store, _, _ = shipped
    window = WINDOWS[w]
    for finest in (Resolution.MINUTE, Resolution.HOUR):
        for step in (60, 300, 3600, 86400):
            for instances in (None, ["g-b"], []):
                _same(
                    hybrid.samples.gpu_series(window, step, instances, finest),
                    store.sql.samples.gpu_series(window, step, instances, finest),
                    f"{finest} {step} {instances}",
                )


def test_a_long_gpu_series_sees_the_data(shipped: Shipped) -> None:
    hybrid, _, _, samples = shipped
    series = hybrid.samples.gpu_series(WINDOWS[3], 3600)
    assert sum(b.samples for b in series) == len(samples)
    assert any(b.throttled_samples for b in series)
