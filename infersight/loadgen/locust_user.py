"""A Locust user for OpenAI-compatible streaming endpoints, measured as ``loadgen`` measures.

This file is a locustfile: ``infersight loadtest --engine locust`` starts its workers with
``locust -f loadgen/locust_user.py --worker --master-host …``, and a worker on another host
joins the same run with that same command (``infersight loadtest`` prints it). Importing it
imports Locust, which patches the standard library with gevent: only Locust processes do.

Each user is a closed-loop user with no think time, as the asyncio engine's: it sends a
request, reads the whole stream, records it, and sends the next. A request is
``loadgen.client.send_sync`` — the same body, ``traceparent`` and ``core.streaming`` timing
as the asyncio engine's ``send``, on a blocking httpx client that gevent makes cooperative
(one connection per user, kept alive). Each request fires Locust's ``request`` event with
E2E as the response time, the output tokens as the length and TTFT / TPOT in the context,
so Locust's own statistics work; its result goes into a buffer the worker sends to the
master every ``FLUSH_S`` seconds (and at the end of the test) as a custom message.

Users wait for the run's ``RunSpec``, which the master sends to each worker that says hello
when it starts; a worker whose master never answers fails its users after ``CONFIG_WAIT_S``.
"""

from __future__ import annotations

import random
import ssl
import time
from typing import Any, Final

import gevent
import httpx
import numpy as np
from gevent.event import Event
from locust import User, constant, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner

from infersight.core.loadtest import RequestResult
from infersight.loadgen.client import Endpoint, send_sync
from infersight.loadgen.distributed import (
    CONFIG_MSG,
    DONE_MSG,
    HELLO_MSG,
    RESULTS_MSG,
    RunSpec,
    encode,
)
from infersight.loadgen.monitor import judge
from infersight.loadgen.workload import Workload, prompt

FLUSH_S: Final = 0.5
FLUSH_RECORDS: Final = 500
CONFIG_WAIT_S: Final = 30.0
LAG_INTERVAL_S: Final = 0.05
#: Lag samples kept (a uniform reservoir past that: a day's run samples 1.7 million times).
MAX_LAGS: Final = 100_000


class _Worker:
    """This worker process's side of the run: its spec, workload, result buffer and sampler."""

    def __init__(self, runner: WorkerRunner) -> None:
        self.runner = runner
        self.ready = Event()
        self.spec: RunSpec | None = None
        self.endpoint: Endpoint | None = None
        self.workload: Workload | None = None
        self.rng = np.random.default_rng()
        self.tls: ssl.SSLContext | None = None
        self.buffer: list[list[Any]] = []
        self.sent = self.errors = 0
        self.lags: list[float] = []
        self.samples = 0
        self.lag_max = 0.0
        self._greenlets: list[gevent.Greenlet] = []
        self._wall0 = self._cpu0 = 0.0

    def on_config(self, environment: Environment, msg: Any, **_: Any) -> None:
        if self.ready.is_set():  # a second answer to a second hello: keep the workload going
            return
        spec = RunSpec.from_dict(msg.data)
        index = self.runner.worker_index
        workers = int(msg.data.get("workers", 1))
        self.rng = spec.rng(index)
        self.spec, self.endpoint = spec, spec.endpoint()
        # One TLS context for every user: building one (the CA bundle read and parsed) takes
        # tens of milliseconds of CPU, which would stall this worker's loop once per user.
        self.tls = httpx.create_ssl_context()
        self.workload = spec.workload(index, workers, self.rng)
        self.ready.set()

    def hello(self) -> None:
        self.runner.send_message(HELLO_MSG, {"worker": self.runner.worker_index})

    def record(self, sent_epoch: float, result: RequestResult) -> None:
        self.buffer.append(encode(result, sent_epoch))
        self.errors += not result.ok
        if len(self.buffer) >= FLUSH_RECORDS:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            batch, self.buffer = self.buffer, []
            self.sent += len(batch)
            self.runner.send_message(RESULTS_MSG, {"records": batch})

    def start(self) -> None:
        self._wall0, self._cpu0 = time.perf_counter(), time.process_time()
        self.lags.clear()
        self.samples, self.lag_max = 0, 0.0
        self._greenlets = [gevent.spawn(self._flusher), gevent.spawn(self._sampler)]

    def stop(self) -> None:
        gevent.killall(self._greenlets, block=True)
        self._greenlets = []
        self.flush()
        wall = time.perf_counter() - self._wall0
        lags = sorted(self.lags)
        report = judge(
            samples=self.samples,
            lag_p99_s=lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else 0.0,
            lag_max_s=self.lag_max,
            cpu_share=(time.process_time() - self._cpu0) / wall if wall > 0 else 0.0,
            who=f"Locust worker {self.runner.worker_index}",
        )
        # After the last results on the same socket: the master reads them in order.
        self.runner.send_message(
            DONE_MSG,
            {
                "worker": self.runner.worker_index,
                "requests": self.sent,
                "errors": self.errors,
                "generator": report.to_dict(),
                "warnings": report.warnings,
            },
        )

    def _flusher(self) -> None:
        while True:
            gevent.sleep(FLUSH_S)
            self.flush()

    def _sampler(self) -> None:
        while True:
            due = time.perf_counter() + LAG_INTERVAL_S
            gevent.sleep(LAG_INTERVAL_S)
            lag = max(0.0, time.perf_counter() - due)
            self.samples += 1
            self.lag_max = max(self.lag_max, lag)
            if len(self.lags) < MAX_LAGS:
                self.lags.append(lag)
            elif (slot := random.randrange(self.samples)) < MAX_LAGS:  # noqa: S311 — sampling
                self.lags[slot] = lag


