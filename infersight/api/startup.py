"""Waiting for the store at start-up: ``infersight serve`` comes up whether or not its store
answers, and says so.

``StoreGate`` runs the start-up work that needs the store (the migrations) in a thread,
retrying with backoff (1 s, doubling, at most 30 s) while the store cannot be reached, each
failure logged as one line; once it succeeds it calls ``on_ready`` (which starts the scheduled
jobs). Until then ``/healthz`` answers 503 ``"degraded: waiting for the store since …"``.

After that, ``/healthz`` answers from memory and never touches the store itself: a ``StoreProbe``
reads the request tables (``store.maintenance.probe``: ``SELECT … LIMIT 0``, which waits on their
locks like a query would) in a thread of its own, at most once every ``PROBE_INTERVAL_S``, kicked
off by the health requests; the handler runs on the event loop (not in the thread pool that blocked
readers fill) and waits at most ``PROBE_WAIT_S`` for a probe it started. A probe still waiting
after ``SLOW_AFTER_S``, or cut short by a store timeout, is ``"degraded: store slow (…)"`` with how
long it has waited; a failed one ``"degraded: the store is unreachable (…)"``. Both answer 503
(readiness: take this replica out of the Service). The first health request after a start waits no
longer than any other (``PROBE_WAIT_S``): while the first probe has not answered it is 503
``"starting: …"`` with ``store: "unknown"`` (not ready yet), never a hang. ``/livez`` answers 200
while the process serves HTTP at all, whatever the store does: the liveness probe.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Final

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from infersight.api.errors import UNAVAILABLE_RETRY_AFTER_S, HtmlErrors, error_body, or_html
from infersight.service.jobs import Jobs
from infersight.storage.engine import reason, timed_out, unreachable
from infersight.storage.seam import Store

log = logging.getLogger(__name__)
INITIAL_S: Final = 1.0
FACTOR: Final = 2.0
CAP_S: Final = 30.0
#: A health request starts a store probe when the last one is older than this.
PROBE_INTERVAL_S: Final = 2.0
#: How long a health request waits for the probe it started before answering from memory.
PROBE_WAIT_S: Final = 1.0
#: A probe still waiting after this long says the store is slow.
SLOW_AFTER_S: Final = 5.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class StoreGate:
    def __init__(
        self,
        prepare: Callable[[], object],
        on_ready: Callable[[], object] = lambda: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.prepare = prepare
        self.on_ready = on_ready
        self.clock = clock
        self.ready = threading.Event()
        self.waiting_since: float | None = None
        self.last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def status(self) -> str:
        """``ok``, or why the service is degraded."""
        if self.ready.is_set():
            return "ok"
        if self.waiting_since is None:
            return "degraded: starting"
        return (
            f"degraded: waiting for the store since {_iso(self.waiting_since)} ({self.last_error})"
        )

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="store-gate", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        delay = INITIAL_S
        while not self._stop.is_set():
            if self._attempt():
                self.ready.set()
                self.on_ready()
                return
            self._stop.wait(delay)
            delay = min(CAP_S, delay * FACTOR)

    def _attempt(self) -> bool:
        try:
            self.prepare()
        except Exception as exc:  # retried; anything but an unreachable store is logged in full
            if self.waiting_since is None:
                self.waiting_since = self.clock()
            self.last_error = reason(exc)
            if unreachable(exc):
                log.warning("the store cannot be reached, retrying: %s", self.last_error)
            else:
                log.exception("preparing the store failed, retrying")
            return False
        if self.waiting_since is not None:
            log.warning("the store answers again; starting the jobs")
        return True


class StoreProbe:
    """The store's health as last seen (the module's doc); thread-safe, never blocks a caller."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.clock = clock
        self._mutex = threading.Lock()
        self._done = threading.Event()
        self._started_at: float | None = None  # the probe in flight, if any
        self._finished_at: float | None = None
        self._error: str | None = None  # the last probe's failure
        self._slow = False  # it was a store timeout

    def kick(self) -> threading.Event | None:
        """Start a probe unless one is running or the last is recent; the event of the one
        in flight (set when it ends), ``None`` when none is."""
        with self._mutex:
            now = self.clock()
            if self._started_at is not None:
                return self._done
            if self._finished_at is not None and now - self._finished_at < PROBE_INTERVAL_S:
                return None
            self._started_at = now
            self._done = threading.Event()
            done = self._done
        threading.Thread(target=self._probe, args=(done,), name="store-probe", daemon=True).start()
        return done

    def _probe(self, done: threading.Event) -> None:
        error: str | None = None
        slow = False
        try:
            self.store.maintenance.probe()
        except Exception as exc:  # every failure is reported on /healthz, none raised
            error, slow = reason(exc), timed_out(exc)
        with self._mutex:
            self._started_at = None
            self._finished_at = self.clock()
            self._error, self._slow = error, slow
        done.set()

    @property
    def seen(self) -> bool:
        """Whether a probe has finished."""
        return self._finished_at is not None

    def state(self) -> tuple[str, str]:
        """``(store, status)``: ``ok`` / ``ok``, ``slow`` / ``degraded: store slow (…)`` or
        ``unreachable`` / ``degraded: the store is unreachable (…)``."""
        with self._mutex:
            now = self.clock()
            if self._started_at is not None and now - self._started_at >= SLOW_AFTER_S:
                waited = now - self._started_at
                return "slow", f"degraded: store slow (a probe has waited {waited:.1f} s)"
            if self._finished_at is None:
                waited = 0.0 if self._started_at is None else now - self._started_at
                return "unknown", (
                    f"starting: the first store probe has not answered yet ({waited:.1f} s)"
                )
            if self._error is None:
                return "ok", "ok"
            if self._slow:
                return "slow", f"degraded: store slow (a probe was cut short: {self._error})"
            return "unreachable", f"degraded: the store is unreachable ({self._error})"


