"""The same requests in PostgreSQL and in ClickHouse (chdb) answer the same: exact quantiles,
sketch quantiles, counts and the data's span, over a window read from raw edges and minute,
hour and day rollups; and each request is stored once however often its batch comes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from infersight.core.query import Method, Selector
from infersight.core.records import RequestRecord
from infersight.core.window import Resolution, Window, split
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport, Transport
from infersight.storage_clickhouse.writer import ClickHouseWriter
from tests.conftest import Store, fresh_database
from tests.factories import make_records

pytestmark = pytest.mark.postgres

#: Recent days: ClickHouse drops rows past their TTL (the raw retention) as it writes them.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
#: Raw edges at both ends, minutes and hours, and one whole day in the middle.
WINDOW = Window(
    T0 + timedelta(hours=5, seconds=1403.25), T0 + timedelta(days=2, hours=13, seconds=47.5)
)
QS = (0.5, 0.9, 0.95, 0.99)
METRICS = ("ttft", "tpot", "e2e", "queue")


def _records(n: int = 3000) -> list[RequestRecord]:
    rng = np.random.default_rng(36)
    return make_records(rng, T0, n, span=timedelta(days=2, hours=20))


def _stored(telemetry: Telemetry) -> int:
    return int(
        telemetry.transport.rows(f"SELECT count() FROM {telemetry.layout.table('requests')}")[0][0]
    )


def _rolled(telemetry: Telemetry) -> list[Any]:
    table = telemetry.layout.table("request_rollups_1m")
    return telemetry.transport.rows(
        "SELECT sum(requests), sum(errors), sum(input_tokens), sum(ttft_zero),"
        f" length(mapKeys(sumMap(ttft_buckets))) FROM {table}"
    )[0]


@pytest.fixture(scope="module")
def both(chdb: ChdbTransport) -> Iterator[tuple[HybridStore, Store, list[RequestRecord]]]:
    """The records written through the hybrid store: to a PostgreSQL database and a ClickHouse
    one of this module's own (read, not changed, by its tests)."""
    records = _records()
    layout = Layout(database=f"parity_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    with fresh_database() as url:
        engine = create_store_engine(url)
        upgrade(engine)
        pg = Store(url, engine)
        hybrid = HybridStore(pg.sql, Telemetry(chdb, layout), sql_copy=True)
        sink = hybrid.ingest.open_writer()
        for i in range(0, len(records), 700):  # several batches, as a sidecar ships them
            sink.write_requests(records[i : i + 700])
        yield hybrid, pg, records
        engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


def test_the_window_is_read_from_every_kind_of_segment() -> None:
    kinds = {s.resolution for s in split(WINDOW)}
    assert kinds == {None, Resolution.MINUTE, Resolution.HOUR, Resolution.DAY}


@pytest.mark.parametrize(
    ("group_by", "selector"),
    [
        ((), Selector()),
        (("model", "instance"), Selector()),
        (("tenant",), Selector(model="llama-8b")),
    ],
)
def test_exact_quantiles_equal_postgresql_s(
    both: tuple[HybridStore, Store, list[RequestRecord]],
    group_by: Sequence[str],
    selector: Selector,
) -> None:
    hybrid, pg, _ = both
    for metric in METRICS:
        ours = hybrid.requests.latency(metric, WINDOW, selector, group_by, QS, Method.EXACT)
        theirs = pg.sql.requests.latency(metric, WINDOW, selector, group_by, QS, Method.EXACT)
        assert ours.method is Method.EXACT
        assert ours.groups
        assert [g.labels for g in ours.groups] == [g.labels for g in theirs.groups]
        for a, b in zip(ours.groups, theirs.groups, strict=True):
            assert a.count == b.count
            # The same interpolation (R7) of the same doubles; the last bit may round apart.
            assert a.quantiles == pytest.approx(b.quantiles, rel=1e-12, abs=0)


@pytest.mark.parametrize("group_by", [(), ("model",), ("model", "instance", "priority")])
def test_sketch_quantiles_equal_postgresql_s(
    both: tuple[HybridStore, Store, list[RequestRecord]], group_by: Sequence[str]
) -> None:
    hybrid, pg, records = both
    for metric in METRICS:
        ours = hybrid.requests.latency(metric, WINDOW, Selector(), group_by, QS, Method.SKETCH)
        theirs = pg.sql.requests.latency(metric, WINDOW, Selector(), group_by, QS, Method.SKETCH)
        assert ours.method is Method.SKETCH
        assert ours.relative_error == theirs.relative_error
        assert ours.groups == theirs.groups  # the same sketches: equal to the bit
    many = hybrid.requests.latencies(METRICS, WINDOW, Selector(), group_by, QS)
    assert many == pg.sql.requests.latencies(METRICS, WINDOW, Selector(), group_by, QS)
    # and within the sketch's bound of the exact answer
    values = sorted(
        r.ttft_s for r in records if WINDOW.start <= r.start < WINDOW.end and r.ttft_s is not None
    )
    p99 = many["ttft"].groups[0].quantiles[0.99] if not group_by else None
    if p99 is not None:
        exact = float(np.quantile(values, 0.99))
        assert abs(p99 - exact) <= 0.01 * exact


def test_throughput_auto_and_span_equal_postgresql_s(
    both: tuple[HybridStore, Store, list[RequestRecord]],
) -> None:
    hybrid, pg, _ = both
    for group_by in [(), ("model",), ("instance", "tenant")]:
        assert hybrid.requests.throughput(WINDOW, Selector(), group_by) == (
            pg.sql.requests.throughput(WINDOW, Selector(), group_by)
        )
    pinned = Selector(instance="gpu-1")
    assert hybrid.requests.throughput(WINDOW, pinned) == pg.sql.requests.throughput(WINDOW, pinned)
    assert hybrid.requests.data_span(WINDOW) == pg.sql.requests.data_span(WINDOW)
    wide = Window(T0 - timedelta(days=1), T0 + timedelta(days=5))
    assert hybrid.requests.data_span(wide) == pg.sql.requests.data_span(wide)
    # AUTO picks exact under the row bound and sketches over it, as on PostgreSQL
    for bound in (10, 10**6):
        ours = hybrid.requests.latency("ttft", WINDOW, exact_max_rows=bound)
        theirs = pg.sql.requests.latency("ttft", WINDOW, exact_max_rows=bound)
        assert ours.method is theirs.method
        assert ours.groups[0].count == theirs.groups[0].count


def test_the_reads_left_to_the_sql_store_are_its_answers(
    both: tuple[HybridStore, Store, list[RequestRecord]],
) -> None:
    hybrid, pg, _ = both
    ours, theirs = hybrid.requests, pg.sql.requests
    # (the breakdown answers from ClickHouse now: test_pools_parity, sums to 1e-9 relative)
    series = ours.series(WINDOW, Resolution.HOUR, Selector(), ("model",))
    assert series
    assert series == theirs.series(WINDOW, Resolution.HOUR, Selector(), ("model",))
    assert ours.label_sets(WINDOW) == theirs.label_sets(WINDOW)
    # and the maintenance's: the SQL store's contents and revision
    assert hybrid.maintenance.current() == pg.sql.maintenance.current()
    assert hybrid.maintenance.stored_requests() == pg.sql.maintenance.stored_requests()


def test_a_batch_written_twice_is_stored_once(
    both: tuple[HybridStore, Store, list[RequestRecord]],
) -> None:
    hybrid, pg, records = both
    telemetry = hybrid.telemetry
    before, rolled = _stored(telemetry), _rolled(telemetry)
    assert before == len(records)
    result = ClickHouseWriter(telemetry.transport, telemetry.layout).write_requests(records[:900])
    assert (result.inserted, result.duplicates) == (0, 900)
    # through the hybrid sink too: both stores answer that nothing was new
    again = hybrid.ingest.open_writer().write_requests(records[100:800])
    assert again.inserted == 0
    assert _stored(telemetry) == before
    assert _rolled(telemetry) == rolled
    assert hybrid.requests.throughput(WINDOW) == pg.sql.requests.throughput(WINDOW)


class _CrashAfterRollups:
    """A transport that fails the first raw insert: the writer died between its two inserts."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.database = inner.database
        self.crashed = False

    def rows(self, sql: str) -> list[list[Any]]:
        return self.inner.rows(sql)

    def command(self, sql: str) -> None:
        self.inner.command(sql)

    def insert(self, table: str, columns: Sequence[str], payload: bytes, settings: Any) -> None:
        if table.endswith(".requests") and not self.crashed:
            self.crashed = True
            raise ConnectionError("the writer died here")
        self.inner.insert(table, columns, payload, settings)

    def describe(self) -> str:
        return "crashing"

    def close(self) -> None:
        pass


def test_a_replay_after_a_crash_between_rollups_and_rows_counts_each_request_once(
    telemetry: Telemetry,
) -> None:
    records = _records(500)
    crashing = _CrashAfterRollups(telemetry.transport)
    with pytest.raises(ConnectionError):
        ClickHouseWriter(crashing, telemetry.layout).write_requests(records)
    assert _stored(telemetry) == 0  # not acknowledged: the spool keeps the batch
    replay = ClickHouseWriter(telemetry.transport, telemetry.layout).write_requests(records)
    assert replay.inserted == len(records)
    requests, errors, *_ = _rolled(telemetry)
    assert requests == len(records) == _stored(telemetry)
    assert errors == sum(r.status == "error" for r in records)
    # hour and day rollups (the materialized views) hold each request once as well
    for resolution in ("1h", "1d"):
        table = telemetry.layout.table(f"request_rollups_{resolution}")
        assert telemetry.transport.rows(f"SELECT sum(requests) FROM {table}")[0][0] == len(records)


def test_records_outside_the_accepted_window_and_prefill_legs_are_not_stored(
    telemetry: Telemetry,
) -> None:
    from infersight.core.accept import AcceptWindow
    from infersight.core.records import Role

    records = _records(50)
    legs = [
        RequestRecord(
            trace_id=r.trace_id,
            span_id="f" * 16,
            start=r.start,
            instance="prefill-0",
            role=Role.PREFILL,
        )
        for r in records[:5]
    ]
    accept = AcceptWindow.of_days(14)
    now = records[-1].start + timedelta(days=13, hours=12)  # the first part is too old
    writer = ClickHouseWriter(telemetry.transport, telemetry.layout, accept, lambda: now)
    result = writer.write_requests(records + legs)
    low, _ = accept.bounds(now)
    kept = [r for r in records if r.start >= low]
    assert 0 < len(kept) < len(records)
    assert result.received == len(records)  # prefill legs are not counted as requests
    assert result.refused == len(records) - len(kept)
    assert result.inserted == len(kept) == _stored(telemetry)
