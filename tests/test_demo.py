"""``infersight demo`` end to end, as a user runs it: a real process on the embedded SQLite store.

The live demo (the default) must print the dashboard's URL, have records from every simulated
instance arrive through its sidecars, fire an incident within the first minute, and stop
cleanly on Ctrl-C: exit status 0, every thread stopped, no process left behind. The virtual-time
mode (``--virtual``) plays a scenario into the store and prints a report.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
import pytest
from sqlalchemy import func, select

from storage.engine import create_store_engine
from storage.tables import gpu_samples, requests

CLI = [sys.executable, "-c", "from infersight.cli import main; main()"]
T = TypeVar("T")
INSTANCES = {"vllm-8b-0", "vllm-8b-1", "vllm-70b-0", "vllm-70b-1"}


def _children(pid: int) -> set[int]:
    """Every descendant of ``pid``, read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _lines(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def _wait_for(check: Callable[[], T], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.5)


@pytest.mark.e2e
def test_the_live_demo_fires_an_incident_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    stderr = (tmp_path / "stderr.txt").open("w")
    process = subprocess.Popen(
        [*CLI, "--store", store, "demo", "--listen", "127.0.0.1:0", "--history", "2m",
         "--first-fault", "5s"],
        stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=tmp_path,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(process.stdout, lines), daemon=True)
    reader.start()
    try:
        line = lines.get(timeout=60)
        assert line.startswith("infersight dashboard: http://127.0.0.1:"), line
        url = line.split(": ", 1)[1].strip()
        live_from = int(datetime.now(UTC).timestamp())
        client = httpx.Client(base_url=url, timeout=10)

        def live_instances() -> set[str]:
            body = client.get(
                "/api/v1/throughput", params={"start": live_from, "group_by": "instance"}
            ).json()
            return {g["labels"]["instance"] for g in body["groups"] if g["requests"] > 0}

        assert _wait_for(lambda: live_instances() == INSTANCES, 45, "records from every sidecar")

        def incidents() -> list[dict[str, Any]]:
            body: dict[str, Any] = client.get("/api/v1/incidents", params={"state": "all"}).json()
            return list(body["incidents"])

        found = _wait_for(incidents, 60, "an incident")
        # The surge on vllm-8b-0 comes first and slows the 8B model's token rate.
        assert found[0]["slo"] == "chat-8b-tpot"
        assert client.get("/metrics").status_code == 200
        client.close()
        log = tmp_path / "stderr.txt"
        _wait_for(lambda: "incident #1 opened" in log.read_text(), 30, "the incident's report")
        spawned = _children(process.pid)
    except BaseException:
        process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()
        stderr.close()
        raise
    process.send_signal(signal.SIGINT)
    try:
        assert process.wait(timeout=60) == 0, (tmp_path / "stderr.txt").read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(timeout=10)
        assert process.stdout is not None
        process.stdout.close()
        stderr.close()
    text = log.read_text()
    assert "demo stopped" in text
    assert "threads still running" not in text  # the demo names any thread outliving its stop
    assert "Traceback" not in text
    assert not [pid for pid in spawned if _alive(pid)]
    assert not _children(os.getpid()) & spawned
    assert not (tmp_path / "infersight.db").exists()  # --store was honoured


@pytest.mark.slow
def test_the_virtual_demo_plays_a_scenario_into_sqlite_and_reports_what_it_saw(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    done = subprocess.run(
        [*CLI, "--store", store, "demo", "--virtual", "--duration", "50m"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Latency per model" in out
    assert "meta-llama/Llama-3.1-8B-Instruct" in out
    assert "Where end-to-end time goes" in out
    # The first fault of the mixed incident (thermal throttling from 30 m) is inside 50 minutes;
    # the later ones are not and must not be reported.
    assert "thermal_throttle" in out
    assert "kv_pressure" not in out
    assert "stored" in done.stderr
    engine = create_store_engine(store)
    with engine.connect() as c:
        stored = c.execute(select(func.count()).select_from(requests)).scalar_one()
        gpus = c.execute(select(func.count()).select_from(gpu_samples)).scalar_one()
    engine.dispose()
    assert stored > 10_000
    assert gpus > 0


@pytest.mark.parametrize("option", ["--duration", "--first-fault"])
def test_a_bad_duration_is_refused_with_a_clear_error(tmp_path: Path, option: str) -> None:
    done = subprocess.run(
        [*CLI, "--store", f"sqlite:///{tmp_path / 'x.db'}", "demo", option, "soon"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "not a duration" in done.stderr
