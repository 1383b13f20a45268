"""Daily partitions on PostgreSQL and retention on both databases."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import func, select

from infersight.core.errors import InvalidInput
from infersight.core.window import Resolution, Window
from infersight.storage.maintenance import RetentionPolicy, maintain
from infersight.storage.partitions import list_partitions
from infersight.storage.tables import request_rollups, requests
from infersight.storage.writer import open_writer
from tests.factories import make_records

NOW = datetime(2026, 11, 30, 10, tzinfo=UTC)


@pytest.mark.postgres
def test_the_writer_creates_the_partitions_a_batch_needs(pg_store):
    records = make_records(
        np.random.default_rng(5),
        datetime(2026, 11, 20, 22, tzinfo=UTC),
        500,
        span=timedelta(hours=4),
    )
    open_writer(pg_store.engine).write_requests(records)
    with pg_store.engine.connect() as c:
        days = [day for _, day in list_partitions(c, "requests")]
        assert {date(2026, 11, 20), date(2026, 11, 21)} <= set(days)
        per_partition = c.exec_driver_sql(
            "SELECT tableoid::regclass::text, count(*) FROM requests GROUP BY 1"
        ).all()
    assert dict(per_partition).keys() >= {"requests_p20261120", "requests_p20261121"}


@pytest.mark.postgres
def test_maintenance_creates_days_ahead_and_drops_whole_old_partitions(pg_store):
    old = make_records(
        np.random.default_rng(6), NOW - timedelta(days=20), 200, span=timedelta(hours=1)
    )
    recent = make_records(
        np.random.default_rng(7), NOW - timedelta(days=1), 200, span=timedelta(hours=1)
    )
    writer = open_writer(pg_store.engine)
    writer.write_requests(old + recent)
    report = maintain(pg_store.engine, NOW, RetentionPolicy(raw_days=14, partition_ahead_days=3))
    with pg_store.engine.connect() as c:
        days = {day for _, day in list_partitions(c, "requests")}
        remaining = c.execute(select(func.count()).select_from(requests)).scalar_one()
    assert {NOW.date() + timedelta(days=i) for i in range(4)} <= days
    assert (NOW - timedelta(days=20)).date() not in days
    assert "requests_p20261110" in report.dropped
    assert remaining == 200
    # Rollups outlive raw data: the old day is still answerable from them.
    with pg_store.engine.connect() as c:
        total = c.execute(
            select(func.sum(request_rollups.c.requests)).where(request_rollups.c.resolution == "1d")
        ).scalar_one()
    assert int(total) == 400


def test_retention_removes_old_raw_rows_and_old_rollups(store):
    old = make_records(
        np.random.default_rng(8), NOW - timedelta(days=30), 100, span=timedelta(hours=1)
    )
    recent = make_records(
        np.random.default_rng(9), NOW - timedelta(hours=3), 100, span=timedelta(hours=1)
    )
    open_writer(store.engine).write_requests(old + recent)
    policy = RetentionPolicy(raw_days=7, minute_days=7, hour_days=20, day_days=400)
    report = maintain(store.engine, NOW, policy)
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(requests)).scalar_one() == 100
        left = dict(
            c.execute(
                select(request_rollups.c.resolution, func.sum(request_rollups.c.requests)).group_by(
                    request_rollups.c.resolution
                )
            ).all()
        )
    assert {k: int(v) for k, v in left.items()} == {"1m": 100, "1h": 100, "1d": 200}
    assert report.rollups_deleted > 0


def test_retention_policy_picks_the_finest_resolution_still_kept():
    policy = RetentionPolicy(minute_days=14, hour_days=180)
    assert policy.finest_for(Window(NOW - timedelta(days=1), NOW), NOW) is Resolution.MINUTE
    assert policy.finest_for(Window(NOW - timedelta(days=30), NOW), NOW) is Resolution.HOUR
    assert policy.finest_for(Window(NOW - timedelta(days=365), NOW), NOW) is Resolution.DAY
    with pytest.raises(InvalidInput):
        RetentionPolicy(minute_days=30, hour_days=7)


@pytest.mark.postgres
def test_a_writer_recreates_a_partition_that_retention_dropped_under_it(pg_store):
    day = NOW - timedelta(days=20)
    writer = open_writer(pg_store.engine)
    first = make_records(np.random.default_rng(14), day, 100, span=timedelta(hours=1))
    assert writer.write_requests(first).inserted == 100  # the writer now knows this day
    report = maintain(pg_store.engine, NOW, RetentionPolicy(raw_days=14, partition_ahead_days=0))
    assert f"requests_p{day:%Y%m%d}" in report.dropped
    late = make_records(np.random.default_rng(15), day, 50, span=timedelta(hours=1))
    assert writer.write_requests(late).inserted == 50
    with pg_store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(requests)).scalar_one() == 50


def test_client_records_are_partitioned_and_kept_like_requests(store):
    from infersight.core.client import ClientRecord
    from infersight.storage.tables import client_requests

    def calls(start: datetime, n: int, seed: int) -> list[ClientRecord]:
        rng = np.random.default_rng(seed)
        return [
            ClientRecord(
                f"{int(rng.integers(1, 2**62)):032x}",
                f"{int(rng.integers(1, 2**62)):016x}",
                start + timedelta(minutes=i),
                model="Llama-3.1-8B-Instruct",
                e2e_s=float(rng.uniform(0.5, 2.0)),
            )
            for i in range(n)
        ]

    writer = open_writer(store.engine)
    result = writer.write_client_requests(  # type: ignore[attr-defined]
        calls(NOW - timedelta(days=30), 40, 1) + calls(NOW - timedelta(hours=3), 60, 2)
    )
    assert (result.inserted, result.duplicates) == (100, 0)
    report = maintain(store.engine, NOW, RetentionPolicy(raw_days=7, partition_ahead_days=2))
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(client_requests)).scalar_one() == 60
        if store.engine.dialect.name == "postgresql":
            days = {day for _, day in list_partitions(c, "client_requests")}
            assert {NOW.date() + timedelta(days=i) for i in range(3)} <= days
            assert (NOW - timedelta(days=30)).date() not in days
    if store.engine.dialect.name == "postgresql":
        assert "client_requests_p20261031" in report.dropped
    else:
        assert "client_requests: 40 rows" in report.dropped
