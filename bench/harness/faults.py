"""Live processes and the tools that break them, for ``bench/bench_faults.py`` (issue 32).

* ``Database``: a throwaway PostgreSQL database named before it exists (a sidecar can be
  pointed at it while it is absent), created and migrated on demand, dropped afterwards, and
  cut off (``ALLOW_CONNECTIONS false`` and its sessions ended) for an outage;
* ``start_sidecar`` / ``start_serve``: ``infersight sidecar`` and ``infersight serve`` as
  subprocesses of this checkout, their output appended to a log file (kept across restarts),
  waited on until they answer;
* ``Receiver``: a Slack-shaped incoming webhook on loopback that records every POST and can
  hold its 200 for a while (the window a crash during delivery needs);
* ``burning_records`` / ``put_burning_slo``: requests that burn a latency SLO at 100× (every
  one slower than its threshold), so that ``serve``'s evaluation opens a page at once;
* ``stored_ids`` / ``tally``: what reached the store of what was acknowledged.
"""

from __future__ import annotations

import http.server
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from infersight.core.records import RequestRecord
from infersight.service.specs import parse_specs
from infersight.storage import migrate, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.writer import open_writer

ROOT = Path(__file__).resolve().parents[2]
CLI = (sys.executable, "-c", "from infersight.cli import main; main()")
READ_TOKEN = "faults-read-token-0123456789"
ADMIN_TOKEN = "faults-admin-token-0123456789"
#: A guard against a process that never comes up (not a budget: a loaded machine waits).
START_GUARD_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment(**extra: str) -> dict[str, str]:
    """This checkout importable, the faults' tokens, ``extra`` on top."""
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "INFERSIGHT_API_TOKENS": f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}",
        **extra,
    }


