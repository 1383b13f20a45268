"""``infersight demo`` twice in one directory (issue 35, item 10).

The second run found the first one's requests in the store: it skipped the backfill, captured
its ``demo-healthy`` baseline over the first run's faults and announced incidents still open
from before as new. A demo now plays into a store of its own: a store that holds data is
refused with what it holds and the way on, ``--fresh`` moves a SQLite store aside (kept, renamed
with the time) and starts anew, and a PostgreSQL store is never moved or emptied.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from infersight.cli.demo_store import held, sqlite_path
from infersight.core.errors import InvalidInput
from infersight.storage import migrate
from infersight.storage.creation import creating
from infersight.storage.engine import StoreTimeouts, create_store_engine, sqlite_file
from infersight.storage.sql_store import SqlStore
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

CLI = [sys.executable, "-c", "from infersight.cli import main; main()"]
#: Far from the demo's own traffic, so the old requests are told apart from new ones.
OLD = datetime(2025, 1, 6, 12, tzinfo=UTC)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.upper().startswith("INFERSIGHT_")}


def _demo(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, env=_env(), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def _fill(url: str, count: int = 120) -> None:
    with creating(True):
        engine = create_store_engine(url)
        try:
            migrate.upgrade(engine)
            records = make_records(np.random.default_rng(5), OLD, count, span=timedelta(minutes=5))
            open_writer(engine).write_requests(records)
        finally:
            engine.dispose()


def _count(url: str, before: datetime | None = None) -> int:
    engine = create_store_engine(url)
    try:
        query = select(func.count()).select_from(requests)
        if before is not None:
            query = query.where(requests.c.start < before)
        with engine.connect() as connection:
            return int(connection.execute(query).scalar_one())
    finally:
        engine.dispose()


def test_a_second_demo_on_the_same_store_is_refused_with_the_way_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'infersight.db'}"
    _fill(url)
    for args in (
        ["demo", "--listen", "127.0.0.1:0", "--duration", "5s"],
        ["demo", "--virtual", "--duration", "2m"],
    ):
        done = _demo(tmp_path, "--store", url, *args, timeout=120)
        assert done.returncode == 2, done.stderr
        assert "already holds 120 requests (2025-01-06 12:00" in done.stderr
        # not a demo's store: --fresh would not move it, so it is not offered
        assert "give the demo another --store (--fresh moves aside only a store a demo" in (
            done.stderr
        )
        assert "backfilling" not in done.stderr  # nothing was played
    assert _count(url) == 120
    assert (tmp_path / "infersight.db").exists()
    assert not list(tmp_path.glob("infersight.db.*"))  # nothing moved aside unasked


def _virtual(cwd: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return _demo(
        cwd, "--store", url, "demo", "--virtual", *extra,
        "--duration", "1m", "--end", "2026-06-01T12:00:00Z",
    )  # fmt: skip


def _aside(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith("infersight.db.")
            and not p.name.endswith(("-wal", "-shm", "-journal"))]  # fmt: skip


def test_fresh_moves_a_demos_old_store_aside_and_plays_into_a_new_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'infersight.db'}"
    first = _virtual(tmp_path, url)
    assert first.returncode == 0, first.stderr
    played = _count(url)
    assert played > 0
    again = _virtual(tmp_path, url)  # a second demo without --fresh: refused, offered --fresh
    assert again.returncode == 2, again.stderr
    assert "infersight demo --fresh moves it aside" in again.stderr
    done = _virtual(tmp_path, url, "--fresh")
    assert done.returncode == 0, done.stderr
    (aside,) = _aside(tmp_path)
    assert f"moved the previous store ({played:,} requests" in done.stderr
    assert str(aside) in done.stderr
    assert _count(f"sqlite:///{aside}") == played  # kept, whole
    assert _count(url) > 0  # the new demo's own
    # Fresh on an empty store is no move at all.
    other = _virtual(tmp_path, f"sqlite:///{tmp_path / 'other.db'}", "--fresh")
    assert other.returncode == 0, other.stderr
    assert "moved the previous store" not in other.stderr


def test_fresh_never_moves_a_store_no_demo_created(tmp_path: Path) -> None:
    """Someone's real store (here: one a writer filled) is refused even with --fresh."""
    url = f"sqlite:///{tmp_path / 'infersight.db'}"
    _fill(url)
    done = _virtual(tmp_path, url, "--fresh")
    assert done.returncode == 2, done.stderr
    assert "--fresh moves aside only a store a demo created" in done.stderr
    assert "nothing was moved" in done.stderr
    assert not _aside(tmp_path)
    assert _count(url) == 120


