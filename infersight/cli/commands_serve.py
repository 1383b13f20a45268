"""``infersight serve``: the API service (and its scheduled jobs) under uvicorn.

The store may be down when it starts: the service listens at once, applies the migrations
(or, with ``--no-migrate``, checks the store answers) in the background with backoff, reports
``degraded`` on ``/healthz`` meanwhile, and starts its jobs once the store answers.

``--workers N`` (N > 1) serves the same address from N processes (``httpd.prefork``): the
parent checks the settings by building the app once (nothing connects), binds the socket and
forks; each worker builds its own engine, app and uvicorn after the fork. The migrations run in
one worker at a time (a ``ProcessLock``; the later ones find nothing to do). Scheduled jobs: on
PostgreSQL every worker schedules them and the leader lock (``service.jobs``) lets one work;
on SQLite only worker 1 runs them (an in-memory SQLite store, one per process, is refused).
``/healthz`` and ``/metrics`` answer for the worker that took the connection (``/healthz``
says which: ``"worker": 1..N``).

With ``INFERSIGHT_DATABASE_READ_URL`` set, the read-only answers go to that hot standby
(``api.reads``; its store from ``service.store.open_read_store``, never migrated nor
written); a SQLite store or read URL is refused before anything starts (exit status 2).
Each worker builds its own read engine after the fork, as it does its primary's.
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import click
import httpx
import uvicorn
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from infersight.api import create_app
from infersight.api.serving import server_config
from infersight.api.settings import ApiSettings
from infersight.cli.group import current_settings
from infersight.cli.settings import Settings
from infersight.core.errors import InvalidInput
from infersight.httpd.prefork import ProcessLock, Worker, listen_socket, run_workers
from infersight.service.admin import check_read_routing, migrate, ping, redact
from infersight.service.notifications import notifiers_from_settings
from infersight.service.store import open_read_store, open_store

if TYPE_CHECKING:
    from infersight.service.store import Store

#: The most worker processes ``--workers`` takes.
MAX_WORKERS: Final = 64


def split_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) → ``(host, port)``."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"--listen must be HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def in_memory_sqlite(url: str) -> bool:
    """Whether ``url`` is a SQLite store that lives in one process's memory."""
    if not url.startswith("sqlite"):
        return False
    database = make_url(url).database or ""
    return database in ("", ":memory:") or "mode=memory" in url


@dataclass(frozen=True)
class Plan:
    """What every process of one ``serve`` builds its app from."""

    settings: Settings
    api: ApiSettings
    host: str
    port: int
    run_migrations: bool


@dataclass
class Built:
    app: FastAPI
    store: Store
    client: httpx.Client
    read_store: Store | None = None

    def close(self) -> None:
        self.client.close()
        self.store.dispose()
        if self.read_store is not None:
            self.read_store.dispose()


def build(
    plan: Plan,
    *,
    echo: bool = True,
    worker: int | None = None,
    guard: Callable[[Callable[[], object]], object] = lambda step: step(),
) -> Built:
    """The app of one serving process, with its own engine and HTTP client; ``guard`` runs
    the start-up step that needs the store (the migrations, or the probe)."""
    store = open_store(plan.settings)
    read_url = plan.settings.database_read_url or None  # empty: no standby
    # Only the primary is migrated (``prepare``); the standby replays its schema.
    read_store = open_read_store(plan.settings)
    api_settings = plan.api
    if worker is not None and worker > 1 and store.dialect != "postgresql":
        api_settings = api_settings.model_copy(update={"run_jobs": False})  # SQLite: worker 1
    client = httpx.Client(timeout=10.0)
    try:
        notifiers = notifiers_from_settings(client, api_settings)
        if echo:
            # Names only: webhook URLs and routing keys are secrets and never reach a log.
            click.echo(f"notifiers: {', '.join(sorted(notifiers)) or 'none configured'}", err=True)
            if read_url is not None:  # the password hidden
                click.echo(f"read-only answers from the hot standby {redact(read_url)}", err=True)
        step: Callable[[], object] = (
            (lambda: migrate(store)) if plan.run_migrations else (lambda: ping(store))
        )
        app = create_app(
            api_settings,
            store,
            retention=plan.settings.retention(),
            exact_max_rows=plan.settings.exact_max_rows,
            notifiers=notifiers,
            dashboard_url=f"http://{plan.host}:{plan.port}",
            prepare=lambda: guard(step),
            worker=worker,
            read_store=read_store,
        )
    except BaseException:
        client.close()
        store.dispose()
        if read_store is not None:
            read_store.dispose()
        raise
    return Built(app, store, client, read_store)