class Database:
    """A PostgreSQL database next to ``admin_url``'s, named now, created by ``create``."""

    def __init__(self, admin_url: str, label: str) -> None:
        self.name = f"infersight_faults_{label}_{uuid.uuid4().hex[:8]}"
        admin = make_url(admin_url)
        self._dsn = admin.set(drivername="postgresql").render_as_string(hide_password=False)
        self.url = admin.set(drivername="postgresql+psycopg", database=self.name).render_as_string(
            hide_password=False
        )
        self._engine: Engine | None = None

    def admin(self, sql: str) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as connection:
            connection.execute(sql.encode())

    def create(self) -> Database:
        self.admin(f'CREATE DATABASE "{self.name}"')
        migrate.upgrade(self.engine)
        return self

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = create_store_engine(self.url)
        return self._engine

    def dsn(self) -> str:
        return make_url(self.url).set(drivername="postgresql").render_as_string(hide_password=False)

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """A plain autocommit connection (the fault's own: locks, triggers, counts)."""
        return psycopg.connect(self.dsn(), autocommit=True)

    def count(self, sql: str) -> int:
        """The integer ``sql`` selects (0 for none)."""
        with self.connect() as connection:
            row = connection.execute(sql.encode()).fetchone()
        return int(str(row[0])) if row and row[0] is not None else 0

    def cut(self) -> None:
        """An outage: no new session, every open one ended."""
        self.admin(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false')
        self.admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{self.name}' AND pid <> pg_backend_pid()"
        )

    def restore(self) -> None:
        self.admin(f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true')

    def drop(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        self.admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


@contextmanager
def database(admin_url: str, label: str, create: bool = True) -> Iterator[Database]:
    db = Database(admin_url, label)
    if create:
        db.create()
    try:
        yield db
    finally:
        db.drop()


@dataclass
class Live:
    """A running ``infersight`` process: its base URL and its log (appended across restarts)."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path
    port: int
    argv: list[str]
    env: dict[str, str]
    restarts: int = 0

    def output(self, since: int = 0) -> str:
        with self.log.open("rb") as f:
            f.seek(since)
            return f.read().decode("utf-8", "replace")

    def log_size(self) -> int:
        return self.log.stat().st_size

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """``kill -9``."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT)


def start_sidecar(
    store: str, spool: Path, log: Path, http_port: int = 0, *extra: str, **env: str
) -> Live:
    """``infersight sidecar`` (no GPU, spans shipped at once: ``--window 0``) until its ready
    line names its OTLP/HTTP port."""
    argv = [*CLI, "sidecar", "--store", store, "--otlp-http", f"127.0.0.1:{http_port}",
            "--otlp-grpc", "127.0.0.1:0", "--spool-dir", str(spool), "--gpu-source", "none",
            "--window", "0", "--instance", "faults", *extra]  # fmt: skip
    environ = environment(**env)
    return _await_sidecar(Live(_spawn(argv, environ, log), "", log, http_port, argv, environ), 0)


def _await_sidecar(live: Live, offset: int) -> Live:
    deadline = time.monotonic() + START_GUARD_S
    while True:
        found = re.search(r"http=127\.0\.0\.1:(\d+)", live.output(offset))
        if found:
            live.port = int(found.group(1))
            live.url = f"http://127.0.0.1:{live.port}"
            return live
        if not live.alive() or time.monotonic() > deadline:
            live.kill()
            raise RuntimeError(f"the sidecar did not start:\n{live.output(offset)[-2000:]}")
        time.sleep(0.05)


def restart_sidecar(live: Live) -> Live:
    """The same sidecar again (same spool, same port), after ``kill`` or ``stop``."""
    offset = live.log_size()
    live.argv[live.argv.index("--otlp-http") + 1] = f"127.0.0.1:{live.port}"
    live.proc = _spawn(live.argv, live.env, live.log)
    live.restarts += 1
    return _await_sidecar(live, offset)


def start_serve(store: str, log: Path, *extra: str, **env: str) -> Live:
    """``infersight serve`` over ``store`` (jobs on unless ``INFERSIGHT_RUN_JOBS=false``; more
    options in ``extra``) on a free port until its ``/healthz`` answers (whatever it says)."""
    port = free_port()
    argv = [*CLI, "serve", "--store", store, "--listen", f"127.0.0.1:{port}", *extra]
    environ = environment(**env)
    live = Live(_spawn(argv, environ, log), f"http://127.0.0.1:{port}", log, port, argv, environ)
    return _await_serve(live, 0)


def _await_serve(live: Live, offset: int) -> Live:
    deadline = time.monotonic() + START_GUARD_S
    while True:
        try:
            httpx.get(f"{live.url}/healthz", timeout=5)
            return live
        except httpx.TransportError:
            pass
        if not live.alive() or time.monotonic() > deadline:
            live.kill()
            raise RuntimeError(f"serve did not start:\n{live.output(offset)[-2000:]}")
        time.sleep(0.1)


def restart_serve(live: Live) -> Live:
    offset = live.log_size()
    live.proc = _spawn(live.argv, live.env, live.log)
    live.restarts += 1
    return _await_serve(live, offset)


@dataclass
class Receiver:
    """A Slack-shaped incoming webhook: 200 ``ok`` to every POST, after ``hold_s``."""

    hold_s: float = 0.0
    bodies: list[bytes] = field(default_factory=list)
    arrived: threading.Condition = field(default_factory=threading.Condition)
    url: str = ""

    def count(self, needle: str = "") -> Counter[bytes]:
        """Receipts per distinct body (of the bodies that contain ``needle``)."""
        with self.arrived:
            return Counter(b for b in self.bodies if needle.encode() in b)

    def wait_for(self, needle: str, timeout: float) -> bool:
        """Whether a body containing ``needle`` arrived within ``timeout``."""
        with self.arrived:
            return self.arrived.wait_for(
                lambda: any(needle.encode() in b for b in self.bodies), timeout
            )

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with receiver.arrived:
                    receiver.bodies.append(body)
                    receiver.arrived.notify_all()
                time.sleep(receiver.hold_s)
                try:
                    self.send_response(200)
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass  # the sender died while we held the answer

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/services/T0/B0/faults"
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


def burning_records(now: datetime, count: int = 600, minutes: int = 65) -> list[RequestRecord]:
    """``count`` requests over the last ``minutes``, each with a 2 s time to first token."""
    out = []
    for i in range(count):
        start = now - timedelta(seconds=minutes * 60 * (i + 1) / count)
        out.append(
            RequestRecord(
                trace_id=uuid.uuid4().hex,
                span_id=uuid.uuid4().hex[:16],
                start=start,
                instance="faults-0",
                engine="vllm",
                model="faults-model",
                tenant="acme",
                priority="interactive",
                ttft_s=2.0,
                tpot_s=0.02,
                e2e_s=4.0,
                queue_s=0.01,
                prefill_s=1.0,
                decode_s=2.0,
                preprocess_s=0.002,
                input_tokens=100,
                output_tokens=100,
                status="ok",
                error_type="",
                finish_reason="stop",
            )
        )
    return out


def write_burning(engine: Engine) -> int:
    records = burning_records(datetime.now(UTC))
    writer = open_writer(engine)
    try:
        writer.write_requests(records)
    finally:
        close = getattr(writer, "close", None)
        if close is not None:
            close()
    return len(records)


def put_burning_slo(engine: Engine, name: str) -> None:
    """An SLO on the burning requests (time to first token within 100 ms, 99 %)."""
    document = f"""
apiVersion: infersight/v1
kind: SLO
metadata: {{name: {name}}}
spec:
  sli: {{latency: {{metric: ttft, threshold: 100ms}}}}
  selector: {{model: faults-model}}
  window: 30d
  objective: 99%
"""
    [spec] = parse_specs(document)
    slo_store.put_slo(engine, spec, datetime.now(UTC))


def stored_ids(engine: Engine) -> Counter[str]:
    """Every stored request's trace id, with how many rows carry it."""
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT trace_id FROM requests")).all()
    return Counter(str(r[0]) for r in rows)


@dataclass(frozen=True)
class Tally:
    acknowledged: int
    stored: int
    missing: int
    duplicated: int


def tally(engine: Engine, acknowledged: Iterable[str]) -> Tally:
    """What of ``acknowledged`` (trace ids) is in the store, once or more than once."""
    acked = set(acknowledged)
    rows = stored_ids(engine)
    stored = sum(1 for i in acked if i in rows)
    duplicated = sum(rows[i] - 1 for i in acked if rows.get(i, 0) > 1)
    return Tally(len(acked), stored, len(acked) - stored, duplicated)


def wait_until(predicate: object, timeout: float, every: float = 0.25) -> float | None:
    """Seconds until ``predicate()`` held, or ``None`` after ``timeout`` (a bound of the row)."""
    started = time.monotonic()
    while True:
        if predicate():  # type: ignore[operator]
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            return None
        time.sleep(every)
