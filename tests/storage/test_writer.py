"""The bulk writers store each request once, however often it is shipped."""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime, timedelta

import numpy as np
from sqlalchemy import func, select

from infersight.core.records import RECORD_FIELDS
from infersight.core.samples import GpuSample, ServerSample
from infersight.storage.batch import Batch
from infersight.storage.tables import gpu_samples, request_rollups, requests, server_samples
from infersight.storage.writer import COPY_TYPES, open_writer, write_binary_rows
from tests.factories import make_records

T0 = datetime(2026, 11, 2, 23, 50, tzinfo=UTC)


def counts(store):
    with store.engine.connect() as c:
        raw = c.execute(select(func.count()).select_from(requests)).scalar_one()
        rolled = {
            res: int(n)
            for res, n in c.execute(
                select(request_rollups.c.resolution, func.sum(request_rollups.c.requests)).group_by(
                    request_rollups.c.resolution
                )
            )
        }
    return raw, rolled


def test_the_same_batch_twice_is_stored_and_rolled_up_once(store):
    records = make_records(np.random.default_rng(1), T0, 3000, span=timedelta(minutes=30))
    writer = open_writer(store.engine)
    first = writer.write_requests(records)
    second = writer.write_requests(records)
    assert (first.inserted, first.duplicates) == (3000, 0)
    assert (second.inserted, second.duplicates) == (0, 3000)
    assert counts(store) == (3000, {"1m": 3000, "1h": 3000, "1d": 3000})


def test_a_batch_overlapping_an_earlier_one_adds_only_the_new_requests(store):
    records = make_records(np.random.default_rng(2), T0, 1000, span=timedelta(minutes=20))
    writer = open_writer(store.engine)
    writer.write_requests(records[:600])
    result = writer.write_requests(records[400:] + records[400:450])  # overlap + repeats inside
    assert (result.received, result.inserted, result.duplicates) == (650, 400, 250)
    assert counts(store) == (1000, {"1m": 1000, "1h": 1000, "1d": 1000})


def test_rows_read_back_equal_the_records_written(store):
    records = make_records(np.random.default_rng(3), T0, 50, span=timedelta(minutes=1))
    open_writer(store.engine).write_requests(records)
    with store.engine.connect() as c:
        rows = {r.span_id: r for r in c.execute(select(requests)).mappings()}
    for record in records:
        row = rows[record.span_id]
        assert row["start"] == record.start
        assert row["ttft_s"] == record.ttft_s
        assert row["model"] == record.model
        assert row["status"] == record.status.value
        assert row["output_tokens"] == record.output_tokens


def test_concurrent_writers_shipping_the_same_records_store_them_once(store):
    records = make_records(np.random.default_rng(4), T0, 4000, span=timedelta(minutes=15))
    errors: list[BaseException] = []

    def ship(batch):
        try:
            writer = open_writer(store.engine)
            for i in range(0, len(batch), 500):
                writer.write_requests(batch[i : i + 500])
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=ship, args=(records,)),
        threading.Thread(target=ship, args=(records[::-1],)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert counts(store) == (4000, {"1m": 4000, "1h": 4000, "1d": 4000})


def test_samples_are_idempotent_too(store):
    writer = open_writer(store.engine)
    gpus = [
        GpuSample(
            ts=T0 + timedelta(seconds=i),
            instance="gpu-host",
            gpu_index=g,
            util_gpu=0.5,
            power_w=300.0,
            throttle_reasons=("sw_power_cap",),
        )
        for i in range(10)
        for g in range(2)
    ]
    servers = [
        ServerSample(
            ts=T0 + timedelta(seconds=15 * i),
            instance="gpu-host",
            engine="vllm",
            requests_running=3,
            requests_waiting=i,
        )
        for i in range(10)
    ]
    assert writer.write_gpu_samples(gpus) == 20
    writer.write_gpu_samples(gpus)
    writer.write_server_samples(servers)
    writer.write_server_samples(servers)
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(gpu_samples)).scalar_one() == 20
        assert c.execute(select(func.count()).select_from(server_samples)).scalar_one() == 10
        assert (
            c.execute(select(gpu_samples.c.throttle_reasons).limit(1)).scalar_one()
            == "sw_power_cap"
        )


def test_a_replayed_batch_leaves_no_connection_inside_a_copy(store):
    """On PostgreSQL a replay fails its optimistic COPY; the connection must come out clean."""
    records = make_records(np.random.default_rng(12), T0, 2000, span=timedelta(minutes=5))
    writer = open_writer(store.engine)
    writer.write_requests(records)
    assert writer.write_requests(records).duplicates == 2000
    fresh = make_records(np.random.default_rng(13), T0, 500, span=timedelta(minutes=5))
    assert writer.write_requests(fresh).inserted == 500  # the same pooled connection, reused
    if store.dialect == "postgresql":
        with store.engine.connect() as c:
            stuck = c.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'COPY%%' AND state <> 'idle'"
            ).scalar_one()
        assert stuck == 0
    assert counts(store) == (2500, {"1m": 2500, "1h": 2500, "1d": 2500})


