"""A real PgBouncer in front of a PostgreSQL server, for the tests and benchmarks (#19).

``running_pgbouncer(postgres_url)`` starts the ``pgbouncer`` binary (Debian's, 1.18 in CI: no
protocol-level prepared statements, that came in 1.21) on a free loopback port, in
transaction pooling mode unless told otherwise, with one wildcard database entry
(``* = host=... port=...``) so every database of the server is reachable through it. Clients
are trusted (``auth_type = trust``); the auth file it needs anyway names the URL's user, with
the URL's password if it has one, which PgBouncer then uses to log in to the server. No unix
socket is made. As root (CI containers), PgBouncer refuses to run, so it is started with
``-u postgres`` (``user`` argument) and its folder is handed to that user.

It is ready when a connection to its admin console succeeds, not after a sleep; ``url`` is the
given URL with PgBouncer's host and port, ``store_url`` the same with ``pooler=transaction``,
the store's setting for a transaction pooler (``storage.engine``). ``show("POOLS")`` and
``show("STATS")`` read the admin console; leaving the ``with`` stops the process (SIGTERM,
then SIGKILL if it lingers) and removes its folder.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import psycopg
from sqlalchemy.engine import URL, make_url

#: Where Debian installs it; ``PATH`` is searched first.
DEFAULT_BINARY: Final = "/usr/sbin/pgbouncer"
#: The account it runs as when started by root.
ROOT_USER: Final = "postgres"
#: How long a started PgBouncer may take to accept a connection before it counts as failed
#: (it is ready in milliseconds; this only bounds a broken start on a loaded machine).
READY_TIMEOUT_S: Final = 60.0
#: A free port is found by binding port 0 and closing it; another process may take it before
#: PgBouncer binds it, so a start that fails to listen is retried on a new port.
START_ATTEMPTS: Final = 3


class PgBouncerError(RuntimeError):
    """PgBouncer is missing or did not start; the message carries its log's tail."""


def binary() -> str | None:
    """The ``pgbouncer`` executable, or ``None`` when it is not installed."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return DEFAULT_BINARY if os.access(DEFAULT_BINARY, os.X_OK) else None


@dataclass
class PgBouncer:
    """A running PgBouncer: where it listens and how to reach PostgreSQL through it."""

    host: str
    port: int
    pool_mode: str
    #: The PostgreSQL URL given, with this PgBouncer's host and port.
    url: str
    #: The user that may use the admin console (the URL's).
    admin_user: str
    process: subprocess.Popen[bytes]
    folder: Path

    @property
    def store_url(self) -> str:
        """``url`` with the store's transaction-pooler setting (``pooler=transaction``)."""
        parsed = make_url(self.url)
        return parsed.update_query_dict({"pooler": "transaction"}).render_as_string(
            hide_password=False
        )

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (``POOLS``, ``STATS``, ``SERVERS``, ...), as
        one dict per row."""
        if not what.replace("_", "").isalpha():
            raise ValueError(f"not a SHOW subject: {what!r}")
        with self._admin() as connection, connection.cursor() as cursor:
            cursor.execute(f"SHOW {what.upper()}")
            names = [column.name for column in cursor.description or []]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def log(self) -> str:
        """What PgBouncer has written so far (its log goes to a file in its folder)."""
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _admin(self) -> psycopg.Connection[Any]:
        # The admin console speaks only the simple query protocol; psycopg uses it for a
        # query without parameters.
        return psycopg.connect(
            host=self.host,
            port=self.port,
            dbname="pgbouncer",
            user=self.admin_user,
            autocommit=True,
            connect_timeout=5,
        )

    def stop(self) -> None:
        """Stop the process (immediate shutdown: SIGTERM) and remove its folder."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def running_pgbouncer(
    postgres_url: str,
    *,
    pool_mode: str = "transaction",
    pool_size: int = 20,
    max_client_conn: int = 1000,
) -> Iterator[PgBouncer]:
    """A PgBouncer in front of the server ``postgres_url`` names, stopped on leaving."""
    bouncer = start(
        postgres_url, pool_mode=pool_mode, pool_size=pool_size, max_client_conn=max_client_conn
    )
    try:
        yield bouncer
    finally:
        bouncer.stop()


