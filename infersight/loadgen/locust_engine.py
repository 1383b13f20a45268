"""``infersight loadtest --engine locust``: a Locust master and workers as processes, one run.

The CLI process never imports Locust (it patches the standard library with gevent): it checks
the target with the asyncio engine's preflight request, writes the run's spec for the master
(``loadgen.locust_master``, without the API key, which goes through the environment), starts
it, then ``workers`` plain ``locust --worker`` processes pointed at it; ``remote_workers`` more
are expected to join from other hosts with the command ``join_command`` returns. It follows
the master's JSON lines on a reader thread (progress, errors), watches that every local worker
is alive until the run starts — a worker that cannot start or connect fails the run at once,
with the tail of its log, instead of leaving the master waiting — and at the end merges the
records the master wrote into one ``LoadTestRun``, with each worker's share and self-monitor
report in its config. Every process it started is stopped on the way out, whatever happened.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

import httpx
import numpy as np

from infersight.core.errors import InvalidInput, Unavailable
from infersight.core.loadtest import LoadTestRun, Phase, ScenarioKind
from infersight.loadgen.distributed import API_KEY_ENV, RunSpec, check_workers, merge, phase_at
from infersight.loadgen.progress import NoProgress, Progress
from infersight.loadgen.runner import preflight

LOCUSTFILE: Final = Path(__file__).with_name("locust_user.py")
LOG_TAIL_CHARS: Final = 2000
STOP_WAIT_S: Final = 15.0
#: How long the master may take to import Locust and listen (seconds on a loaded host).
STARTUP_S: Final = 120.0


def require_locust() -> None:
    """``Unavailable`` naming the extra to install when Locust is not there."""
    if importlib.util.find_spec("locust") is None:
        raise Unavailable(
            "the Locust engine needs Locust, which is not installed",
            details={"install": "pip install 'infersight[locust]'"},
        )


def join_command(host: str, port: int) -> str:
    return f"locust -f {LOCUSTFILE} --worker --master-host {host} --master-port {port}"


def _tail(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return text[-LOG_TAIL_CHARS:]


class LocustEngine:
    def __init__(
        self,
        phases: Sequence[Phase],
        spec: RunSpec,
        *,
        workers: int = 2,
        remote_workers: int = 0,
        bind: str = "127.0.0.1",
        port: int = 0,
        progress: Progress | None = None,
        notice: Callable[[str], None] = lambda _line: None,
        drain_s: float = 60.0,
        connect_timeout_s: float = 60.0,
        python: str = sys.executable,
    ) -> None:
        check_workers(workers, remote_workers)
        if not 0 <= port <= 65535:
            raise InvalidInput("the master port is in [0, 65535] (0: any free port)")
        self._phases, self._spec = tuple(phases), spec
        self._workers, self._remote = workers, remote_workers
        self._bind, self._port = bind, port
        self._progress = progress or NoProgress()
        self._notice = notice
        self._drain, self._connect_timeout = drain_s, connect_timeout_s
        self._python = python
        self._procs: list[subprocess.Popen[Any]] = []
        self._logs: list[Path] = []

    def run(
        self, *, name: str, scenario: ScenarioKind, config: Mapping[str, Any] | None = None
    ) -> LoadTestRun:
        require_locust()
        self._preflight()
        with tempfile.TemporaryDirectory(prefix="infersight-locust-") as tmp:
            try:
                t0, finished = self._drive(Path(tmp))
            finally:
                self._stop_all()
                self._progress.close()
            merged = merge(Path(tmp) / "records.jsonl", t0, self._phases)
        reports = finished.get("workers", {})
        warnings = [w for r in reports.values() for w in r.get("warnings", ())]
        for index in finished.get("missing", ()):
            warnings.append(f"Locust worker {index} sent no final report: its last results lost")
        if merged.dropped:
            total = merged.dropped + len(merged.results)
            warnings.append(f"the run kept its first {len(merged.results)} requests of {total}")
        if merged.bad:
            warnings.append(f"{merged.bad} records from the workers could not be read")
        generator = _generator(reports)
        locust = {
            "workers": self._workers,
            "remote_workers": self._remote,
            "requests_per_worker": {str(k): v for k, v in sorted(merged.per_worker.items())},
        }
        endpoint = self._spec.endpoint()
        return LoadTestRun(
            name=name,
            scenario=scenario,
            target=endpoint.display_url,
            model=endpoint.model,
            started_at=datetime.fromtimestamp(t0, UTC),
            phases=self._phases,
            results=tuple(merged.results),
            warnings=tuple(warnings),
            config={**(config or {}), "engine": "locust", "locust": locust, "generator": generator},
        )

    def _preflight(self) -> None:
        async def check() -> None:
            timeout = httpx.Timeout(self._spec.timeout_s, connect=min(self._spec.timeout_s, 30.0))
            async with httpx.AsyncClient(timeout=timeout) as client:
                await preflight(client, self._spec.endpoint(), np.random.default_rng())

        asyncio.run(check())

    def _spawn(self, argv: list[str], log: Path, **kwargs: Any) -> subprocess.Popen[Any]:
        self._logs.append(log)
        with log.open("w", encoding="utf-8") as stderr:
            proc = subprocess.Popen(argv, stderr=stderr, **kwargs)  # noqa: S603 — our own argv
        self._procs.append(proc)
        return proc

    def _drive(self, tmp: Path) -> tuple[float, dict[str, Any]]:
        spec = {k: v for k, v in self._spec.to_dict().items() if k != "api_key"}
        body = {"spec": spec, "phases": [_phase(p) for p in self._phases], "drain_s": self._drain}
        spec_path = tmp / "spec.json"
        spec_path.write_text(json.dumps(body), encoding="utf-8")
        env = {**os.environ, API_KEY_ENV: self._spec.api_key}
        master_log = tmp / "master.log"
        master = self._spawn(
            [
                self._python,
                "-m",
                "infersight.loadgen.locust_master",
                "--spec",
                str(spec_path),
                "--out",
                str(tmp / "records.jsonl"),
                "--workers",
                str(self._workers + self._remote),
                "--bind",
                self._bind,
                "--port",
                str(self._port),
                "--connect-timeout",
                str(self._connect_timeout),
            ],
            master_log,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert master.stdout is not None
        lines = _reader(master.stdout)
        listening = self._next(lines, master, master_log, "listening", STARTUP_S)
        port = int(listening["port"])
        wildcard = self._bind in ("", "*", "0.0.0.0", "::")  # noqa: S104 — compared, not bound
        host = "127.0.0.1" if wildcard else self._bind
        workers = [
            self._spawn(
                [
                    self._python,
                    "-m",
                    "locust",
                    "-f",
                    str(LOCUSTFILE),
                    "--worker",
                    "--master-host",
                    host,
                    "--master-port",
                    str(port),
                ],
                tmp / f"worker-{i}.log",
                stdout=subprocess.DEVNULL,
                env=env,
            )
            for i in range(self._workers)
        ]
        if self._remote:
            self._notice(
                f"waiting for {self._remote} more Locust worker(s): on each host run "
                f"`{join_command('<this host>', port)}`"
            )
        started = self._next(lines, master, master_log, "started", None, workers)
        t0 = float(started["epoch"])
        finished = self._follow(lines, master, master_log, t0)
        return t0, finished

    def _next(
        self,
        lines: queue.Queue[dict[str, Any] | None],
        master: subprocess.Popen[Any],
        log: Path,
        event: str,
        timeout_s: float | None,
        workers: Sequence[subprocess.Popen[Any]] = (),
    ) -> dict[str, Any]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while deadline is None or time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.1)
            except queue.Empty:
                self._check_alive(workers)
                continue
            if line is None:
                raise Unavailable("the Locust master exited", details={"log": _tail(log)})
            if line.get("event") == "error":
                raise Unavailable(str(line.get("message")), details={"log": _tail(log)})
            if line.get("event") == event:
                return line
        raise Unavailable(
            f"the Locust master did not report {event!r} in time", details={"log": _tail(log)}
        )

    def _check_alive(self, workers: Sequence[subprocess.Popen[Any]]) -> None:
        for i, worker in enumerate(workers):
            if worker.poll() is not None:
                raise Unavailable(
                    f"Locust worker {i} exited before the run started",
                    details={"log": _tail(self._logs[i + 1])},
                )

    def _follow(
        self,
        lines: queue.Queue[dict[str, Any] | None],
        master: subprocess.Popen[Any],
        log: Path,
        t0: float,
    ) -> dict[str, Any]:
        # The master ends the shape, waits for the workers to stop (Locust gives them the
        # drain time and a minute more) and for their reports: past all that it is stuck.
        deadline = time.monotonic() + self._phases[-1].end_s + 2 * self._drain + 180.0
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise Unavailable(
                    "the Locust master did not finish the run in time", details={"log": _tail(log)}
                ) from None
            if line is None:
                raise Unavailable("the Locust master exited mid-run", details={"log": _tail(log)})
            match line.get("event"):
                case "progress":
                    elapsed = float(line["elapsed_s"])
                    label = self._phases[phase_at(self._phases, elapsed)].label
                    self._progress.update(elapsed, label, int(line["done"]), int(line["errors"]))
                case "error":
                    raise Unavailable(str(line.get("message")), details={"log": _tail(log)})
                case "finished":
                    return line

    def _stop_all(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + STOP_WAIT_S
        for proc in self._procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def _reader(stream: IO[str]) -> queue.Queue[dict[str, Any] | None]:
    """The master's JSON lines on a queue (``None`` when it closed its stdout)."""
    lines: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def read() -> None:
        for raw in stream:
            try:
                line = json.loads(raw)
            except ValueError:
                continue  # not ours (a library printing to stdout)
            if isinstance(line, dict):
                lines.put(line)
        lines.put(None)

    threading.Thread(target=read, name="locust-master-lines", daemon=True).start()
    return lines


def _phase(p: Phase) -> dict[str, Any]:
    return {
        "index": p.index,
        "label": p.label,
        "concurrency": p.concurrency,
        "start_s": p.start_s,
        "duration_s": p.duration_s,
    }


def _generator(reports: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The asyncio engine's generator figures, the worst worker's, with every worker's own."""
    gens = [r.get("generator", {}) for r in reports.values()]
    return {
        "engine": "locust",
        "samples": sum(int(g.get("samples", 0)) for g in gens),
        "loop_lag_p99_s": max((float(g.get("loop_lag_p99_s", 0)) for g in gens), default=0.0),
        "loop_lag_max_s": max((float(g.get("loop_lag_max_s", 0)) for g in gens), default=0.0),
        "cpu_share": max((float(g.get("cpu_share", 0)) for g in gens), default=0.0),
        "workers": {
            k: {
                "requests": r.get("requests", 0),
                "errors": r.get("errors", 0),
                **r.get("generator", {}),
            }
            for k, r in reports.items()
        },
    }
