"""The PgBouncer the store's tests and ``bench_fleet`` run behind (``bench.harness.pgbouncer``):
a real process in transaction pooling mode, ready when it says so, gone when stopped (#19)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from bench.harness.pgbouncer import PgBouncer, binary, running_pgbouncer
from tests.conftest import POSTGRES_ADMIN_URL

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        binary() is None and not os.environ.get("CI"),
        reason="pgbouncer is not installed (Debian package: pgbouncer)",
    ),
]


def _connect(bouncer: PgBouncer) -> psycopg.Connection[tuple[object, ...]]:
    url = make_url(bouncer.url)
    return psycopg.connect(
        host=url.host, port=url.port, dbname=url.database, user=url.username, autocommit=False
    )


def test_clients_share_one_server_connection_between_transactions() -> None:
    with running_pgbouncer(POSTGRES_ADMIN_URL, pool_size=1) as bouncer:
        assert make_url(bouncer.url).port == bouncer.port
        assert make_url(bouncer.store_url).query["pooler"] == "transaction"
        with _connect(bouncer) as first, _connect(bouncer) as second:
            pids = set()
            for client in (first, second, first, second):
                pids.add(client.execute("SELECT pg_backend_pid()").fetchone())
                client.commit()
        # Two clients open at once, one server process: pooled per transaction, not session.
        assert len(pids) == 1
        pools = [row for row in bouncer.show("POOLS") if row["database"] != "pgbouncer"]
        assert [row["pool_mode"] for row in pools] == ["transaction"]
        assert any(row["total_xact_count"] >= 4 for row in bouncer.show("STATS"))


def test_stopping_frees_the_port_and_the_folder() -> None:
    with running_pgbouncer(POSTGRES_ADMIN_URL) as bouncer:
        folder: Path = bouncer.folder
        port = bouncer.port
        assert folder.is_dir()
    assert bouncer.process.poll() is not None
    assert not folder.exists()
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", port))


def test_a_bad_pool_mode_is_refused_before_anything_starts() -> None:
    with (
        pytest.raises(ValueError, match="pool mode"),
        running_pgbouncer(POSTGRES_ADMIN_URL, pool_mode="sometimes"),
    ):
        pass