_worker: _Worker | None = None


def _on_init(environment: Environment, runner: Any = None, **_: Any) -> None:
    global _worker  # noqa: PLW0603 — one worker side per Locust process
    if isinstance(runner, WorkerRunner):
        _worker = _Worker(runner)
        runner.register_message(CONFIG_MSG, _worker.on_config)
        _worker.hello()


def _on_test_start(environment: Environment, **_: Any) -> None:
    if _worker is not None:
        _worker.start()


def _on_test_stop(environment: Environment, **_: Any) -> None:
    if _worker is not None:
        _worker.stop()


events.init.add_listener(_on_init)  # type: ignore[no-untyped-call]
events.test_start.add_listener(_on_test_start)  # type: ignore[no-untyped-call]
events.test_stop.add_listener(_on_test_stop)  # type: ignore[no-untyped-call]


class OpenAIStreamUser(User):
    """One closed-loop client of a streaming chat or completions endpoint."""

    wait_time = constant(0)

    def on_start(self) -> None:
        worker = _worker
        if worker is None:
            raise StopUser("OpenAIStreamUser runs in an `infersight loadtest --engine locust` run")
        if not worker.ready.is_set():
            worker.hello()  # the first hello may have gone before the master listened
        if not worker.ready.wait(CONFIG_WAIT_S):
            raise StopUser(f"the master sent no run configuration in {CONFIG_WAIT_S:g} s")
        assert worker.spec is not None
        timeout = httpx.Timeout(worker.spec.timeout_s, connect=min(worker.spec.timeout_s, 30.0))
        self._client = httpx.Client(
            timeout=timeout,
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            verify=worker.tls or True,
        )

    def on_stop(self) -> None:
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    @task
    def stream(self) -> None:
        worker = _worker
        assert worker is not None
        assert worker.workload is not None
        assert worker.endpoint is not None
        shape = worker.workload.next()
        sent_epoch, result = send_sync(
            self._client,
            worker.endpoint,
            prompt(shape.input_tokens, worker.rng),
            input_tokens=shape.input_tokens,
            max_tokens=shape.output_tokens,
        )
        self.environment.events.request.fire(
            request_type="POST",
            name="/v1/chat/completions" if worker.endpoint.chat else "/v1/completions",
            response_time=result.e2e_s * 1e3,
            response_length=result.output_tokens,
            exception=None if result.ok else RuntimeError(result.error),
            context={
                "ttft_ms": None if result.ttft_s is None else result.ttft_s * 1e3,
                "tpot_ms": None if result.tpot_s is None else result.tpot_s * 1e3,
                "trace_id": result.trace_id,
            },
        )
        worker.record(sent_epoch, result)
