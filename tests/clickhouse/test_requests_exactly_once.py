"""Each request stored and counted once in ClickHouse however its batch is retried: a replay
that carries more records than the attempt that failed (the sidecar's spool reads its oldest
ready entries up to its batch size, and more became ready since) stores every request once, and
the minute, hour and day rollups count it once — equal to the rollups of one clean write."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from infersight.core.records import RequestRecord
from infersight.storage_clickhouse.hybrid import Telemetry
from infersight.storage_clickhouse.schema import METRICS, Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport, Transport
from infersight.storage_clickhouse.writer import ClickHouseWriter
from tests.factories import make_records

#: Recent days: ClickHouse drops rows past their TTL (the raw retention) as it writes them.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=2)


def _records(n: int) -> list[RequestRecord]:
    return make_records(np.random.default_rng(7), T0, n, span=timedelta(days=1, hours=6))


def _stored(telemetry: Telemetry) -> int:
    table = telemetry.layout.table("requests")
    return int(telemetry.transport.rows(f"SELECT count() FROM {table} FINAL")[0][0])


def _rollups(telemetry: Telemetry, resolution: str) -> list[Any]:
    """Every series' and bucket's merged rollup row at ``resolution``."""
    sketch = ", ".join(
        f"sumMap({m}_buckets), sum({m}_zero), min({m}_min), max({m}_max)" for m in METRICS
    )
    table = telemetry.layout.table(f"request_rollups_{resolution}")
    return telemetry.transport.rows(
        f"SELECT bucket, model, instance, tenant, priority, adapter, sum(requests),"
        f" sum(errors), sum(input_tokens), sum(output_tokens), {sketch} FROM {table}"
        " GROUP BY bucket, model, instance, tenant, priority, adapter ORDER BY ALL"
    )


class _Dies:
    """A transport whose connection drops once, at the ``at``-th insert: with ``sent`` the
    statement reached ClickHouse and ran before the answer was lost; without it, the rows were
    committed but the materialized views did not run (the writer died in between)."""

    def __init__(self, inner: Transport, layout: Layout, at: int = 1, sent: bool = True) -> None:
        self.inner = inner
        self.layout = layout
        self.database = inner.database
        self.at = at
        self.sent = sent
        self.inserts = 0

    def rows(self, sql: str) -> list[list[Any]]:
        return self.inner.rows(sql)

    def command(self, sql: str) -> None:
        self.inner.command(sql)

    def insert(self, table: str, columns: Sequence[str], payload: bytes, settings: Any) -> None:
        self.inserts += 1
        if self.inserts != self.at:
            self.inner.insert(table, columns, payload, settings)
            return
        if self.sent:
            self.inner.insert(table, columns, payload, settings)
        else:
            view = self.layout.table("request_rollups_1m_mv")
            self.inner.command(f"DETACH TABLE {view}")
            try:
                self.inner.insert(table, columns, payload, settings)
            finally:
                self.inner.command(f"ATTACH TABLE {view}")
        raise ConnectionError("the connection dropped")

    def describe(self) -> str:
        return "dies once"

    def close(self) -> None:
        pass


@pytest.fixture
def clean(chdb: ChdbTransport) -> Iterator[Telemetry]:
    """A second database, written once without failures: what the rollups must equal."""
    layout = Layout(database=f"clean_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    yield Telemetry(chdb, layout)
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


@pytest.mark.parametrize("sent", [True, False], ids=["answer-lost", "rows-without-rollups"])
def test_a_superset_replay_stores_and_counts_each_request_once(
    telemetry: Telemetry, clean: Telemetry, sent: bool
) -> None:
    records = _records(900)
    first, replay = records[:500], records  # the retry carries 400 more
    dying = _Dies(telemetry.transport, telemetry.layout, sent=sent)
    with pytest.raises(ConnectionError):
        ClickHouseWriter(dying, telemetry.layout).write_requests(first)
    # the failed attempt left something behind: rows, rollups or both
    assert _stored(telemetry) or _rollups(telemetry, "1m")
    result = ClickHouseWriter(telemetry.transport, telemetry.layout).write_requests(replay)
    assert result.received == len(replay)
    assert result.inserted + result.duplicates == len(replay)
    assert _stored(telemetry) == len(replay)

    ClickHouseWriter(clean.transport, clean.layout).write_requests(replay)
    for resolution in ("1m", "1h", "1d"):
        ours = _rollups(telemetry, resolution)
        assert sum(row[6] for row in ours) == len(replay)
        assert ours == _rollups(clean, resolution)
    # and a third replay, the failed part alone, changes nothing
    again = ClickHouseWriter(telemetry.transport, telemetry.layout).write_requests(first)
    assert (again.inserted, again.duplicates) == (0, len(first))
    assert _rollups(telemetry, "1m") == _rollups(clean, "1m")


def test_a_failure_in_a_later_day_s_insert_is_finished_by_the_replay(
    telemetry: Telemetry, clean: Telemetry
) -> None:
    """A batch over two days is two inserts: the first stored, the second's rows left without
    rollups; the replay, with more records, finishes the second and stores the rest."""
    records = _records(900)
    days = {r.start.date() for r in records}
    assert len(days) == 2
    dying = _Dies(telemetry.transport, telemetry.layout, at=2, sent=False)
    with pytest.raises(ConnectionError):
        ClickHouseWriter(dying, telemetry.layout).write_requests(records[::2])
    ClickHouseWriter(telemetry.transport, telemetry.layout).write_requests(records)
    ClickHouseWriter(clean.transport, clean.layout).write_requests(records)
    assert _stored(telemetry) == len(records)
    for resolution in ("1m", "1h", "1d"):
        assert _rollups(telemetry, resolution) == _rollups(clean, resolution)
