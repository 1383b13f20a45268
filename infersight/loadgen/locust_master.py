"""The Locust master of an ``infersight loadtest --engine locust`` run (its own process).

    python -m loadgen.locust_master --spec SPEC.json --out RECORDS.jsonl --workers N
        [--bind 127.0.0.1] [--port 0] [--connect-timeout 60]

Locust's ``MasterRunner`` through the library, so the run is under this module's control from
start to end: it waits for ``N`` workers (and fails, not hangs, when they do not come within
``--connect-timeout``), sends each the ``RunSpec`` when it says hello, drives the phases with
a ``LoadTestShape``, and once the shape has ended and the workers stopped, waits for every
worker's final report — sent after its last results, on the same connection — before quitting.
Workers are plain ``locust --worker`` processes, so another host joins with
``locust -f loadgen/locust_user.py --worker --master-host HOST --master-port PORT``.

Workers send their per-request results as Locust custom messages; this process appends each
record to ``--out`` as it arrives (memory stays flat however long the run) and tells the CLI
what is happening as JSON lines on stdout: ``listening``, ``started``, ``progress``, ``error``,
``finished``. Messages, not per-worker files, because a worker on another host shares no disk
with the master, and the ordering of one ZeroMQ connection puts a worker's last results before
its final report, so the master knows when it has them all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Final

import gevent
from locust import LoadTestShape, events
from locust.env import Environment

from infersight.core.loadtest import Phase
from infersight.loadgen.distributed import (
    API_KEY_ENV,
    CONFIG_MSG,
    DONE_MSG,
    HELLO_MSG,
    RESULTS_MSG,
    users_at,
)
from infersight.loadgen.locust_user import OpenAIStreamUser

PROGRESS_S: Final = 0.5
SPAWN_RATE: Final = 10_000.0  # every phase's users at once, as the asyncio engine starts them


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class PhasesShape(LoadTestShape):
    """The run's phases as a Locust shape (Locust asks it once a second)."""

    def __init__(self, phases: tuple[Phase, ...]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.phases = phases

    def tick(self) -> tuple[int, float] | None:
        users = users_at(self.phases, self.get_run_time())  # type: ignore[no-untyped-call]
        return None if users is None else (users, SPAWN_RATE)


class Master:
    def __init__(self, spec: dict[str, Any], out: IO[str], workers: int) -> None:
        self.spec, self.out, self.workers = spec, out, workers
        self.records = self.errors = 0
        self.reports: dict[int, dict[str, Any]] = {}

    def on_hello(self, environment: Environment, msg: Any, **_: Any) -> None:
        assert environment.runner is not None
        environment.runner.send_message(
            CONFIG_MSG, {**self.spec, "workers": self.workers}, client_id=msg.node_id
        )

    def on_results(self, environment: Environment, msg: Any, **_: Any) -> None:
        runner = environment.runner
        assert runner is not None
        index = runner.get_worker_index(msg.node_id)  # type: ignore[attr-defined]
        for record in msg.data.get("records", ()):
            self.out.write(json.dumps([index, *record]) + "\n")
            self.records += 1
            self.errors += not record[7]
        self.out.flush()

    def on_done(self, environment: Environment, msg: Any, **_: Any) -> None:
        runner = environment.runner
        assert runner is not None
        self.reports[runner.get_worker_index(msg.node_id)] = dict(msg.data)  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--connect-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    body = json.loads(args.spec.read_text(encoding="utf-8"))
    spec = {**body["spec"], "api_key": os.environ.get(API_KEY_ENV, "")}
    phases = tuple(Phase(**p) for p in body["phases"])
    drain_s = float(body.get("drain_s", 60.0))
    with args.out.open("w", encoding="utf-8") as out:
        master = Master(spec, out, args.workers)
        env = Environment(
            user_classes=[OpenAIStreamUser],
            shape_class=PhasesShape(phases),
            events=events,
            stop_timeout=drain_s,
        )
        runner = env.create_master_runner(master_bind_host=args.bind, master_bind_port=args.port)
        runner.register_message(HELLO_MSG, master.on_hello)
        runner.register_message(RESULTS_MSG, master.on_results)
        runner.register_message(DONE_MSG, master.on_done)
        emit("listening", port=runner.server.port)
        return _drive(runner, master, args.connect_timeout, drain_s)


def _drive(runner: Any, master: Master, connect_timeout_s: float, drain_s: float) -> int:
    deadline = time.monotonic() + connect_timeout_s
    while runner.worker_count < master.workers:
        if time.monotonic() > deadline:
            emit(
                "error",
                message=f"only {runner.worker_count} of {master.workers} Locust workers "
                f"connected within {connect_timeout_s:g} s",
            )
            runner.quit()
            return 3
        gevent.sleep(0.05)
    emit("started", epoch=time.time(), workers=runner.worker_count)
    runner.start_shape()
    t0 = time.monotonic()
    while runner.shape_greenlet is not None:
        emit("progress", elapsed_s=time.monotonic() - t0, done=master.records, errors=master.errors)
        gevent.sleep(PROGRESS_S)
    # The shape stopped the workers; each sends its final report after its last results.
    expected = set(runner.worker_indexes.values())
    deadline = time.monotonic() + drain_s + 10.0
    while not expected <= set(master.reports) and time.monotonic() < deadline:
        gevent.sleep(0.05)
    missing = sorted(expected - set(master.reports))
    runner.quit()
    emit(
        "finished",
        records=master.records,
        errors=master.errors,
        workers={str(k): v for k, v in sorted(master.reports.items())},
        missing=missing,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
