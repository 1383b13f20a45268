"""Migrations run up and down on both databases and agree with the table metadata."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData, Table, create_engine, insert, inspect, select, text

from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.partitions import ensure_partitions
from infersight.storage.tables import (
    metadata,
    server_engine_samples,
    server_samples,
)
from tests.conftest import POSTGRES_ADMIN_URL, STORES_AND_POOLER, through


@pytest.fixture(params=STORES_AND_POOLER)
def fresh_engine(request, tmp_path):
    """A store that was never migrated: a new SQLite file or a new PostgreSQL database,
    reached directly or through PgBouncer in transaction pooling mode."""
    if request.param == "sqlite":
        engine = create_store_engine(f"sqlite:///{tmp_path / 'm.db'}")
        yield engine
        engine.dispose()
        return
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"infersight_mig_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    if request.param == "pgbouncer":
        url = through(request.getfixturevalue("pgbouncer"), url)
    engine = create_store_engine(url)
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def test_upgrade_creates_every_table_and_downgrade_removes_them(fresh_engine):
    assert migrate.current(fresh_engine) is None
    migrate.upgrade(fresh_engine)
    assert migrate.current(fresh_engine) == migrate.head()
    assert set(metadata.tables) <= set(inspect(fresh_engine).get_table_names())
    migrate.upgrade(fresh_engine)  # idempotent
    migrate.downgrade(fresh_engine)
    assert migrate.current(fresh_engine) is None
    assert not set(metadata.tables) & set(inspect(fresh_engine).get_table_names())
    migrate.upgrade(fresh_engine)  # and back up again
    assert migrate.current(fresh_engine) == migrate.head()


def test_migrated_schema_matches_the_table_metadata(fresh_engine):
    migrate.upgrade(fresh_engine)
    with fresh_engine.connect() as connection:
        diff = compare_metadata(
            MigrationContext.configure(connection, opts={"compare_type": True}), metadata
        )
    # Partitions of raw tables are created at run time and are not part of the metadata.
    diff = [d for d in diff if not (d[0] == "remove_table" and "_p" in d[1].name)]
    assert diff == []


def test_0008_adds_engine_rows_keeping_stored_server_samples_and_downgrades(fresh_engine):
    """Server samples stored before 0008 survive it (with no hottest engine) and its
    downgrade; the engines' table comes and goes; PostgreSQL's existing daily partition
    gains the new column."""
    ts = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    migrate.upgrade(fresh_engine, "0007")
    with fresh_engine.begin() as connection:
        ensure_partitions(connection, "server_samples", [ts.date()])
        connection.execute(insert(server_samples).values(ts=ts, instance="old", kv_cache_usage=0.4))
    migrate.upgrade(fresh_engine, "0008")
    columns = {c["name"] for c in inspect(fresh_engine).get_columns("server_samples")}
    assert "kv_cache_usage_max" in columns
    s = server_samples.c
    with fresh_engine.connect() as connection:
        old = connection.execute(select(s.instance, s.kv_cache_usage, s.kv_cache_usage_max)).one()
    assert tuple(old) == ("old", 0.4, None)
    # Rows as the writer of revision 0008 stored them (today's writer has later columns).
    new = {"ts": ts + timedelta(seconds=15), "instance": "new"}
    with fresh_engine.begin() as connection:
        ensure_partitions(connection, "server_engine_samples", [ts.date()])
        connection.execute(
            insert(server_samples).values(**new, kv_cache_usage=0.48, kv_cache_usage_max=0.55)
        )
        for rank, usage in (("0", 0.41), ("1", 0.55)):
            connection.execute(
                insert(server_engine_samples).values(**new, rank=rank, kv_cache_usage=usage)
            )
    with fresh_engine.connect() as connection:
        ranks = connection.execute(select(server_engine_samples.c.rank)).scalars().all()
        hottest = connection.execute(
            select(server_samples.c.kv_cache_usage_max).where(server_samples.c.instance == "new")
        ).scalar_one()
    assert (sorted(ranks), hottest) == (["0", "1"], 0.55)

    migrate.downgrade(fresh_engine, "0007")
    assert "server_engine_samples" not in inspect(fresh_engine).get_table_names()
    columns = {c["name"] for c in inspect(fresh_engine).get_columns("server_samples")}
    assert "kv_cache_usage_max" not in columns
    with fresh_engine.connect() as connection:
        kept = connection.execute(
            text("SELECT instance, kv_cache_usage FROM server_samples ORDER BY instance")
        ).all()
    assert [tuple(r) for r in kept] == [("new", 0.48), ("old", 0.4)]
    migrate.upgrade(fresh_engine)
    assert migrate.current(fresh_engine) == migrate.head()


def test_0008_keys_kept_good_tokens_by_end_to_end_limit_too_and_keeps_the_old_counts(fresh_engine):
    """Counts kept under 0007 (a pair of TTFT and TPOT limits) read as "no end-to-end limit"
    after 0008; the downgrade keeps them and drops what 0007 could not have kept."""
    bucket = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    labels = {"model": "m", "instance": "i", "tenant": "t", "priority": "p"}
    old = {"ttft_s": 2.0, "tpot_s": 0.1, "resolution": "1h", "bucket": bucket, **labels}
    migrate.upgrade(fresh_engine, "0007")
    legacy = Table("good_token_counts", MetaData(), autoload_with=fresh_engine)
    with fresh_engine.begin() as connection:
        connection.execute(insert(legacy).values(**old, requests=10, good_tokens=900))
    migrate.upgrade(fresh_engine, "0008")
    at_0008 = Table("good_token_counts", MetaData(), autoload_with=fresh_engine)  # no adapter
    k = at_0008.c
    with fresh_engine.begin() as connection:
        assert connection.execute(select(k.e2e_s, k.good_tokens)).all() == [(0.0, 900)]
        for e2e, tpot in ((1.5, 0.1), (0.0, 0.0)):  # an end-to-end limit; no TPOT limit
            row = {**old, "tpot_s": tpot, "e2e_s": e2e, "requests": 10, "good_tokens": 50}
            connection.execute(insert(at_0008).values(**row))
    migrate.downgrade(fresh_engine, "0007")
    with fresh_engine.connect() as connection:
        kept = connection.execute(text("SELECT ttft_s, tpot_s, good_tokens FROM good_token_counts"))
        assert [tuple(r) for r in kept] == [(2.0, 0.1, 900)]
    migrate.upgrade(fresh_engine)


def test_0015_keys_rollups_by_adapter_keeping_old_rows_as_the_base_models(fresh_engine):
    """Rollup rows and good-token counts kept before 0015 read as the base model's (adapter
    ""); an adapter's row sits beside its base model's under the new key; the downgrade drops
    the adapter rows (their sketches cannot be merged in SQL) and keeps the others."""
    bucket = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
    labels = {"model": "m", "instance": "i", "tenant": "", "priority": ""}
    rollup = {"resolution": "1h", "bucket": bucket, **labels}
    counts = {"requests": 7, "errors": 0, "input_tokens": 70, "output_tokens": 700}
    good = {"ttft_s": 2.0, "tpot_s": 0.1, "e2e_s": 0.0, "resolution": "1h", "bucket": bucket}
    migrate.upgrade(fresh_engine, "0014")
    legacy = MetaData()
    rollups_0014 = Table("request_rollups", legacy, autoload_with=fresh_engine)
    good_0014 = Table("good_token_counts", legacy, autoload_with=fresh_engine)
    with fresh_engine.begin() as connection:
        connection.execute(insert(rollups_0014).values(**rollup, **counts, cached_tokens=0))
        connection.execute(insert(good_0014).values(**good, **labels, requests=7, good_tokens=9))
    migrate.upgrade(fresh_engine, "0015")
    current = MetaData()
    rollups = Table("request_rollups", current, autoload_with=fresh_engine)
    good_counts = Table("good_token_counts", current, autoload_with=fresh_engine)
    with fresh_engine.begin() as connection:
        assert connection.execute(select(rollups.c.adapter, rollups.c.requests)).all() == [("", 7)]
        connection.execute(
            insert(rollups).values(**rollup, **counts, cached_tokens=0, adapter="sql-lora")
        )
        connection.execute(
            insert(good_counts).values(
                **good, **labels, requests=3, good_tokens=4, adapter="sql-lora"
            )
        )
        assert connection.execute(select(good_counts.c.adapter)).scalars().all() in (
            ["", "sql-lora"],
            ["sql-lora", ""],
        )
    migrate.downgrade(fresh_engine, "0014")
    with fresh_engine.connect() as connection:
        kept = connection.execute(text("SELECT requests FROM request_rollups")).scalars().all()
        kept_good = connection.execute(text("SELECT good_tokens FROM good_token_counts")).all()
    assert (kept, [tuple(r) for r in kept_good]) == ([7], [(9,)])
    migrate.upgrade(fresh_engine)
    assert migrate.current(fresh_engine) == migrate.head()


@pytest.mark.postgres
def test_two_upgrades_at_once_on_a_new_postgres_database_both_succeed(tmp_path):
    """A Helm hook beside replicas started with --migrate: two ``db upgrade`` processes at
    once on a database never migrated. One waits for the other's commit and finds the store
    at head (before the lock, the second failed on the tables the first had just created)."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"infersight_mig_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = admin.url.set(database=name).render_as_string(hide_password=False)
    try:
        command = [sys.executable, "-c", "from infersight.cli import main; main()"]
        runs = [
            subprocess.Popen(
                [*command, "db", "upgrade", "--store", url],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(3)
        ]
        outputs = [run.communicate(timeout=600)[0] for run in runs]
        assert [run.returncode for run in runs] == [0, 0, 0], outputs
        assert not [out for out in outputs if "Traceback" in out]
        engine = create_store_engine(url)
        try:
            assert migrate.current(engine) == migrate.head()
        finally:
            engine.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()