def start(
    postgres_url: str,
    *,
    pool_mode: str = "transaction",
    pool_size: int = 20,
    max_client_conn: int = 1000,
) -> PgBouncer:
    """Start a PgBouncer (the caller stops it); ``running_pgbouncer`` is the usual way."""
    if pool_mode not in ("session", "transaction", "statement"):
        raise ValueError(f"not a PgBouncer pool mode: {pool_mode!r}")
    if pool_size < 1 or max_client_conn < 1:
        raise ValueError("pool_size and max_client_conn must be at least 1")
    executable = binary()
    if executable is None:
        raise PgBouncerError("pgbouncer is not installed (Debian package: pgbouncer)")
    server = make_url(postgres_url)
    failure = ""
    for _ in range(START_ATTEMPTS):
        bouncer, failure = _attempt(executable, server, pool_mode, pool_size, max_client_conn)
        if bouncer is not None:
            return bouncer
    raise PgBouncerError(f"pgbouncer did not start: {failure}")


def _attempt(
    executable: str, server: URL, pool_mode: str, pool_size: int, max_client_conn: int
) -> tuple[PgBouncer | None, str]:
    folder = Path(tempfile.mkdtemp(prefix="infersight-pgbouncer-"))
    user = server.username or "postgres"
    port = _free_port()
    _write_config(folder, server, user, port, pool_mode, pool_size, max_client_conn)
    command = [executable, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        account = pwd.getpwnam(ROOT_USER)
        _hand_over(folder, account.pw_uid, account.pw_gid)
        command[1:1] = ["-u", ROOT_USER]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = server.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    bouncer = PgBouncer("127.0.0.1", port, pool_mode, url, user, process, folder)
    if _wait_ready(bouncer):
        return bouncer, ""
    failure = _tail(bouncer.log()) or f"exit status {process.poll()}"
    bouncer.stop()
    return None, failure


def _write_config(
    folder: Path,
    server: URL,
    user: str,
    port: int,
    pool_mode: str,
    pool_size: int,
    max_client_conn: int,
) -> None:
    password = server.password or ""
    (folder / "users.txt").write_text(f'"{_quoted(user)}" "{_quoted(str(password))}"\n')
    backend = f"host={server.host or '127.0.0.1'} port={server.port or 5432}"
    (folder / "pgbouncer.ini").write_text(
        "\n".join(
            [
                "[databases]",
                f"* = {backend}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {folder / 'users.txt'}",
                f"admin_users = {user}",
                f"stats_users = {user}",
                f"pool_mode = {pool_mode}",
                f"default_pool_size = {pool_size}",
                f"max_client_conn = {max_client_conn}",
                f"logfile = {folder / 'pgbouncer.log'}",
                f"pidfile = {folder / 'pgbouncer.pid'}",
                "ignore_startup_parameters = extra_float_digits,options",
                "",
            ]
        )
    )


def _quoted(value: str) -> str:
    """A value inside an auth file's double quotes (a quote is written twice)."""
    return value.replace('"', '""')


def _hand_over(folder: Path, uid: int, gid: int) -> None:
    """The folder and its files to the account PgBouncer switches to (it writes its log and
    pid file there, and reads its configuration again on reload)."""
    for path in [folder, *folder.iterdir()]:
        os.chown(path, uid, gid)
    folder.chmod(0o700)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_ready(bouncer: PgBouncer) -> bool:
    """Whether the admin console accepted a connection before the process exited."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if bouncer.process.poll() is not None:
            return False
        try:
            with bouncer._admin():
                return True
        except psycopg.OperationalError:
            time.sleep(0.05)
    return False


def _tail(log: str, lines: int = 5) -> str:
    return " | ".join(log.strip().splitlines()[-lines:])