def test_spans_of_one_trace_are_separate_requests(store):
    records = make_records(np.random.default_rng(4), T0, 6, span=timedelta(minutes=1))
    one_trace = [dataclasses.replace(r, trace_id=records[0].trace_id) for r in records]
    result = open_writer(store.engine).write_requests(one_trace + one_trace[:2])
    assert (result.received, result.inserted, result.duplicates) == (8, 6, 2)
    assert counts(store) == (6, {"1m": 6, "1h": 6, "1d": 6})


def test_labels_holding_control_characters_keep_their_own_series(store):
    """Two label sets that would read alike if joined with a separator stay apart."""
    first, second = make_records(np.random.default_rng(5), T0, 2, span=timedelta(seconds=10))
    records = [
        dataclasses.replace(first, model="m\x1fi", instance="x"),
        dataclasses.replace(second, model="m", instance="i\x1fx"),
    ]
    open_writer(store.engine).write_requests(records)
    with store.engine.connect() as c:
        rows = c.execute(
            select(request_rollups.c.model, request_rollups.c.instance).where(
                request_rollups.c.resolution == "1m"
            )
        )
        series = {tuple(row) for row in rows}
    assert series == {("m\x1fi", "x"), ("m", "i\x1fx")}


def test_rows_copied_in_buffers_equal_rows_copied_one_at_a_time(pg_store):
    """``write_binary_rows`` (psycopg's encoder driven in buffers) puts into the table exactly
    what ``Copy.write_row`` does: several buffers' worth, non-ASCII labels, NULLs."""
    records = make_records(np.random.default_rng(14), T0, 5000, span=timedelta(hours=1))
    records = [
        dataclasses.replace(r, model="modèle-😀", queue_s=None, cached_tokens=None)
        if i % 3 == 0
        else r
        for i, r in enumerate(records)
    ]
    rows = list(Batch.of(records).rows())
    columns = ", ".join(f'"{name}"' for name in RECORD_FIELDS)
    with pg_store.engine.begin() as c:
        raw = c.connection.driver_connection
        for table, buffered in (("copied_in_buffers", True), ("copied_by_row", False)):
            raw.execute(f"CREATE TEMP TABLE {table} AS SELECT * FROM requests WITH NO DATA")
            with (
                raw.cursor() as cursor,
                cursor.copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.set_types(COPY_TYPES)
                if buffered:
                    write_binary_rows(copy, iter(rows))
                else:
                    for row in rows:
                        copy.write_row(row)
        query = f"SELECT {columns} FROM {{}} ORDER BY trace_id, span_id"
        buffered_rows = raw.execute(query.format("copied_in_buffers")).fetchall()
        by_row = raw.execute(query.format("copied_by_row")).fetchall()
    assert len(buffered_rows) == 5000
    assert buffered_rows == by_row


def test_a_batch_interleaving_stored_and_new_keys_rolls_up_only_the_new(store):
    """Every other key stored before, the batch's last row among them: the writer says which
    rows it stored (SQLite reads them back by rowid) and rolls up only those."""
    records = make_records(np.random.default_rng(5), T0, 400, span=timedelta(minutes=10))
    writer = open_writer(store.engine)
    writer.write_requests(records[1::2])
    result = writer.write_requests(records)
    assert (result.received, result.inserted, result.duplicates) == (400, 200, 200)
    assert counts(store) == (400, {"1m": 400, "1h": 400, "1d": 400})
    with store.engine.connect() as c:
        stored = {r.span_id for r in c.execute(select(requests.c.span_id))}
    assert stored == {r.span_id for r in records}


def test_sqlite_timestamps_are_written_as_the_column_type_writes_them():
    """The SQLite writer's fast timestamp text equals ``%Y-%m-%d %H:%M:%S.%f`` of UTC, whole
    seconds and other offsets included."""
    from datetime import timezone

    from infersight.storage.writer import sqlite_timestamp

    for ts in (
        datetime(2026, 11, 2, 23, 50, tzinfo=UTC),
        datetime(2026, 11, 2, 23, 50, 1, 7, tzinfo=UTC),
        datetime(2026, 3, 29, 1, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-7))),
    ):
        assert sqlite_timestamp(ts) == ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def test_a_label_the_database_cannot_hold_is_refused_as_bad_input(store):
    """A NUL in a label (PostgreSQL refuses it) is the batch's fault: ``InvalidInput``, which
    the shippers isolate and drop, not a raw driver error they retry for ever; SQLite keeps it."""
    import pytest

    from infersight.core.errors import InvalidInput

    record = make_records(np.random.default_rng(3), T0, 1, span=timedelta(minutes=1))[0]
    bad = dataclasses.replace(record, tenant="acme\x00")
    writer = open_writer(store.engine)
    if store.dialect == "postgresql":
        with pytest.raises(InvalidInput, match="refused the batch"):
            writer.write_requests([bad])
        assert counts(store)[0] == 0
    else:
        assert writer.write_requests([bad]).inserted == 1