def serve_worker(plan: Plan, sock: socket.socket, lock: ProcessLock, worker: Worker) -> int:
    """One worker of ``serve --workers N``: its own app over the inherited socket."""

    def locked(step: Callable[[], object]) -> object:
        with lock.held():
            return step()

    built = build(plan, echo=False, worker=worker.index, guard=locked)
    try:
        config = server_config(
            built.app, plan.host, plan.port, plan.api, built.app.state.context.tokens.scopes
        )
        server = uvicorn.Server(config)
        worker.on_stop(lambda: setattr(server, "should_exit", True))
        server.run(sockets=[sock])
        return 0 if server.started else 1
    finally:
        built.close()


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything starts; a clear error when it cannot be."""
    try:
        return listen_socket(host, port)
    except OSError as exc:
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def serve_workers(plan: Plan, workers: int) -> int:
    """``serve --workers N``: check, bind, fork, supervise; the exit status."""
    if in_memory_sqlite(plan.settings.database_url):
        raise InvalidInput(
            "--workers > 1 needs a store every worker shares: an in-memory SQLite store "
            "lives in one process (use a SQLite file or PostgreSQL)"
        )
    checked = build(plan)  # the settings' errors, once, before anything is bound or forked
    dialect = checked.store.dialect
    checked.close()
    sock = _listen(plan.host, plan.port)
    host, port = sock.getsockname()[:2]
    plan = Plan(plan.settings, plan.api, plan.host, int(port), plan.run_migrations)
    lock = ProcessLock()
    jobs = (
        "the jobs leader is elected among them"
        if dialect == "postgresql"
        else "worker 1 runs the jobs"
    )

    def started(pids: dict[int, int]) -> None:
        listed = ", ".join(f"{index}: {pid}" for index, pid in sorted(pids.items()))
        click.echo(
            f"serving http://{host}:{port} with {len(pids)} workers (pids {listed}); {jobs}",
            err=True,
        )

    try:
        return run_workers(
            workers, lambda worker: serve_worker(plan, sock, lock, worker), on_started=started
        )
    finally:
        sock.close()
        lock.close()


@click.command("serve")
@click.option(
    "--listen",
    default=None,
    metavar="HOST:PORT",
    help="Address to listen on (default INFERSIGHT_LISTEN or 127.0.0.1:8080).",
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    default=None,
    help="Allow serving without API tokens on a non-loopback address (warns).",
)
@click.option("--no-jobs", is_flag=True, help="Do not run the scheduled jobs in this process.")
@click.option(
    "--workers",
    type=click.IntRange(1, MAX_WORKERS),
    default=1,
    show_default=True,
    help="Worker processes serving the same address (each with its own store connections; "
    "limits such as INFERSIGHT_MAX_CONNECTIONS apply per worker). On PostgreSQL every worker "
    "schedules the jobs and one, the elected leader, runs them; on SQLite worker 1 does.",
)
@click.option(
    "--migrate/--no-migrate",
    "run_migrations",
    default=True,
    show_default=True,
    help="Apply the store's migrations before serving.",
)
@click.pass_context
def serve(
    ctx: click.Context,
    listen: str | None,
    insecure_no_auth: bool | None,
    no_jobs: bool,
    workers: int,
    run_migrations: bool,
) -> None:
    """Serve the API, /metrics and the scheduled jobs (SLO evaluation, maintenance)."""
    overrides: dict[str, Any] = {}
    if listen:
        overrides["listen"] = listen
    if insecure_no_auth:
        overrides["insecure_no_auth"] = True
    if no_jobs:
        overrides["run_jobs"] = False
    api_settings = ApiSettings(**overrides)
    host, port = split_listen(api_settings.listen)
    settings = current_settings(ctx)
    if settings.database_read_url:
        check_read_routing(settings.database_url, settings.database_read_url)
    plan = Plan(settings, api_settings, host, port, run_migrations)
    if workers > 1:
        code = serve_workers(plan, workers)
        if code:
            sys.exit(code)
        return
    sock = _listen(host, port)
    built = build(plan)
    try:
        config = server_config(
            built.app, host, port, api_settings, built.app.state.context.tokens.scopes
        )
        bound, shown = sock.getsockname()[1], f"[{host}]" if ":" in host else host
        logging.getLogger("uvicorn.error").info(
            "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, bound
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        built.close()
        sock.close()
