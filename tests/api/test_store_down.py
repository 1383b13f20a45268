"""The store down when a command starts: ``db upgrade`` fails with one line and its own exit
status; ``serve`` listens anyway, reports degraded until the store answers, then migrates and
runs its jobs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from infersight.storage import migrate
from tests.collector.tcp_proxy import TcpProxy
from tests.peers import free_port
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from infersight.cli import main; main()"]
EXIT_UNAVAILABLE = 3


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def wait_until(predicate: Callable[[], object]) -> bool:
    """Waits on the event, however long a loaded machine takes (pytest-timeout guards)."""
    return bool(until(predicate, "the awaited state"))


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("postgresql://postgres:s3cret@127.0.0.1:{port}/nothing", id="postgres"),
        pytest.param("sqlite:///{tmp}/no/such/dir/store.db", id="sqlite"),
    ],
)
@pytest.mark.parametrize("command", [["db", "upgrade"], ["db", "current"], ["db", "maintain"]])
def test_a_db_command_against_an_unreachable_store_says_so_in_one_line(
    tmp_path: Path, url: str, command: list[str]
) -> None:
    store = url.format(port=free_port(), tmp=tmp_path)
    result = run_cli("--store", store, *command)
    assert result.returncode == EXIT_UNAVAILABLE
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: cannot reach the store ")
    assert "s3cret" not in result.stderr  # the password is redacted
    assert "Traceback" not in result.stderr + result.stdout


def fetch_health(base: str) -> httpx.Response | None:
    try:
        return httpx.get(f"{base}/healthz", timeout=5)
    except httpx.TransportError:
        return None


@pytest.mark.e2e
@pytest.mark.postgres
def test_serve_waits_for_a_store_that_is_down_at_start_then_runs_its_jobs(pg_store) -> None:
    url = make_url(pg_store.url)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432)).start()
    proxy.cut()
    store = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = subprocess.Popen(
        [*CLI, "--store", store, "serve", "--listen", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "INFERSIGHT_EVALUATION_INTERVAL_S": "0.2"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert wait_until(lambda: fetch_health(base) is not None)
        seen: list[str] = []

        def waiting() -> bool:
            # Before the gate's first attempt has failed (migrations import Alembic first, slow
            # on a loaded host) it says it is starting; then that it waits for the store.
            health = fetch_health(base)
            if health is None:
                return False
            assert health.status_code == 503
            seen.append(health.json()["status"])
            return seen[-1].startswith("degraded: waiting for the store since ")

        assert wait_until(waiting)
        assert set(seen[:-1]) <= {"degraded: starting"}, seen
        down = fetch_health(base)
        assert down is not None
        assert down.status_code == 503
        assert down.json()["jobs"]["evaluate"] == 0
        query = httpx.get(f"{base}/api/v1/slos", timeout=10)
        assert query.status_code == 503
        assert query.json()["error"]["code"] == "unavailable"
        proxy.restore()

        def serving() -> bool:
            health = fetch_health(base)
            return (
                health is not None
                and health.status_code == 200
                and (health.json()["jobs"]["evaluate"] >= 1)
            )

        assert wait_until(serving)
        assert migrate.current(pg_store.engine) == migrate.head()
        assert httpx.get(f"{base}/api/v1/slos", timeout=10).status_code == 200
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
        proxy.cut()
    assert "Traceback" not in output, output
    assert "the store cannot be reached, retrying" in output