HOLDER = """
import sqlite3, sys, time
connection = sqlite3.connect(sys.argv[1])
connection.execute("PRAGMA journal_mode=WAL")
connection.execute("SELECT count(*) FROM requests").fetchone()
print("open", flush=True)
sys.stdin.read()  # held open (idle, as a serve's pool holds it) until told to go
"""


def test_fresh_never_moves_a_demo_store_another_process_has_open(tmp_path: Path) -> None:
    """A serve on another port (or a sidecar) holding the demo's old store: renaming a SQLite
    file in use can lose what that process writes next, so the move is refused."""
    path = tmp_path / "infersight.db"
    url = f"sqlite:///{path}"
    first = _virtual(tmp_path, url)
    assert first.returncode == 0, first.stderr
    played = _count(url)
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    ) as holder:  # fmt: skip
        assert holder.stdin is not None
        assert holder.stdout is not None
        try:
            assert holder.stdout.readline().strip() == "open"
            done = _virtual(tmp_path, url, "--fresh")
            assert done.returncode == 2, done.stderr
            assert "another process has it open" in done.stderr
            assert "nothing was moved" in done.stderr
            assert not _aside(tmp_path)
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
    assert _count(url) == played
    done = _virtual(tmp_path, url, "--fresh")  # let go: now it moves
    assert done.returncode == 0, done.stderr
    (aside,) = _aside(tmp_path)
    assert _count(f"sqlite:///{aside}") == played


def test_a_locked_store_is_refused_not_taken_for_empty(tmp_path: Path) -> None:
    """ "database is locked" is not "no schema": a store another process holds locked is
    refused with the reason, never counted as empty (and so played into)."""
    path = tmp_path / "infersight.db"
    url = f"sqlite:///{path}"
    _fill(url)
    locker = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        locker.execute("PRAGMA journal_mode=DELETE")
        locker.execute("BEGIN EXCLUSIVE")
        engine = create_store_engine(url, timeouts=StoreTimeouts(sqlite_busy_s=0.2))
        try:
            with pytest.raises(InvalidInput, match="cannot tell what the store") as raised:
                held(SqlStore(engine))
            assert "locked" in str(raised.value)
        finally:
            engine.dispose()
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    engine = create_store_engine(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        assert held(SqlStore(engine)).empty  # no schema at all: empty
    finally:
        engine.dispose()


def test_the_demo_reads_a_sqlite_url_as_the_engine_does() -> None:
    assert sqlite_path("sqlite:///x.db") == sqlite_file("sqlite:///x.db") == Path("x.db")
    for url in ("sqlite:///x.db?uri=true", "sqlite:///file:x.db", "sqlite://", "postgresql://h/d"):
        assert sqlite_path(url) is None, url


def test_a_postgresql_store_with_data_is_refused_and_never_moved(store: Store, tmp_path) -> None:
    if not store.url.startswith("postgresql"):
        pytest.skip("the PostgreSQL case")
    open_writer(store.engine).write_requests(
        make_records(np.random.default_rng(6), OLD, 10, span=timedelta(minutes=1))
    )
    held = _count(store.url)
    for extra in ([], ["--fresh"]):
        done = _demo(tmp_path, "--store", store.url, "demo", "--virtual", "--duration", "1m",
                     *extra, timeout=120)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "empty database" in done.stderr
    assert _count(store.url) == held
