"""``service.store.open_store`` opens the hybrid store when the settings name a telemetry URL,
and the use cases' calls reach ClickHouse or the SQL store as ``storage_clickhouse.hybrid``
says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import text

from infersight.config.parts import StorePart
from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.service.store import open_store
from infersight.storage.sql_store import SqlStore
from infersight.storage_clickhouse.hybrid import HybridStore
from infersight.storage_clickhouse.transport import connect, redact
from tests.factories import make_records


def test_without_a_telemetry_url_the_store_is_the_sql_one(tmp_path: Path) -> None:
    store = open_store(StorePart(database_url=f"sqlite:///{tmp_path}/s.db"))
    assert isinstance(store, SqlStore)
    store.dispose()


def test_a_telemetry_url_opens_the_hybrid_store(tmp_path: Path, chdb_path: Path) -> None:
    settings = StorePart(
        database_url=f"sqlite:///{tmp_path}/s.db", telemetry_url=f"chdb://{chdb_path}"
    )
    store = open_store(settings)
    assert isinstance(store, HybridStore)
    assert store.describe().endswith(f"telemetry chdb://{chdb_path}")
    store.maintenance.upgrade()  # the SQL store's revisions and ClickHouse's migrations
    store.maintenance.probe()
    now = datetime.now(UTC).replace(microsecond=0)
    records = make_records(
        np.random.default_rng(7), now - timedelta(hours=3), 400, span=timedelta(hours=2)
    )
    writer = store.ingest.open_writer(settings.accept_window())
    assert writer.write_requests(records).inserted == len(records)
    assert writer.write_requests(records).inserted == 0
    window = Window(now - timedelta(hours=4), now)
    telemetry = store.telemetry
    layout = telemetry.layout
    assert telemetry.transport.rows(f"SELECT count() FROM {layout.table('requests')}") == [[400]]
    with store.reading() as bound:  # the hybrid store bound to the SQL store's connection
        assert bound.requests.throughput(window)[0].requests == 400
        assert bound.requests.latency("ttft", window).groups[0].count == 400
        assert bound.requests.throughput(window, Selector(team="")) == (
            bound.requests.throughput(window)
        )
    with store.transaction() as bound:
        assert bound.slos.all() == []  # the state concerns are the SQL store's
    # The telemetry is ClickHouse's alone: the SQL store took none of it.
    assert store.maintenance.stored_requests() == 400
    held = store.maintenance.contents()
    assert (held.requests, held.first, held.last) == (
        400, min(r.start for r in records), max(r.start for r in records)
    )  # fmt: skip
    assert _sql_requests(store) == 0
    telemetry.transport.command(f"DROP DATABASE IF EXISTS {layout.database}")
    store.dispose()


def _sql_requests(store: HybridStore) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM requests")).scalar_one())


def test_a_copy_to_the_sql_store_is_written_while_moving(tmp_path: Path, chdb_path: Path) -> None:
    """``INFERSIGHT_TELEMETRY_SQL_COPY``: the telemetry goes to the SQL store too, under the
    same acknowledgement, so its answers stay whole until the switch."""
    settings = StorePart(
        database_url=f"sqlite:///{tmp_path}/s.db",
        telemetry_url=f"chdb://{chdb_path}",
        telemetry_sql_copy=True,
    )
    store = open_store(settings)
    assert isinstance(store, HybridStore)
    assert store.sql_copy
    store.maintenance.upgrade()
    now = datetime.now(UTC).replace(microsecond=0)
    records = make_records(
        np.random.default_rng(8), now - timedelta(hours=3), 300, span=timedelta(hours=2)
    )
    writer = store.ingest.open_writer(settings.accept_window())
    assert writer.write_requests(records).inserted == len(records)
    assert store.maintenance.stored_requests() == 300
    assert _sql_requests(store) == 300
    store.telemetry.transport.command(f"DROP DATABASE IF EXISTS {store.telemetry.layout.database}")
    store.dispose()


def test_telemetry_urls_are_checked_and_their_passwords_hidden() -> None:
    with pytest.raises(InvalidInput, match="a telemetry URL starts with"):
        connect("postgresql://x@y/z")
    with pytest.raises(InvalidInput, match="not a ClickHouse database name"):
        connect("clickhouse://u:p@host:8123/bad-name")
    assert redact("clickhouse://u:secret@host:8123/db") == "clickhouse://u:***@host:8123/db"


def test_the_cluster_setting_reaches_the_layout(tmp_path: Path, chdb_path: Path) -> None:
    """``INFERSIGHT_TELEMETRY_CLUSTER``: every table ON CLUSTER behind a Distributed one (its
    DDL is ``test_schema``'s); a name that is not an identifier is refused at open."""
    base = {"database_url": f"sqlite:///{tmp_path}/s.db", "telemetry_url": f"chdb://{chdb_path}"}
    store = open_store(StorePart(**base, telemetry_cluster="fleet_ch"))
    assert isinstance(store, HybridStore)
    assert store.telemetry.layout.cluster == "fleet_ch"
    assert store.telemetry.layout.on_cluster == " ON CLUSTER 'fleet_ch'"
    store.dispose()
    with pytest.raises(InvalidInput, match="not a ClickHouse identifier"):
        open_store(StorePart(**base, telemetry_cluster="fleet; DROP"))
