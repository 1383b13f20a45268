"""``infersight serve``: the API service (and its scheduled jobs) under uvicorn.

The store may be down when it starts: the service listens at once, applies the migrations
(or, with ``--no-migrate``, checks the store answers) in the background with backoff, reports
``degraded`` on ``/healthz`` meanwhile, and starts its jobs once the store answers.

With ``INFERSIGHT_DATABASE_READ_URL`` set, the read-only answers go to that hot standby
(``api.reads``; its engine from ``storage.replica.create_read_engine``, never migrated nor
written); a SQLite store or read URL is refused before anything starts (exit status 2).
"""

from __future__ import annotations

from typing import Any

import click
import httpx
import uvicorn
from sqlalchemy import Engine, text

from api import create_app
from api.serving import server_config
from api.settings import ApiSettings
from core.errors import InvalidInput
from infersight.cli import current_settings
from service.notifications import notifiers_from_settings
from storage import migrate
from storage.creation import creating
from storage.engine import create_store_engine, redact
from storage.replica import check_read_routing, create_read_engine


def split_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) → ``(host, port)``."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"--listen must be HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _probe(engine: Engine) -> None:
    """``--no-migrate``: the store answers. It runs on the store gate's thread, which does not
    inherit the command's "only reads" (a context variable), so it says so itself: probing a
    SQLite file that does not exist must not create it."""
    with creating(False), engine.connect() as connection:
        connection.execute(text("SELECT 1"))


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
    read_url = settings.database_read_url or None  # empty: no standby
    if read_url is not None:
        check_read_routing(settings.database_url, read_url)
    engine = create_store_engine(settings.database_url)
    # Only the primary is migrated (``prepare``); the standby replays its schema.
    read_engine = create_read_engine(read_url) if read_url is not None else None
    client = httpx.Client(timeout=10.0)
    notifiers = notifiers_from_settings(client, api_settings)
    # Names only: webhook URLs and routing keys are secrets and never reach a log.
    click.echo(f"notifiers: {', '.join(sorted(notifiers)) or 'none configured'}", err=True)
    if read_url is not None:  # the password hidden
        click.echo(f"read-only answers from the hot standby {redact(read_url)}", err=True)
    app = create_app(
        api_settings,
        engine,
        retention=settings.retention(),
        exact_max_rows=settings.exact_max_rows,
        notifiers=notifiers,
        dashboard_url=f"http://{host}:{port}",
        prepare=(lambda: migrate.upgrade(engine)) if run_migrations else (lambda: _probe(engine)),
        read_engine=read_engine,
    )
    try:
        config = server_config(app, host, port, api_settings, app.state.context.tokens.scopes)
        uvicorn.Server(config).run()
    finally:
        client.close()
        engine.dispose()
        if read_engine is not None:
            read_engine.dispose()
