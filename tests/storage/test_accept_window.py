"""The store defends itself against client clocks: a writer with an accepted window refuses
records and samples outside it, no partition is ever created beyond the horizon, and
maintenance drops the far-future partitions and rollups an older version let in."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, text

from infersight.core.accept import AcceptWindow
from infersight.core.errors import InvalidInput
from infersight.core.records import RECORD_FIELDS, RequestRecord
from infersight.core.samples import GpuSample
from infersight.storage import rollup
from infersight.storage.batch import Batch
from infersight.storage.maintenance import RetentionPolicy, maintain
from infersight.storage.partitions import MAX_DAYS_AHEAD, ensure_partitions, list_partitions
from infersight.storage.tables import gpu_samples, request_rollups, requests
from infersight.storage.writer import open_writer
from tests.factories import make_records

NOW = datetime.now(UTC).replace(microsecond=0)
WINDOW = AcceptWindow.of_days(14, future_s=300.0)


def count(store, table) -> int:
    with store.engine.connect() as c:
        return int(c.execute(select(func.count()).select_from(table)).scalar_one())


def partitions(store, table: str = "requests") -> set[date]:
    if store.dialect != "postgresql":
        return set()
    with store.engine.connect() as c:
        return {day for _, day in list_partitions(c, table)}


def test_a_writer_with_a_window_refuses_what_lies_outside_it(store) -> None:
    rng = np.random.default_rng(3)
    inside = make_records(rng, NOW - timedelta(hours=2), 50, span=timedelta(hours=1))
    old = make_records(rng, NOW - timedelta(days=30), 20, span=timedelta(hours=1))
    ahead = make_records(rng, NOW + timedelta(days=400), 20, span=timedelta(days=300))
    before = partitions(store)
    writer = open_writer(store.engine, accept=WINDOW, clock=lambda: NOW)
    result = writer.write_requests(inside + old + ahead)
    assert (result.received, result.inserted, result.duplicates, result.refused) == (90, 50, 0, 40)
    assert count(store, requests) == 50
    with store.engine.connect() as c:
        rolled = c.execute(select(func.sum(request_rollups.c.requests))).scalar_one()
    assert int(rolled) == 50 * 3  # minute, hour and day: the refused are not rolled up
    assert writer.write_requests(old).refused == 20  # a batch of nothing but refusals
    future_gpu = GpuSample(ts=NOW + timedelta(days=9), instance="n", gpu_index=0, power_w=1.0)
    assert writer.write_gpu_samples([future_gpu]) == 0
    assert count(store, gpu_samples) == 0
    if store.dialect == "postgresql":
        assert partitions(store) - before <= {
            (NOW - timedelta(hours=2)).date(),
            (NOW - timedelta(hours=1)).date(),
        }


@pytest.mark.postgres
def test_no_writer_creates_a_partition_beyond_the_horizon(pg_store) -> None:
    far = make_records(
        np.random.default_rng(4), NOW + timedelta(days=MAX_DAYS_AHEAD + 30), 10, span=timedelta(0)
    )
    writer = open_writer(pg_store.engine)  # no window: backfills may write any past
    with pytest.raises(InvalidInput, match="horizon"):
        writer.write_requests(far)
    assert not {d for d in partitions(pg_store) if d > NOW.date() + timedelta(MAX_DAYS_AHEAD)}
    with pg_store.engine.begin() as c, pytest.raises(InvalidInput):
        ensure_partitions(c, "requests", [date(2199, 1, 1)])


def _stray_partition(connection, day: date) -> None:
    """What an older version created for a far-future client timestamp."""
    start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
    connection.execute(
        text(
            f'CREATE TABLE "requests_p{day:%Y%m%d}" PARTITION OF requests FOR VALUES FROM '
            f"('{start.isoformat()}') TO ('{(start + timedelta(days=1)).isoformat()}')"
        )
    )


def test_maintenance_drops_far_future_data_an_older_version_stored(store) -> None:
    today = NOW.date()
    stray_days = [today + timedelta(days=400 + 30 * i) for i in range(5)] + [date(2199, 3, 1)]
    if store.dialect == "postgresql":
        with store.engine.begin() as c:
            for day in stray_days:
                _stray_partition(c, day)
    # Rows in them, written around the horizon check as an old version did (no check at all).
    stray = [
        record
        for i, day in enumerate(stray_days)
        for record in make_records(
            np.random.default_rng(10 + i),
            datetime.combine(day, datetime.min.time(), tzinfo=UTC),
            5,
            span=timedelta(hours=1),
        )
    ]
    recent = make_records(np.random.default_rng(9), NOW - timedelta(hours=3), 40, span=timedelta(0))
    writer = open_writer(store.engine)
    writer.write_requests(recent)
    with store.engine.begin() as c:
        c.execute(requests.insert(), [_row(r) for r in stray])
        rollup.apply(c, rollup.deltas_from_batch(Batch.of(stray)))
    assert count(store, requests) == 40 + len(stray)

    policy = RetentionPolicy(raw_days=14, partition_ahead_days=3)
    report = maintain(store.engine, NOW, policy)
    assert count(store, requests) == 40
    with store.engine.connect() as c:
        latest = c.execute(select(func.max(request_rollups.c.bucket))).scalar_one()
    assert latest <= NOW + timedelta(days=1)
    if store.dialect == "postgresql":
        days = partitions(store)
        assert max(days) == today + timedelta(days=3)  # the days ahead are kept
        assert {f"requests_p{day:%Y%m%d}" for day in stray_days} <= set(report.dropped)
    assert any("request_rollups" in line for line in report.dropped)
    assert maintain(store.engine, NOW, policy).dropped == ()


def _row(record: RequestRecord) -> dict[str, object]:
    return {name: getattr(record, name) for name in RECORD_FIELDS}
