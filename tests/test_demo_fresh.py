"""``infersight demo`` twice in one directory (issue 35, item 10).

The second run found the first one's requests in the store: it skipped the backfill, captured
its ``demo-healthy`` baseline over the first run's faults and announced incidents still open
from before as new. A demo now plays into a store of its own: a store that holds data is
refused with what it holds and the way on, ``--fresh`` moves a SQLite store aside (kept, renamed
with the time) and starts anew, and a PostgreSQL store is never moved or emptied.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import func, select

from infersight.storage import migrate
from infersight.storage.creation import creating
from infersight.storage.engine import create_store_engine
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
        assert "infersight demo --fresh" in done.stderr
        assert "backfilling" not in done.stderr  # nothing was played
    assert _count(url) == 120
    assert (tmp_path / "infersight.db").exists()
    assert not list(tmp_path.glob("infersight.db.*"))  # nothing moved aside unasked


def test_fresh_moves_the_old_store_aside_and_plays_into_a_new_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'infersight.db'}"
    _fill(url)
    done = _demo(
        tmp_path, "--store", url, "demo", "--virtual", "--fresh",
        "--duration", "2m", "--end", "2026-06-01T12:00:00Z",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("infersight.db.")
                and not p.name.endswith(("-wal", "-shm"))]  # fmt: skip
    assert "moved the previous store (120 requests" in done.stderr
    assert str(aside) in done.stderr
    assert _count(f"sqlite:///{aside}") == 120  # kept, whole
    assert _count(url, before=datetime(2026, 1, 1, tzinfo=UTC)) == 0  # none of it mixed in
    assert _count(url) > 0  # the new demo's own
    # Fresh on an empty store is no move at all.
    again = tmp_path / "other.db"
    done = _demo(
        tmp_path, "--store", f"sqlite:///{again}", "demo", "--virtual", "--fresh",
        "--duration", "1m", "--end", "2026-06-01T12:00:00Z",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "moved the previous store" not in done.stderr


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
