"""The sidecar's health tells a stuck or away store from a working one (#32, defects 4 and 9):
a store whose request table is locked by another session reads "degraded: store slow" while
the lag grows, not "ok"; with nothing to ship the store is probed, so an idle outage reads
degraded too, and ``last_shipped_at`` moves only when the store really answered."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from infersight.collector.sidecar import Sidecar
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.writer import open_writer
from tests.collector.harness import (
    base_url,
    post_spans,
    running_sidecar,
    sidecar_config,
    span_key,
    stored_keys,
    vllm_spans,
    wait_until,
)
from tests.collector.tcp_proxy import TcpProxy
from tests.conftest import Store

pytestmark = pytest.mark.e2e

ERRORS = "infersight_collector_ship_errors_total"
LAST_SUCCESS = "infersight_collector_ship_last_success_timestamp_seconds"


def health(app: Sidecar) -> dict[str, Any]:
    return httpx.get(f"{base_url(app)}/healthz", timeout=10).json()  # type: ignore[no-any-return]


def status(app: Sidecar) -> str:
    return str(health(app)["status"])


@contextmanager
def locked_requests(store: Store) -> Iterator[None]:
    """Another session holds the requests table: on PostgreSQL ``LOCK TABLE … IN ACCESS
    EXCLUSIVE MODE`` in an open transaction, on SQLite the database's write lock."""
    if store.dialect == "postgresql":
        with store.engine.connect() as connection:
            connection.execute(text("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE"))
            try:
                yield
            finally:
                connection.rollback()
        return
    path = make_url(store.url).database
    assert path
    raw = sqlite3.connect(path, isolation_level=None)
    try:
        raw.execute("BEGIN EXCLUSIVE")
        yield
        raw.execute("ROLLBACK")
    finally:
        raw.close()


def test_a_stuck_store_reads_degraded_store_slow_and_ships_once_it_is_released(
    store: Store, tmp_path: Path
) -> None:
    config = sidecar_config("stuck", tmp_path / "spool", ship_lag_bound_s=3.0)
    with running_sidecar(open_writer(store.engine), config) as app:
        first = vllm_spans(20)
        assert post_spans(base_url(app), first).status_code == 200
        assert wait_until(lambda: len(stored_keys(store.engine)) == 20)
        assert wait_until(lambda: status(app) == "ok")
        with locked_requests(store):
            more = vllm_spans(20)
            assert post_spans(base_url(app), more).status_code == 200  # spooled meanwhile
            assert wait_until(lambda: status(app).startswith("degraded: store slow"))
            state = health(app)
            assert state["shipping"] in ("slow", "failing")
            assert state["ship_lag_seconds"] > 0
        expected = {span_key(s) for s in first + more}
        assert wait_until(lambda: set(stored_keys(store.engine)) == expected)
        assert wait_until(lambda: status(app) == "ok")
        assert sorted(stored_keys(store.engine)) == sorted(expected)


def proxied(url: str) -> tuple[TcpProxy, str]:
    parsed = make_url(url)
    proxy = TcpProxy((parsed.host or "127.0.0.1", parsed.port or 5432)).start()
    return proxy, parsed.set(host="127.0.0.1", port=proxy.port).render_as_string(
        hide_password=False
    )


def failures(app: Sidecar) -> float:
    return app.metrics.value(ERRORS, reason="unavailable")


@pytest.mark.postgres
def test_an_idle_postgres_outage_reads_degraded_and_keeps_last_shipped_at(
    pg_store: Store, tmp_path: Path
) -> None:
    proxy, through = proxied(pg_store.url)
    engine = create_store_engine(through)
    config = sidecar_config("idle", tmp_path / "spool", ship_interval_s=0.2, store_probe_s=0.2)
    try:
        with running_sidecar(open_writer(engine), config) as app:
            # Nothing is ever sent: the store's answers to the probe are the only round trips.
            assert wait_until(lambda: health(app)["last_shipped_at"] is not None)
            assert status(app) == "ok"
            proxy.cut()
            assert wait_until(lambda: status(app).startswith("degraded: cannot ship since"))
            before = health(app)["last_shipped_at"], app.metrics.value(LAST_SUCCESS)
            seen = failures(app)
            assert wait_until(lambda: failures(app) >= seen + 3)  # passes go on failing
            state = health(app)
            assert (state["last_shipped_at"], app.metrics.value(LAST_SUCCESS)) == before
            assert state["status"].startswith("degraded")
            assert app.spool.stats()[0] == 0
            proxy.restore()
            assert wait_until(lambda: status(app) == "ok")
            assert app.metrics.value(LAST_SUCCESS) > before[1]
    finally:
        proxy.cut()
        engine.dispose()


def test_an_away_sqlite_store_with_nothing_to_ship_reads_degraded_not_ok(
    tmp_path: Path,
) -> None:
    path = tmp_path / "not-yet" / "store.db"
    engine: Engine = create_store_engine(f"sqlite:///{path}")
    config = sidecar_config("idle-sqlite", tmp_path / "spool", ship_interval_s=0.2)
    try:
        with running_sidecar(lambda: open_writer(engine), config) as app:
            assert wait_until(lambda: status(app).startswith("degraded: cannot ship since"))
            seen = failures(app)
            assert wait_until(lambda: failures(app) >= seen + 3)
            state = health(app)
            assert state["last_shipped_at"] is None
            assert app.metrics.value(LAST_SUCCESS) == 0
            path.parent.mkdir()
            migrate.upgrade(engine)
            assert wait_until(lambda: status(app) == "ok")
            assert health(app)["last_shipped_at"] is not None
    finally:
        engine.dispose()
