"""Waiting for the store at start-up: ``infersight serve`` comes up whether or not its store
answers, and says so.

``StoreGate`` runs the start-up work that needs the store (the migrations) in a thread,
retrying with backoff (1 s, doubling, at most 30 s) while the store cannot be reached, each
failure logged as one line; once it succeeds it calls ``on_ready`` (which starts the scheduled
jobs). Until then ``/healthz`` answers 503 ``"degraded: waiting for the store since …"``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Final

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from infersight.api.errors import error_body
from infersight.service.jobs import Jobs
from infersight.storage.engine import reason, unreachable

log = logging.getLogger(__name__)
INITIAL_S: Final = 1.0
FACTOR: Final = 2.0
CAP_S: Final = 30.0
RETRY_AFTER_S: Final = 5


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


async def _store_error(_request: Request, exc: Exception) -> JSONResponse:
    if not unreachable(exc):
        log.exception("unhandled database error", exc_info=exc)
        return JSONResponse(error_body("internal", "internal server error"), status_code=500)
    log.warning("the store cannot be reached: %s", reason(exc))
    return JSONResponse(
        error_body("unavailable", "the store cannot be reached; retry later"),
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def install_store_errors(app: FastAPI) -> None:
    """Answer 503 ``unavailable`` (not a 500 and a traceback) while the store is down."""
    app.add_exception_handler(OperationalError, _store_error)
    app.add_exception_handler(InterfaceError, _store_error)


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
    app: FastAPI, engine: Engine, jobs: Jobs, gate: StoreGate | None, worker: int | None = None
) -> None:
    """``/healthz``: the status, the store's, this process's job runs and the runs its
    scheduler skipped (the previous one still going); with ``worker`` (``serve --workers N``)
    also this worker's number, 1..N."""

    @app.get("/healthz", summary="Liveness and store reachability")
    def healthz() -> Response:
        body: dict[str, Any] = {"status": "ok", "store": "ok", "jobs": dict(jobs.runs)}
        body["jobs_skipped"] = dict(jobs.skipped)
        if worker is not None:
            body["worker"] = worker
        if gate is not None and not gate.ready.is_set():
            body.update(status=gate.status(), store="unreachable")
            return JSONResponse(body, status_code=503)
        try:
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except SQLAlchemyError as exc:
            body.update(status=f"degraded: the store is unreachable ({reason(exc)})")
            body.update(store="unreachable")
            return JSONResponse(body, status_code=503)
        return JSONResponse(body)
