"""A real PostgreSQL primary and hot standby on this machine, for the read-routing tests (#19).

``running_replication()`` makes a throw-away pair of clusters of their own, beside (never
touching) the test server at ``INFERSIGHT_TEST_POSTGRES_URL``:

1. ``initdb`` a primary (trust authentication, which also covers replication connections from
   loopback) with ``wal_level = replica`` and WAL senders, and start it on a free loopback port;
2. ``pg_basebackup -R -X stream`` it into the standby's data directory (``-R`` writes
   ``standby.signal`` and ``primary_conninfo``), start that on another free port as a hot
   standby, and wait until its WAL receiver is ``streaming``.

The binaries are PostgreSQL's own (``bindir``): ``INFERSIGHT_TEST_PG_BINDIR``, else the
directory ``initdb`` on ``PATH`` resolves to, else the newest ``/usr/lib/postgresql/*/bin``
(Debian, where ``initdb`` is not on ``PATH``). PostgreSQL refuses to run as root, so as root
(CI containers) every PostgreSQL program runs as the ``postgres`` account (``Popen(user=...)``,
no ``su``/``runuser`` in between, so the process this module signals is the postmaster itself),
in a folder under the system temp directory handed to that account.

Readiness is waited on, never slept for: a server is ready when a connection succeeds, the
standby when its WAL receiver streams; the loops end early, with the server log's tail, if
the process exits (a port taken between choosing it and binding it is retried on a new one).
A server that neither starts nor exits is stopped by pytest-timeout.

The clusters are tuned for tests, not durability: ``fsync = off``, no autovacuum and no timed
checkpoints (so that an idle primary writes no WAL the standby would have to catch up on, bar
the bgwriter's running-transactions record a few seconds after activity). Leaving the
``with`` stops both (fast shutdown, then immediate, then SIGKILL) and removes the folder.
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any, Final

import psycopg

#: What the harness runs from PostgreSQL's binary directory.
PROGRAMS: Final = ("initdb", "postgres", "pg_basebackup")
#: Where Debian installs each major version's binaries (not on ``PATH``).
DEBIAN_BINDIRS: Final = Path("/usr/lib/postgresql")
#: The account PostgreSQL runs as when the tests run as root.
ROOT_USER: Final = "postgres"
#: The superuser ``initdb`` creates, which the tests connect as.
SUPERUSER: Final = "postgres"
START_ATTEMPTS: Final = 3
#: Seconds a fast, then an immediate, shutdown may take before the next, harder, signal.
STOP_WAIT_S: Final = 60.0
#: How often readiness is polled.
POLL_S: Final = 0.05

SETTINGS: Final = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "wal_keep_size": "'256MB'",
    "hot_standby": "on",
    "max_connections": "50",
    "shared_buffers": "'32MB'",
    "fsync": "off",
    "full_page_writes": "off",
    "autovacuum": "off",
    "checkpoint_timeout": "'1d'",
    "max_wal_size": "'1GB'",
    "log_min_messages": "warning",
}


class ReplicationError(RuntimeError):
    """PostgreSQL is missing, or a cluster did not start; the message carries what it said."""


def bindir() -> Path | None:
    """The directory of PostgreSQL's server binaries (``None``: not installed)."""
    candidates: list[Path] = []
    given = os.environ.get("INFERSIGHT_TEST_PG_BINDIR")
    if given:
        candidates.append(Path(given))
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(found).resolve().parent)
    if DEBIAN_BINDIRS.is_dir():
        versions = [p for p in DEBIAN_BINDIRS.iterdir() if p.name.isdigit()]
        candidates += [p / "bin" for p in sorted(versions, key=lambda p: -int(p.name))]
    for candidate in candidates:
        if all(os.access(candidate / program, os.X_OK) for program in PROGRAMS):
            return candidate
    return None


def missing_reason() -> str:
    return (
        "PostgreSQL's server binaries (initdb, postgres, pg_basebackup) are not installed: "
        "Debian package postgresql, or set INFERSIGHT_TEST_PG_BINDIR"
    )


@dataclass
class Server:
    """One running cluster: where it listens and its postmaster process."""

    name: str
    data: Path
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL of ``database`` on this server (psycopg 3, the superuser)."""
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> psycopg.Connection[tuple[Any, ...]]:
        """An autocommit psycopg connection (for the harness's and the tests' own queries)."""
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user=SUPERUSER,
            dbname=database,
            autocommit=True,
            connect_timeout=10,
        )

    def query(self, sql: str, database: str = "postgres") -> tuple[Any, ...]:
        """The first row of ``sql``."""
        with self.connect(database) as connection:
            row = connection.execute(sql.encode()).fetchone()
        if row is None:
            raise ReplicationError(f"{self.name}: no row for {sql!r}")
        return row

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """Fast shutdown (SIGINT); immediate (SIGQUIT) and SIGKILL if it lingers."""
        for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGKILL):
            if self.process.poll() is not None:
                return
            with suppress(ProcessLookupError):
                self.process.send_signal(sig)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=STOP_WAIT_S)


@dataclass
class Replication:
    """A primary and its hot standby, streaming."""

    folder: Path
    primary: Server
    standby: Server
    _stopped: bool = field(default=False, repr=False)

    def pause_replay(self) -> None:
        """Stop the standby replaying WAL: from now on it misses what the primary commits."""
        self.standby.query("SELECT pg_wal_replay_pause()")

    def resume_replay(self) -> None:
        self.standby.query("SELECT pg_wal_replay_resume()")

    def wait_caught_up(self) -> None:
        """Until the standby has replayed everything the primary had written when called."""
        (lsn,) = self.primary.query("SELECT pg_current_wal_lsn()::text")
        sql = f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn"
        _until(lambda: bool(self.standby.query(sql)[0]), self.standby, "replay the primary's WAL")

    def stop(self) -> None:
        """Both servers down (the standby first) and the folder gone; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self.standby.stop()
        finally:
            self.primary.stop()
            shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def running_replication() -> Iterator[Replication]:
    """A fresh primary and hot standby, stopped and removed on leaving."""
    replication = start()
    try:
        yield replication
    finally:
        replication.stop()


