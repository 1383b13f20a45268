"""The ClickHouse migrations: applied once and in order on one server (chdb), and the cluster's
DDL — checked as text and parsed by ClickHouse itself, since no cluster runs here."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np

from infersight.storage_clickhouse.layout import MAX_TTL_DAYS
from infersight.storage_clickhouse.schema import (
    STEPS,
    Layout,
    align_retention,
    applied,
    checksum,
    ddl,
    migrate,
    retention,
)
from infersight.storage_clickhouse.transport import ChdbTransport
from infersight.storage_clickhouse.writer import ClickHouseWriter
from tests.factories import make_records


def test_migrations_apply_in_order_once(chdb: ChdbTransport) -> None:
    layout = Layout(database=f"m_{uuid.uuid4().hex[:12]}")
    try:
        assert applied(chdb, layout) == []
        assert migrate(chdb, layout, STEPS[:1]) == [1]
        assert migrate(chdb, layout) == [s.version for s in STEPS[1:]]
        assert migrate(chdb, layout) == []
        assert applied(chdb, layout) == [s.version for s in STEPS]
        rows = chdb.rows(
            f"SELECT version, checksum FROM {layout.table('schema_migrations')} ORDER BY version"
        )
        assert rows == [[s.version, checksum(s, layout)] for s in STEPS]
        tables = {
            r[0]
            for r in chdb.rows(
                f"SELECT name FROM system.tables WHERE database = '{layout.database}'"
            )
        }
        assert tables == {
            "schema_migrations",
            "requests",
            "request_rollups_1m",
            "request_rollups_1h",
            "request_rollups_1d",
            "request_rollups_1m_mv",
            "request_rollups_1h_mv",
            "request_rollups_1d_mv",
            "server_samples",
            "server_engine_samples",
            "gpu_samples",
            "request_parts",
            "attributions",
            "request_moves",
            "request_marks",
            "requests_attributed",
            "request_moves_1m",
            "request_moves_1h",
            "request_moves_1d",
            "gpu_rollups_1m",
            "gpu_rollups_1h",
            "gpu_rollups_1d",
            "good_token_counts",
            "request_folds",
            "request_fold_marks",
            "requests_folded",
            "requests_current",
            "request_folds_1m",
            "request_folds_1h",
            "request_folds_1d",
            "request_folds_attributed_1m",
            "request_folds_attributed_1h",
            "request_folds_attributed_1d",
            "client_requests",
        }
        for name in ("requests", "request_parts", "request_moves"):
            engine = chdb.rows(
                "SELECT engine, partition_key, sorting_key FROM system.tables"
                f" WHERE database = '{layout.database}' AND name = '{name}'"
            )
            assert engine == [
                ["ReplacingMergeTree", "toDate(start)", "model, instance, start, trace_id, span_id"]
            ]
    finally:
        chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


def test_the_retention_settings_are_the_tables_ttls() -> None:
    text = "\n".join(ddl(Layout(raw_days=9, minute_days=10, hour_days=100, day_days=1000)))
    assert "TTL toDateTime(start) + INTERVAL 9 DAY" in text
    for days in (10, 100, 1000):
        assert f"TTL bucket + INTERVAL {days} DAY" in text


def _ttls(chdb: ChdbTransport, layout: Layout) -> dict[str, str]:
    """Each table's ``TTL`` as ClickHouse keeps it (its ``engine_full``), or ``""``."""
    out = {}
    for name, engine in chdb.rows(
        f"SELECT name, engine_full FROM system.tables WHERE database = '{layout.database}'"
    ):
        found = re.search(r"TTL (.+?) SETTINGS", engine)
        out[name] = found.group(1) if found else ""
    return out


