"""``infersight serve --workers N`` (#19): real subprocesses, real HTTP, real PostgreSQL.

N processes serve one address (``/healthz`` says which worker answered); on PostgreSQL one of
them, the elected leader, runs the jobs; on SQLite worker 1 does; SIGTERM stops them all; a
worker that dies takes the serve down with exit status 1 and says so."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from infersight.cli.commands_serve import in_memory_sqlite, serve
from tests.conftest import fresh_database
from tests.peers import free_port
from tests.waiting import until

pytestmark = pytest.mark.e2e


def children_of(parent: int) -> set[int]:
    """The pids whose parent is ``parent`` (from ``/proc``)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Serving:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def healthz(self) -> dict[str, Any] | None:
        """One ``/healthz`` on a new connection (so any worker may take it), when it is 200."""
        try:
            answer = httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=10)
        except httpx.TransportError:
            return None
        return answer.json() if answer.status_code == 200 else None

    def by_worker(self, ready: Any = lambda _body: True) -> dict[int, dict[str, Any]]:
        """Every worker's ``/healthz`` once each has answered one that ``ready`` accepts."""
        seen: dict[int, dict[str, Any]] = {}

        def all_seen() -> bool:
            body = self.healthz()
            if body is not None and ready(body):
                seen[body["worker"]] = body
            return len(seen) == 2

        until(all_seen, "both workers answered /healthz", process=self.process)
        return seen

    def worker_pids(self) -> dict[int, int]:
        """The pids the parent said it forked, by worker."""
        line = until(
            lambda: re.search(r"with 2 workers \(pids 1: (\d+), 2: (\d+)\)", self.output()),
            "serve named its workers",
            process=self.process,
        )
        return {1: int(line.group(1)), 2: int(line.group(2))}


@contextmanager
def serving(tmp_path: Path, store_url: str, *args: str, **env: str) -> Iterator[Serving]:
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    environ = {**os.environ, "INFERSIGHT_DATABASE_URL": store_url, **env}
    command = [
        sys.executable, "-c", "from infersight.cli import main; main()",
        "serve", "--listen", f"127.0.0.1:{port}", *args,
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=environ, stdout=sink, stderr=subprocess.STDOUT)
    try:
        yield Serving(process, port, log)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def stopped(served: Serving, sig: signal.Signals = signal.SIGTERM) -> int:
    served.process.send_signal(sig)
    return served.process.wait(timeout=120)


@pytest.mark.postgres
def test_two_workers_on_postgres_share_the_address_elect_one_leader_and_stop(tmp_path):
    with (
        fresh_database() as url,
        serving(tmp_path, url, "--workers", "2", INFERSIGHT_EVALUATION_INTERVAL_S="0.2") as served,
    ):
        pids = served.worker_pids()
        assert children_of(served.process.pid) == set(pids.values())
        # Requests land on both processes, each of which migrated (one at a time) or found
        # the store migrated, and schedules the jobs; the leader lock lets one evaluate.
        health = served.by_worker()
        assert set(health) == {1, 2}

        def evaluated() -> dict[int, dict[str, Any]] | None:
            by_worker = served.by_worker()
            total = sum(body["jobs"]["evaluate"] for body in by_worker.values())
            return by_worker if total >= 3 else None

        runs = until(evaluated, "the leader evaluated a few times", process=served.process)
        leaders = [worker for worker, body in runs.items() if body["jobs"]["evaluate"] > 0]
        assert len(leaders) == 1, runs
        assert "Application startup complete" in served.output()
        code = stopped(served)
        output = served.output()
    assert code == 0, output
    assert "SIGTERM: stopping 2 workers" in output
    assert output.count("Application shutdown complete") == 2, output
    assert not any(alive(pid) for pid in pids.values())


def test_sqlite_workers_run_the_jobs_in_worker_1_only_and_stop_on_ctrl_c(tmp_path):
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    with serving(tmp_path, url, "--workers", "2", INFERSIGHT_EVALUATION_INTERVAL_S="0.2") as served:
        health = served.by_worker(lambda body: body["worker"] == 2 or body["jobs"]["evaluate"] > 0)
        assert health[1]["jobs"]["evaluate"] >= 1
        assert health[2]["jobs"]["evaluate"] == 0  # its scheduler never started
        assert "worker 1 runs the jobs" in served.output()
        code = stopped(served, signal.SIGINT)  # Ctrl-C
    output = served.output()
    assert code == 0, output
    assert "SIGINT: stopping 2 workers" in output
    assert output.count("Application shutdown complete") == 2, output


def test_a_worker_that_dies_is_reported_and_stops_the_serve(tmp_path):
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    with serving(tmp_path, url, "--workers", "2", "--no-jobs") as served:
        pids = served.worker_pids()
        served.by_worker()
        os.kill(pids[2], signal.SIGKILL)
        code = served.process.wait(timeout=120)
        output = served.output()
    assert code == 1, output
    assert f"worker 2 (pid {pids[2]}) was killed by SIGKILL; stopping the others" in output
    assert not alive(pids[1])


def test_an_in_memory_sqlite_store_is_refused_with_more_workers(tmp_path):
    with serving(tmp_path, "sqlite://", "--workers", "2") as served:
        code = served.process.wait(timeout=120)
    assert code == 2
    assert "in-memory SQLite store lives in one process" in served.output()
    assert in_memory_sqlite("sqlite:///:memory:")
    assert in_memory_sqlite("sqlite:///file:x?mode=memory&uri=true")
    assert not in_memory_sqlite(f"sqlite:///{tmp_path / 'a.db'}")
    assert not in_memory_sqlite("postgresql+psycopg://db/x")


@pytest.mark.parametrize("workers", ["0", "65", "two"])
def test_a_bad_worker_count_is_a_usage_error(workers):
    result = CliRunner().invoke(serve, ["--workers", workers])
    assert result.exit_code == 2
    assert "--workers" in result.output