def start() -> Replication:
    """Start a primary and its standby (the caller stops them; ``running_replication`` is the
    usual way). Raises ``ReplicationError`` when PostgreSQL is missing or does not start."""
    binaries = bindir()
    if binaries is None:
        raise ReplicationError(missing_reason())
    folder = _folder()
    primary: Server | None = None
    try:
        _run(binaries, "initdb", _initdb_args(folder / "primary"), folder)
        with (folder / "primary" / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/replication.py\n")
            conf.writelines(f"{name} = {value}\n" for name, value in SETTINGS.items())
        primary = _start_server(binaries, "primary", folder / "primary", folder)
        backup = [
            *("-h", "127.0.0.1", "-p", str(primary.port), "-U", SUPERUSER),
            *("-D", str(folder / "standby"), "-R", "-X", "stream", "-c", "fast", "--no-sync"),
        ]
        _run(binaries, "pg_basebackup", backup, folder)
        standby = _start_server(binaries, "standby", folder / "standby", folder)
    except BaseException:
        if primary is not None:
            primary.stop()
        shutil.rmtree(folder, ignore_errors=True)
        raise
    replication = Replication(folder, primary, standby)
    try:
        sql = "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'"
        _until(lambda: standby.query(sql)[0] == 1, standby, "stream from the primary")
    except BaseException:
        replication.stop()
        raise
    return replication


def _account() -> pwd.struct_passwd | None:
    """The account PostgreSQL runs as (``None``: this process's own)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(ROOT_USER)
    except KeyError:
        raise ReplicationError(
            f"PostgreSQL refuses to run as root and there is no {ROOT_USER!r} account to run it as"
        ) from None


def _folder() -> Path:
    """A new folder for both clusters; as root, handed to PostgreSQL's account. It is made in
    the system temp directory, which that account can reach (pytest's ``tmp_path``, under a
    root-only folder, it could not)."""
    account = _account()
    folder = Path(tempfile.mkdtemp(prefix="infersight-replication-"))
    if account is not None:
        os.chown(folder, account.pw_uid, account.pw_gid)
    folder.chmod(0o700)
    return folder


def _initdb_args(data: Path) -> list[str]:
    return [
        *("-D", str(data), "-U", SUPERUSER, "--auth=trust"),
        *("--encoding=UTF8", "--locale=C", "--no-sync"),
    ]


def _child_env(folder: Path) -> dict[str, str]:
    """This environment without libpq's variables (``PGPORT``, ``PGHOST``…, which would
    redirect the tools), with the folder as home (no ``~/.pgpass`` of root's is read)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return {**env, "HOME": str(folder), "LC_ALL": "C"}


def _popen_kwargs(folder: Path) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"cwd": folder, "env": _child_env(folder), "stdin": subprocess.DEVNULL}
    account = _account()
    if account is not None:
        kwargs.update(user=account.pw_uid, group=account.pw_gid, extra_groups=[])
    return kwargs


def _run(binaries: Path, program: str, args: Sequence[str], folder: Path) -> None:
    done = subprocess.run(
        [str(binaries / program), *args],
        capture_output=True,
        text=True,
        check=False,
        **_popen_kwargs(folder),
    )
    if done.returncode != 0:
        said = _tail(done.stdout + done.stderr)
        raise ReplicationError(f"{program} failed ({done.returncode}): {said}")


def _start_server(binaries: Path, name: str, data: Path, folder: Path) -> Server:
    failure = ""
    for attempt in range(START_ATTEMPTS):
        log_path = folder / f"{name}-{attempt}.log"
        with log_path.open("wb") as log:
            server = _spawn(binaries, name, data, _free_port(), log, folder, log_path)
        try:
            _until(partial(_accepts, server), server, "accept connections")
        except ReplicationError as exc:
            server.stop()
            failure = str(exc)
            if "could not bind" not in server.log() and "in use" not in server.log():
                break  # not a port taken by someone else: trying again would not help
            continue
        return server
    raise ReplicationError(failure)


def _spawn(
    binaries: Path,
    name: str,
    data: Path,
    port: int,
    log: IO[bytes],
    folder: Path,
    log_path: Path,
) -> Server:
    process = subprocess.Popen(
        [str(binaries / "postgres"), "-D", str(data), "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        **_popen_kwargs(folder),
    )
    return Server(name, data, port, process, log_path)


def _accepts(server: Server) -> bool:
    try:
        with server.connect():
            return True
    except psycopg.OperationalError:  # not yet listening, or "the database system is starting up"
        return False


def _until(check: Callable[[], object], server: Server, what: str) -> None:
    """Poll ``check`` until it is true; fail with the log's tail once the server has exited."""
    while True:
        try:
            if check():
                return
        except psycopg.OperationalError:
            pass
        if server.process.poll() is not None:
            raise ReplicationError(
                f"the {server.name} exited ({server.process.returncode}) before it would "
                f"{what}: {_tail(server.log())}"
            )
        time.sleep(POLL_S)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])