async def _store_error(_request: Request, exc: Exception) -> JSONResponse:
    headers = {"Retry-After": str(UNAVAILABLE_RETRY_AFTER_S)}
    if timed_out(exc):
        log.warning("a store call timed out: %s", reason(exc))
        return JSONResponse(
            error_body(
                "unavailable",
                "the store did not answer in time (it is slow or a table is locked); retry later",
                {"reason": "store_timeout"},
            ),
            status_code=503,
            headers=headers,
        )
    if not unreachable(exc):
        log.exception("unhandled database error", exc_info=exc)
        return JSONResponse(error_body("internal", "internal server error"), status_code=500)
    log.warning("the store cannot be reached: %s", reason(exc))
    return JSONResponse(
        error_body("unavailable", "the store cannot be reached; retry later"),
        status_code=503,
        headers=headers,
    )


def install_store_errors(app: FastAPI, html: HtmlErrors | None = None) -> None:
    """Answer 503 ``unavailable`` (not a 500 and a traceback) while the store is down, and
    when a store call ran past its bound (``details.reason``: ``store_timeout``); with
    ``html``, a browser's path gets its page instead (as ``api.errors.install``)."""
    handler = _store_error if html is None else or_html(_store_error, html)
    app.add_exception_handler(OperationalError, handler)
    app.add_exception_handler(InterfaceError, handler)
    app.add_exception_handler(PoolTimeout, handler)


Lifespan = Callable[[FastAPI], Any]


def lifecycle(jobs: Jobs, run_jobs: bool, gate: StoreGate | None) -> Lifespan:
    """The app's lifespan: jobs start at once, or (given a ``gate``) once the store answers."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if gate is not None:
            gate.start()
        elif run_jobs:
            jobs.start()
        try:
            yield
        finally:
            if gate is not None:
                gate.stop()
            jobs.stop()

    return lifespan


def add_healthz(
    app: FastAPI, store: Store, jobs: Jobs, gate: StoreGate | None, worker: int | None = None
) -> None:
    """``/healthz`` (readiness): the status, the store's, this process's job runs and the
    runs its scheduler skipped (the previous one still going); with ``worker`` (``serve
    --workers N``) also this worker's number, 1..N. ``/livez`` (liveness). Both answer from
    memory (the module's doc)."""
    probe = StoreProbe(store)

    @app.get("/healthz", summary="Liveness and store reachability", tags=["health"])
    async def healthz() -> Response:
        body: dict[str, Any] = {"status": "ok", "store": "ok", "jobs": dict(jobs.runs)}
        body["jobs_skipped"] = dict(jobs.skipped)
        if worker is not None:
            body["worker"] = worker
        if gate is not None and not gate.ready.is_set():
            body.update(status=gate.status(), store="unreachable")
            return JSONResponse(body, status_code=503)
        done = probe.kick()
        if done is not None:
            # Every probe, the first included, is waited for PROBE_WAIT_S at most: a store
            # slower than that leaves the first answer "starting" (503, store "unknown").
            deadline = time.monotonic() + PROBE_WAIT_S
            while not done.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        store, status = probe.state()
        body.update(status=status, store=store)
        return JSONResponse(body, status_code=200 if store == "ok" else 503)

    @app.get("/livez", include_in_schema=False)
    async def livez() -> Response:
        """200 while this process serves HTTP, whatever its store does (the liveness probe);
        the store's state as ``/healthz`` last saw it, for information."""
        store, status = probe.state()
        return JSONResponse({"status": "alive", "store": store, "store_status": status})