def test_a_retention_changed_after_the_tables_were_made_is_theirs_at_the_next_migration(
    chdb: ChdbTransport,
) -> None:
    """The retention settings changed between two starts: the next migration (run at every
    open) alters each table's ``TTL`` (raw tables to 3 days, then kept for good), rows past the
    new retention go, and a migration with the same settings alters nothing."""
    first = Layout(database=f"r_{uuid.uuid4().hex[:12]}")
    try:
        migrate(chdb, first)
        now = datetime.now(UTC)
        rng = np.random.default_rng(5)
        records = make_records(rng, now - timedelta(days=9), 600, span=timedelta(days=9))
        assert ClickHouseWriter(chdb, first).write_requests(records).inserted == len(records)
        assert align_retention(chdb, first) == []
        before = _ttls(chdb, first)
        assert before["requests"] == "toDateTime(start) + toIntervalDay(14)"
        assert before["request_rollups_1h"] == "bucket + toIntervalDay(180)"

        shorter = Layout(database=first.database, raw_days=3, hour_days=90)
        assert migrate(chdb, shorter) == []  # no step ran; the retention changed
        after = _ttls(chdb, shorter)
        raw = {r.table for r in retention(shorter) if r.days == 3}
        assert raw >= {"requests", "request_parts", "request_moves", "request_folds", "gpu_samples"}
        for table in raw:
            assert after[table].endswith("+ toIntervalDay(3)"), table
        assert after["request_rollups_1h"] == "bucket + toIntervalDay(90)"
        assert after["request_rollups_1d"] == before["request_rollups_1d"]
        assert align_retention(chdb, shorter) == []
        # What ClickHouse does in the background, here at once: the new TTL applied to the
        # parts written under the old one (waited for), then expired parts dropped.
        chdb.command(
            f"ALTER TABLE {shorter.table('requests')} MATERIALIZE TTL SETTINGS mutations_sync = 1"
        )
        chdb.command(f"OPTIMIZE TABLE {shorter.table('requests')} FINAL")
        kept = chdb.rows(f"SELECT count(), min(start) FROM {shorter.table('requests')} FINAL")
        assert 0 < int(kept[0][0]) < len(records)
        oldest = datetime.fromisoformat(kept[0][1]).replace(tzinfo=UTC)
        assert oldest >= (now - timedelta(days=4)).replace(hour=0, minute=0, second=0)

        forever = Layout(database=first.database, raw_days=MAX_TTL_DAYS + 1)
        changed = align_retention(chdb, forever)
        assert ("requests", 3, None) in changed
        assert ("request_rollups_1h", 90, 180) in changed
        assert _ttls(chdb, forever)["requests"] == ""
        assert align_retention(chdb, forever) == []
    finally:
        chdb.command(f"DROP DATABASE IF EXISTS {first.database}")


def _local_form(statement: str) -> str:
    """A cluster statement as the single server's: no ``ON CLUSTER``, plain engines, no
    ``_local`` suffix."""
    statement = statement.replace(" ON CLUSTER 'prod'", "")
    statement = re.sub(
        r"Replicated(\w+)\('[^']*', '\{replica\}'(?:, )?(\w*)\)", r"\1(\2)", statement
    )
    statement = statement.replace("_local", "")
    return statement.replace(", non_replicated_deduplication_window = 100000", "")


def test_the_cluster_ddl_is_the_single_server_s_on_replicated_sharded_tables(
    chdb: ChdbTransport,
) -> None:
    single, cluster = ddl(Layout()), ddl(Layout(cluster="prod"))
    for statement in cluster:
        assert " ON CLUSTER 'prod'" in statement
        chdb.rows("EXPLAIN AST " + statement)  # ClickHouse parses it
    distributed = [s for s in cluster if "ENGINE = Distributed" in s]
    # a column added to a local table is added to its Distributed twin as well
    twins = [s for s in cluster if s.startswith("ALTER TABLE infersight.requests ")]
    assert [s.replace("requests ", "requests_local ", 1) for s in twins] == [
        s for s in cluster if s.startswith("ALTER TABLE infersight.requests_local ")
    ]
    local = [s for s in cluster if "ENGINE = Distributed" not in s and s not in twins]
    # every table but the database has its Distributed twin, sharded by the series
    assert len(distributed) == 19
    for statement in distributed:
        name = re.search(r"CREATE TABLE IF NOT EXISTS infersight\.(\w+) ", statement)
        assert name is not None
        assert f"AS infersight.{name[1]}_local" in statement
        # a server's scrapes and GPUs stay on one shard (they name no model per engine or GPU)
        key = "instance" if name[1].startswith(("server_", "gpu_")) else "model, instance"
        if name[1] in ("attributions", "client_requests"):  # by trace (they name no instance)
            key = "trace_id"
        assert statement.endswith(
            f"Distributed('prod', 'infersight', '{name[1]}_local', cityHash64({key}))"
        )
    for statement in local:
        if "MergeTree" in statement:
            assert re.search(
                r"ENGINE = Replicated\w*MergeTree\('/clickhouse/tables/\{shard\}/infersight/"
                r"\w+_local', '\{replica\}'(, version)?\)",
                statement,
            )
        if "MATERIALIZED VIEW" in statement:  # each shard aggregates its own rows and minutes
            assert "TO infersight.request_rollups_1" in statement
            assert re.search(
                r"FROM infersight\.(request_rollups_1m|requests)_local( GROUP BY [\w, ]+)?$",
                statement,
            )
    # the local tables are the single server's tables
    assert [_local_form(s) for s in local] == [
        s.replace(", non_replicated_deduplication_window = 100000", "") for s in single
    ]
