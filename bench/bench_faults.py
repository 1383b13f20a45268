"""Fault-injection benchmark (issue 32): each fault against live processes, one table.

Every row starts real processes of this checkout (``infersight sidecar``, ``infersight serve``)
over a throwaway PostgreSQL database, sends real OTLP exports (protobuf over HTTP, counted as
acknowledged on a 200), delivers pages to a local Slack-shaped webhook, injects the fault,
and counts what came through:

* ``disk``: the spool on a 5 MiB tmpfs, the store absent (the database does not exist yet):
  exports until the sidecar refuses ten in a row; ``kill -9`` and a restart on the full disk;
  then the store is created and the row waits (``--drain-bound``) until every acknowledged
  span is stored, and checks that new exports are taken and stored afterwards;
* ``outbox``: ``kill -9`` of ``serve`` while it inserts a new incident's outbox row (a
  ``BEFORE INSERT`` trigger sleeps 3 s; the moment is read from ``pg_stat_activity``), then a
  restart: is the page written and delivered;
* ``delivery``: the webhook holds its 200 for 3 s, ``kill -9`` of ``serve`` as the POST
  arrives, a restart; ``--repeats`` times: is the same Slack message sent twice;
* ``pagerduty``: the same with PagerDuty (half as many times), which deduplicates by
  ``dedup_key``: a resend is allowed there, a lost page is not;
* ``stuck``: the request tables locked (``ACCESS EXCLUSIVE``, ``--lock-s``) while exports keep
  coming and 40 API readers block: what the sidecar's and ``serve``'s ``/healthz`` say and how
  long ``serve``'s takes, the sidecar's ship lag, and that nothing is lost after;
* ``hog``: cap + 50 idle sockets held to the sidecar's OTLP/HTTP port (and to ``serve``'s),
  reopened as they close: the success rate of exports / API reads and of ``/healthz``;
* ``flood``: the store cut off under a running ``serve`` (``ALLOW_CONNECTIONS false`` and its
  sessions ended) for ``--outage-s``: log records and tracebacks written meanwhile;
* ``login``: 300 wrong tokens posted to ``/ui/login``: how many are refused with 429;
* ``nul``: the requests the issue found answered 500 (a NUL in a text parameter, a weekly
  report for week 9999-W52): any 5xx;
* ``idle``: the store absent and the spool empty: does the sidecar's ``/healthz`` still say
  ``ok`` and advance ``last_shipped_at``.

Targets: 0 acknowledged spans stranded, 0 pages lost, 0 sent twice to a receiver that cannot
deduplicate (Slack); the health answers say ``degraded`` and ``serve``'s answers at once;
OTLP and ``/healthz`` keep ≥ 95 % success under the monopoliser; at most one traceback and a
few log records per outage; brute force refused with 429; no 5xx. The exit status is 1 when a
row misses its target (``--report-only``: 0 whatever the verdicts, for the smoke test). The
whole run takes about ten minutes; ``--only`` picks rows.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc
import httpx
from bench_collector import export
from harness import faults
from harness.faults import Database, Live, Receiver, database, tally, wait_until
from harness.results import write_json

from infersight.collector.grpc_receiver import GrpcLimits
from infersight.collector.http_receiver import RECEIVER_LIMITS

PROTOBUF = {"content-type": "application/x-protobuf"}
BEARER = {"authorization": f"Bearer {faults.READ_TOKEN}"}
DEFAULT_POSTGRES = os.environ.get(
    "INFERSIGHT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
#: Success rate the monopoliser must leave to senders and probes.
MIN_SUCCESS = 0.95
#: ``serve``'s ``/healthz`` must answer within this while the store is stuck (from memory).
HEALTHZ_MAX_S = 2.0
#: Log records and tracebacks an outage may write: a line per state change, a traceback once.
FLOOD_MAX_RECORDS = 12
FLOOD_MAX_TRACEBACKS = 1
LOGIN_ATTEMPTS = 300
#: Of the wrong tokens, at most this many may get anything but 429 (a limiter's allowance).
LOGIN_ALLOWANCE = 30
STARTED = time.monotonic()


def progress(message: str) -> None:
    print(f"[{time.monotonic() - STARTED:6.1f} s] {message}", flush=True)


@dataclass
class Row:
    fault: str
    target: str
    sent: int | None = None
    acknowledged: int | None = None
    stored: int | None = None
    missing: int | None = None
    duplicated: int | None = None
    incidents: int | None = None
    written: int | None = None
    delivered: int | None = None
    pages_duplicated: int | None = None
    recovery_s: float | None = None
    #: What ``recovery_s`` was bounded by (shown as "> bound" when it did not recover).
    bound_s: float | None = None
    measured: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def fail(self, problem: str) -> None:
        self.problems.append(problem)


def post_spans(client: httpx.Client, url: str, spans: int) -> tuple[str, list[str]]:
    """One export of ``spans`` spans: the answer (status or error) and its trace ids."""
    body, ids = export(spans, time.time_ns() - 2_000_000_000)
    try:
        return str(client.post(f"{url}/v1/traces", content=body, headers=PROTOBUF).status_code), ids
    except httpx.HTTPError as exc:
        return type(exc).__name__, ids


def check_stored(row: Row, db: Database, acked: list[str]) -> None:
    counted = tally(db.engine, acked)
    row.acknowledged, row.stored = counted.acknowledged, counted.stored
    row.missing, row.duplicated = counted.missing, counted.duplicated
    if counted.missing:
        row.fail(f"{counted.missing} acknowledged spans not stored")
    if counted.duplicated:
        row.fail(f"{counted.duplicated} stored twice")


# -- 1. full spool disk ----------------------------------------------------------------------


def fault_disk(args: argparse.Namespace, work: Path) -> Row:
    row = Row(
        "full spool disk (5 MiB tmpfs, store absent, kill -9 + restart)",
        "0 stranded, 0 dup; new exports taken after",
    )
    mount = work / "tmpfs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        row.fail(f"cannot mount a tmpfs (root needed): {done.stderr.strip()}")
        return row
    db = Database(args.postgres_url, "disk")  # named, not created: the store is absent
    sidecar: Live | None = None
    try:
        sidecar = faults.start_sidecar(db.url, mount / "spool", work / "disk-sidecar.log")
        acked: list[str] = []
        answers: Counter[str] = Counter()
        sent = refused_in_a_row = 0
        deadline = time.monotonic() + 120
        with httpx.Client(timeout=30) as client:
            while refused_in_a_row < 10 and time.monotonic() < deadline:
                answer, ids = post_spans(client, sidecar.url, 200)
                sent += len(ids)
                answers[answer] += 1
                if answer == "200":
                    acked += ids
                    refused_in_a_row = 0
                else:
                    refused_in_a_row += 1
        progress(
            f"disk: {len(acked):,} spans acknowledged of {sent:,} until refusals; "
            f"answers {dict(answers)}"
        )
        if refused_in_a_row < 10:
            row.fail("the sidecar never refused on the full disk")
        sidecar.kill()
        faults.restart_sidecar(sidecar)
        progress("disk: killed (-9) and restarted on the full disk; the store comes back")
        db.create()
        recovered = wait_until(
            lambda: tally(db.engine, acked).missing == 0, args.drain_bound, every=1.0
        )
        row.recovery_s, row.bound_s = recovered, args.drain_bound
        if recovered is None:
            row.fail(f"not drained within {args.drain_bound:g} s")
        progress(
            f"disk: drained in {recovered:.1f} s"
            if recovered is not None
            else f"disk: {tally(db.engine, acked).missing:,} still stranded"
        )
        after: Counter[str] = Counter()
        with httpx.Client(timeout=30) as client:
            for _ in range(10):
                answer, ids = post_spans(client, sidecar.url, 100)
                sent += len(ids)
                after[answer] += 1
                if answer == "200":
                    acked += ids
        if not after["200"]:
            row.fail("new exports still refused after the drain")
        if recovered is not None:
            wait_until(lambda: tally(db.engine, acked).missing == 0, 30, every=1.0)
        row.sent = sent
        check_stored(row, db, acked)
        row.measured = (
            f"refused with {', '.join(a for a in answers if a != '200')}; after "
            f"the drain {after['200']}/10 exports taken"
        )
    finally:
        if sidecar is not None:
            sidecar.kill()
        subprocess.run(["umount", "-l", str(mount)], check=False)
        db.drop()
    return row


# -- 2. crash while the outbox row is written ------------------------------------------------

SLOW_OUTBOX = """
CREATE FUNCTION faults_slow_outbox() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_sleep(3); RETURN NEW; END $$;
CREATE TRIGGER faults_slow_outbox BEFORE INSERT ON outbox
FOR EACH ROW EXECUTE FUNCTION faults_slow_outbox();
"""


def outbox_inserts(db: Database) -> int:
    return db.count(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND state = 'active' AND pid <> pg_backend_pid() "
        "AND query ILIKE '%INSERT INTO outbox%'"
    )


def pages(
    row: Row, db: Database, hook: Receiver, slo_like: str, needle: str, notifier: str = "slack"
) -> None:
    """Incidents of the SLOs ``slo_like``, outbox messages of ``notifier``, and what ``hook``
    received (bodies containing ``needle``): distinct, and copies beyond the first."""
    row.incidents = db.count(f"SELECT count(*) FROM incidents WHERE slo LIKE '{slo_like}'")
    row.written = db.count(f"SELECT count(*) FROM outbox WHERE notifier = '{notifier}'")
    received = hook.count(needle)
    row.delivered = len(received)
    row.pages_duplicated = sum(received.values()) - len(received)


def serve_env(hook: Receiver, **extra: str) -> dict[str, str]:
    return {
        "INFERSIGHT_SLACK_WEBHOOK_URL": hook.url,
        "INFERSIGHT_EVALUATION_INTERVAL_S": "1",
        **extra,
    }


def fault_outbox(args: argparse.Namespace, work: Path) -> Row:
    row = Row("kill -9 while the outbox row is written", "every incident paged once (Slack)")
    with database(args.postgres_url, "outbox") as db, Receiver().running() as hook:
        faults.write_burning(db.engine)
        faults.put_burning_slo(db.engine, "faults-outbox")
        with db.connect() as connection:
            connection.execute(SLOW_OUTBOX.encode())
        serve = faults.start_serve(db.url, work / "outbox-serve.log", **serve_env(hook))
        try:
            seen = wait_until(lambda: outbox_inserts(db) > 0, 120, every=0.05)
            if seen is None:
                row.fail("no outbox insert was seen in 120 s")
                return row
            serve.kill()
            progress(f"outbox: killed (-9) during the outbox insert, {seen:.1f} s after start")
            row.measured = "killed (-9) inside the outbox insert (held 3 s by a trigger)"
            with db.connect() as connection:
                connection.execute(b"DROP TRIGGER faults_slow_outbox ON outbox")
            faults.restart_serve(serve)
            restarted = time.monotonic()
            landed = wait_until(lambda: bool(hook.count("faults-outbox")), args.page_bound)
            row.recovery_s, row.bound_s = landed, args.page_bound
            time.sleep(2)  # a second copy would follow at once
            pages(row, db, hook, "faults-outbox", "faults-outbox")
            progress(
                f"outbox: {row.incidents} incident(s), {row.written} page(s) written, "
                f"{row.delivered} delivered, "
                f"{time.monotonic() - restarted:.1f} s after the restart"
            )
        finally:
            serve.kill()
    if not row.incidents:
        row.fail("no incident opened")
    if (row.delivered or 0) < (row.incidents or 0):
        row.fail(f"{(row.incidents or 0) - (row.delivered or 0)} page(s) lost")
    if row.pages_duplicated:
        row.fail(f"{row.pages_duplicated} page(s) sent twice")
    return row


# -- 3. crash during delivery ----------------------------------------------------------------


def unsettled(db: Database) -> int:
    """Outbox messages still to send or whose send has no outcome yet (``sending``: claimed
    before the request left, the state a fix for the crash during delivery adds)."""
    return db.count("SELECT count(*) FROM outbox WHERE state IN ('pending', 'sending')")


def fault_delivery(args: argparse.Namespace, work: Path, receiver: str = "slack") -> Row:
    """Kills during a held POST to ``receiver``: Slack (no deduplication: a second copy is a
    duplicate page) or PagerDuty (``dedup_key``: a resend of the same event is allowed)."""
    deduplicates = receiver == "pagerduty"
    label = "PagerDuty" if deduplicates else "Slack"
    repeats = max(1, args.repeats // 2) if deduplicates else args.repeats
    row = Row(
        f"kill -9 during the {label} POST (× {repeats})",
        "0 lost; a resend of the same event allowed (PagerDuty)"
        if deduplicates
        else "0 sent twice, 0 lost (Slack)",
    )
    recoveries: list[float] = []
    names = [f"faults-{receiver}-{k}" for k in range(repeats)]
    with database(args.postgres_url, receiver) as db, Receiver(hold_s=3.0).running() as hook:
        env = (
            {
                "INFERSIGHT_PAGERDUTY_ROUTING_KEY": "faults-routing-key-0123456789",
                "INFERSIGHT_PAGERDUTY_URL": hook.url,
                "INFERSIGHT_EVALUATION_INTERVAL_S": "1",
            }
            if deduplicates
            else serve_env(hook)
        )
        faults.write_burning(db.engine)
        serve = faults.start_serve(db.url, work / f"{receiver}-serve.log", **env)
        try:
            for k, name in enumerate(names):
                faults.put_burning_slo(db.engine, name)
                if not hook.wait_for(name, args.page_bound):
                    break
                serve.kill()
                faults.restart_serve(serve)
                settled = wait_until(lambda: unsettled(db) == 0, args.page_bound)
                if settled is not None:
                    recoveries.append(settled)
                time.sleep(1)
                copies = sum(hook.count(name).values())
                progress(
                    f"{receiver} {k + 1}/{repeats}: killed (-9) during the POST; "
                    f"{name} received {copies}×"
                )
        finally:
            serve.kill()
        pages(row, db, hook, f"faults-{receiver}-%", f"faults-{receiver}-", receiver)
        lost = [name for name in names if not hook.count(name)]
    row.recovery_s = max(recoveries) if len(recoveries) == repeats else None
    row.bound_s = args.page_bound
    row.measured = (
        f"{len(recoveries)} kill(s) during the POST; recovery: restart → the message settled"
    )
    if lost:
        row.fail(f"{len(lost)} page(s) lost")
    if row.pages_duplicated and not deduplicates:
        row.fail(f"{row.pages_duplicated} page(s) sent twice")
    return row


def fault_pagerduty(args: argparse.Namespace, work: Path) -> Row:
    return fault_delivery(args, work, "pagerduty")


# -- 4. stuck store --------------------------------------------------------------------------


@dataclass
class Probe:
    """A loop of GETs until stopped: (started, seconds, status code or error, the body's
    status, its ``ship_lag_seconds``)."""

    url: str
    timeout: float
    every: float = 1.0
    seen: list[tuple[float, float, str, str, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(timeout=self.timeout) as client:
            while not self.stop.is_set():
                at, started = time.monotonic(), time.perf_counter()
                try:
                    response = client.get(self.url)
                    code, body = str(response.status_code), response.json()
                except (httpx.HTTPError, ValueError) as exc:
                    code, body = type(exc).__name__, {}
                took = time.perf_counter() - started
                lag = body.get("ship_lag_seconds") if isinstance(body, dict) else None
                status = str(body.get("status", "")) if isinstance(body, dict) else ""
                self.seen.append((at, took, code, status, float(lag or 0.0)))
                self.stop.wait(self.every)


def short(status: str) -> str:
    return re.sub(r" since .*| \(.*", "", status)[:40]


def fault_stuck(args: argparse.Namespace, work: Path) -> Row:
    row = Row(
        f"stuck store (request tables locked {args.lock_s:g} s, 40 readers)",
        "both /healthz say degraded, a true lag; serve's < 2 s; 0 lost",
    )
    with database(args.postgres_url, "stuck") as db:
        sidecar = faults.start_sidecar(db.url, work / "stuck-spool", work / "stuck-sidecar.log")
        serve = faults.start_serve(db.url, work / "stuck-serve.log")
        acked: list[str] = []
        acked_at: list[float] = []
        sent = [0]
        try:
            with httpx.Client(timeout=30) as client:
                answer, ids = post_spans(client, sidecar.url, 50)
            sent[0] += len(ids)
            acked += ids if answer == "200" else []
            wait_until(lambda: tally(db.engine, acked).missing == 0, 120)
            # A running service meets the stuck store: serve has probed its store and said ok
            # (its first probe after a start may wait longer, by design).
            wait_until(lambda: _health(serve) == (200, "ok"), 120)
            stop = threading.Event()

            def send() -> None:
                with httpx.Client(timeout=30) as client:
                    while not stop.is_set():
                        answer, ids = post_spans(client, sidecar.url, 50)
                        sent[0] += len(ids)
                        if answer == "200":
                            acked.extend(ids)
                            acked_at.append(time.monotonic())
                        stop.wait(1.0)

            side_probe = Probe(f"{sidecar.url}/healthz", 10)
            serve_probe = Probe(f"{serve.url}/healthz", args.lock_s + 60)
            locker = db.connect()
            locker.execute("BEGIN")
            locker.execute("LOCK TABLE requests, request_rollups IN ACCESS EXCLUSIVE MODE")
            locked_at = time.monotonic()
            progress(f"stuck: request tables locked for {args.lock_s:g} s")
            threads = [
                threading.Thread(target=t, daemon=True)
                for t in (send, side_probe.run, serve_probe.run)
            ]
            readers = ThreadPoolExecutor(40)
            reads = [
                readers.submit(
                    httpx.get,
                    f"{serve.url}/api/v1/latency",
                    params={"instance": f"reader-{i}"},
                    headers=BEARER,
                    timeout=args.lock_s + 60,
                )
                for i in range(40)
            ]
            for t in threads:
                t.start()
            time.sleep(max(0.0, args.lock_s - (time.monotonic() - locked_at)))
            locker.execute("ROLLBACK")
            locker.close()
            released = time.monotonic()
            progress("stuck: released")
            stop.set()
            side_probe.stop.set()
            serve_probe.stop.set()
            for t in threads:
                t.join(timeout=args.lock_s + 90)
            during_side = [p for p in side_probe.seen if locked_at <= p[0] < released]
            during_serve = [p for p in serve_probe.seen if locked_at <= p[0] < released]
            recovered = wait_until(lambda: tally(db.engine, acked).missing == 0, 120, every=1.0)
            row.recovery_s = None if recovered is None else time.monotonic() - released
            row.bound_s = 120.0
            answers: Counter[str] = Counter()
            for r in reads:
                try:
                    answers[str(r.result(timeout=args.lock_s + 90).status_code)] += 1
                except Exception as exc:
                    answers[type(exc).__name__] += 1
            readers.shutdown(wait=False)
        finally:
            sidecar.stop()
            serve.kill()
        row.sent = sent[0]
        check_stored(row, db, acked)
    side_statuses = Counter(short(p[3]) for p in during_side)
    serve_statuses = Counter(f"{p[2]} {short(p[3])}".strip() for p in during_serve)
    max_lag = max((p[4] for p in during_side), default=0.0)
    # The true lag at the release: the first export acknowledged under the lock waited since.
    true_lag = released - min((t for t in acked_at if t >= locked_at), default=released)
    serve_max = max((p[1] for p in during_serve), default=0.0)
    row.measured = (
        f"sidecar /healthz {dict(side_statuses)}, lag max {max_lag:.0f} s (true "
        f"{true_lag:.0f} s); serve "
        f"/healthz max {serve_max:.1f} s {dict(serve_statuses)}; readers "
        f"{dict(answers)}"
    )
    if not any(s.startswith("degraded") for s in side_statuses):
        row.fail("the sidecar's /healthz never said degraded")
    if max_lag < true_lag / 2:
        row.fail(f"the sidecar's lag read {max_lag:.0f} s of a true {true_lag:.0f} s")
    if not any("degraded" in s for s in serve_statuses):
        row.fail("serve's /healthz never said degraded")
    if serve_max > HEALTHZ_MAX_S:
        row.fail(f"serve's /healthz took {serve_max:.1f} s")
    return row


# -- 5. connection monopoliser ---------------------------------------------------------------


class Hog:
    """``count`` idle sockets to ``port``, each reopened as soon as the server closes it."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.stop = threading.Event()
        self.reopened = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket | None:
        try:
            return socket.create_connection(("127.0.0.1", self.port), timeout=2)
        except OSError:
            return None

    def _run(self) -> None:
        held: list[socket.socket] = []
        while not self.stop.is_set():
            while len(held) < self.count and not self.stop.is_set():
                s = self._open()
                if s is None:
                    break
                held.append(s)
            readable, _, _ = select.select(held, [], [], 0.05) if held else ([], [], [])
            for s in readable:  # the server closed it (or said something): reopen
                with contextlib.suppress(OSError):
                    s.recv(4096)
                s.close()
                held.remove(s)
                self.reopened += 1
            if not held:
                time.sleep(0.05)
        for s in held:
            s.close()


def rate(outcomes: list[bool]) -> float:
    return sum(outcomes) / len(outcomes) if outcomes else 0.0


def hammer(seconds: float, attempt: Callable[[], bool]) -> list[bool]:
    """``attempt`` in a loop on fresh connections for ``seconds``."""
    out = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out.append(attempt())
        time.sleep(0.1)
    return out


def succeeded(url: str, headers: dict[str, str] | None = None) -> bool:
    """A GET on a fresh connection answered 200 within 5 s."""
    try:
        return httpx.get(url, headers=headers, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def monopolised(
    port: int, held: int, seconds: float, work: Callable[[], bool], health_url: str
) -> tuple[list[bool], list[bool], int]:
    """``work`` and ``/healthz`` attempts while ``held`` idle sockets hog ``port``; and how
    many of those the server closed (each reopened at once)."""
    hog = Hog(port, held)
    hog.thread.start()
    time.sleep(2)  # the sockets are open
    try:
        with ThreadPoolExecutor(2) as pool:
            done = pool.submit(hammer, seconds, work)
            health = pool.submit(hammer, seconds, lambda: succeeded(health_url))
            return done.result(), health.result(), hog.reopened
    finally:
        hog.stop.set()
        hog.thread.join(timeout=30)


GRPC_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def fault_hog(args: argparse.Namespace, work: Path) -> Row:
    cap, api_cap = RECEIVER_LIMITS.max_connections, 64
    grpc_cap = GrpcLimits().max_connections
    row = Row(
        f"connection monopoliser (cap + 50 idle sockets; sidecar cap {cap}, gRPC {grpc_cap}, "
        f"serve {api_cap})",
        f"OTLP (HTTP and gRPC), API and /healthz ≥ {MIN_SUCCESS:.0%} success; 0 lost",
    )
    acked: list[str] = []
    sent = [0]
    figures: dict[str, float] = {}
    grpc_port = faults.free_port()
    with database(args.postgres_url, "hog") as db:
        sidecar = faults.start_sidecar(
            db.url,
            work / "hog-spool",
            work / "hog-sidecar.log",
            0,
            "--otlp-grpc",
            f"127.0.0.1:{grpc_port}",
        )
        serve = faults.start_serve(
            db.url,
            work / "hog-serve.log",
            INFERSIGHT_RUN_JOBS="false",
            INFERSIGHT_MAX_CONNECTIONS=str(api_cap),
        )

        def otlp() -> bool:
            with httpx.Client(timeout=5) as client:
                answer, ids = post_spans(client, sidecar.url, 20)
            sent[0] += len(ids)
            if answer == "200":
                acked.extend(ids)
            return answer == "200"

        def otlp_grpc() -> bool:
            """One export on a fresh gRPC connection (the receiver's own accept loop)."""
            body, ids = export(20, time.time_ns() - 2_000_000_000)
            sent[0] += len(ids)
            try:
                with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                    channel.unary_unary(GRPC_EXPORT)(body, timeout=5)
            except grpc.RpcError:
                return False
            acked.extend(ids)
            return True

        try:
            for name, label, live, port, held, attempt in (
                ("sidecar", "OTLP", sidecar, sidecar.port, cap + 50, otlp),
                ("sidecar", "OTLP/gRPC", sidecar, grpc_port, grpc_cap + 50, otlp_grpc),
                ("serve", "API", serve, serve.port, api_cap + 50,
                 lambda: succeeded(f"{serve.url}/api/v1/slos", BEARER)),
            ):  # fmt: skip
                done, health, reopened = monopolised(
                    port, held, args.hog_s, attempt, f"{live.url}/healthz"
                )
                figures[f"{name} {label}"] = rate(done)
                figures[f"{name} /healthz ({label} hogged)"] = rate(health)
                progress(
                    f"hog {name} {label}: {label} {rate(done):.0%} of {len(done)}, /healthz "
                    f"{rate(health):.0%} of {len(health)}; {reopened} hogging sockets reopened"
                )
            wait_until(lambda: tally(db.engine, acked).missing == 0, 60, every=1.0)
        finally:
            sidecar.stop()
            serve.kill()
        row.sent = sent[0]
        check_stored(row, db, acked)
    row.measured = ", ".join(f"{k} {v:.0%}" for k, v in figures.items())
    for k, v in figures.items():
        if v < MIN_SUCCESS:
            row.fail(f"{k} {v:.0%} success")
    return row


# -- 6. log flood during a store outage ------------------------------------------------------

RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+ [A-Z]+ ", re.MULTILINE)


def tracebacks(text: str) -> int:
    """Logged tracebacks (a chained exception's parts are one)."""
    return (
        text.count("Traceback (most recent call last)")
        - text.count("During handling of the above exception")
        - text.count("The above exception was the direct cause")
    )


def fault_flood(args: argparse.Namespace, work: Path) -> Row:
    row = Row(
        f"store outage under serve ({args.outage_s:g} s): the log",
        f"≤ {FLOOD_MAX_TRACEBACKS} traceback, ≤ {FLOOD_MAX_RECORDS} records; back after",
    )
    with database(args.postgres_url, "flood") as db, Receiver().running() as hook:
        serve = faults.start_serve(
            db.url, work / "flood-serve.log", INFERSIGHT_SLACK_WEBHOOK_URL=hook.url
        )
        try:
            wait_until(lambda: _health(serve)[0] == 200, 120)
            offset = serve.log_size()
            db.cut()
            progress(f"flood: store cut off for {args.outage_s:g} s")
            time.sleep(args.outage_s)
            text = serve.output(offset)
            db.restore()
            recovered = wait_until(lambda: _health(serve) == (200, "ok"), 120)
            row.recovery_s, row.bound_s = recovered, 120.0
            if recovered is None:
                row.fail("serve did not come back to ok")
        finally:
            serve.kill()
    lines = text.count("\n")
    records = len(RECORD.findall(text))
    found = tracebacks(text)
    row.measured = (
        f"{lines} log lines, {records} records, {found} tracebacks in {args.outage_s:g} s"
    )
    if found > FLOOD_MAX_TRACEBACKS:
        row.fail(f"{found} tracebacks")
    if records > FLOOD_MAX_RECORDS:
        row.fail(f"{records} log records")
    return row


def _health(live: Live) -> tuple[int, str]:
    try:
        response = httpx.get(f"{live.url}/healthz", timeout=10)
        return response.status_code, str(response.json().get("status", ""))
    except (httpx.HTTPError, ValueError):
        return 0, ""


# -- 7. login brute force --------------------------------------------------------------------


def fault_login(args: argparse.Namespace, work: Path) -> Row:
    row = Row(
        f"login brute force ({LOGIN_ATTEMPTS} wrong tokens)",
        f"≥ {LOGIN_ATTEMPTS - LOGIN_ALLOWANCE} answered 429, none let in",
    )
    with database(args.postgres_url, "login") as db:
        serve = faults.start_serve(db.url, work / "login-serve.log", INFERSIGHT_RUN_JOBS="false")
        answers: Counter[str] = Counter()
        try:
            started = time.perf_counter()
            with httpx.Client(timeout=30) as client:
                for i in range(LOGIN_ATTEMPTS):
                    try:
                        response = client.post(
                            f"{serve.url}/ui/login", data={"token": f"wrong-token-{i:06d}"}
                        )
                        answers[str(response.status_code)] += 1
                    except httpx.HTTPError as exc:
                        answers[type(exc).__name__] += 1
            took = time.perf_counter() - started
        finally:
            serve.kill()
    row.measured = f"{dict(sorted(answers.items()))} in {took:.1f} s"
    if answers["429"] < LOGIN_ATTEMPTS - LOGIN_ALLOWANCE:
        row.fail(f"{answers['429']} of {LOGIN_ATTEMPTS} answered 429")
    if answers["303"]:
        row.fail(f"{answers['303']} wrong tokens let in")
    return row


# -- 8. hostile parameters, an idle outage --------------------------------------------------

#: Requests the issue found answered 500 on PostgreSQL (a NUL in a text parameter, a weekly
#: report's week past the calendar's end).
HOSTILE = (
    ("GET", "/api/v1/latency?instance=%00"),
    ("GET", "/api/v1/throughput?instance=%00"),
    ("GET", "/api/v1/breakdown?instance=%00"),
    ("GET", "/api/v1/slos/a%00b"),
    ("GET", "/ui/latency?instance=%00"),
    ("GET", "/ui/overview?instance=%00"),
    ("POST", "/api/v1/reports/weekly?week=9999-W52&partial=true"),
)


def fault_nul(args: argparse.Namespace, work: Path) -> Row:
    row = Row(f"hostile parameters ({len(HOSTILE)} requests: NUL, week 9999-W52)", "no 5xx")
    answers: dict[str, str] = {}
    with database(args.postgres_url, "nul") as db:
        serve = faults.start_serve(db.url, work / "nul-serve.log", INFERSIGHT_RUN_JOBS="false")
        admin = {"authorization": f"Bearer {faults.ADMIN_TOKEN}"}
        try:
            with httpx.Client(timeout=60, headers=admin) as client:
                for method, path in HOSTILE:
                    try:
                        status = client.request(method, f"{serve.url}{path}").status_code
                        answers[path] = str(status)
                    except httpx.HTTPError as exc:
                        answers[path] = type(exc).__name__
        finally:
            serve.kill()
    tallied = Counter(answers.values())
    row.measured = f"answers {dict(sorted(tallied.items()))}"
    broken = [p for p, a in answers.items() if not a.isdigit() or int(a) >= 500]
    if broken:
        row.fail(f"5xx or no answer: {', '.join(broken)}")
    return row


def fault_idle(args: argparse.Namespace, work: Path) -> Row:
    row = Row(
        "store absent, spool empty (an idle outage)",
        "/healthz says degraded; last_shipped_at stands still",
    )
    db = Database(args.postgres_url, "idle")  # never created: the store is absent throughout
    sidecar = faults.start_sidecar(db.url, work / "idle-spool", work / "idle-sidecar.log")

    def health() -> dict[str, object]:
        answer: dict[str, object] = httpx.get(f"{sidecar.url}/healthz", timeout=10).json()
        return answer

    try:
        # The writer opens 5 s after start without an export; give the health answer 30 s
        # to notice the absent store (it says so at once when it probes).
        said = wait_until(lambda: str(health().get("status", "")).startswith("degraded"), 30)
        first = health()
        time.sleep(3)
        second = health()
    finally:
        sidecar.kill()

    noticed = f"said degraded {said:.1f} s after start" if said is not None else "never degraded"
    row.measured = (
        f"{noticed}; status {short(str(second.get('status')))!r}, last_shipped_at "
        f"{first.get('last_shipped_at')} → {second.get('last_shipped_at')}"
    )
    if not str(second.get("status", "")).startswith("degraded"):
        row.fail("/healthz says ok")
    moved = first.get("last_shipped_at") != second.get("last_shipped_at")
    if second.get("last_shipped_at") and moved:
        row.fail("last_shipped_at advanced with the store absent")
    return row


FAULTS: dict[str, Callable[[argparse.Namespace, Path], Row]] = {
    "disk": fault_disk,
    "outbox": fault_outbox,
    "delivery": fault_delivery,
    "pagerduty": fault_pagerduty,
    "stuck": fault_stuck,
    "hog": fault_hog,
    "flood": fault_flood,
    "login": fault_login,
    "nul": fault_nul,
    "idle": fault_idle,
}


def cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(rows: list[Row]) -> str:
    head = (
        "fault",
        "sent",
        "acked",
        "stored",
        "missing",
        "dup",
        "incidents",
        "pages written",
        "delivered",
        "dup pages",
        "recovery s",
        "measured",
        "target",
        "result",
    )
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        verdict = "PASS" if r.passed else "FAIL: " + "; ".join(r.problems)
        recovery = f"> {r.bound_s:g}" if r.recovery_s is None and r.bound_s else r.recovery_s
        cells = (
            r.fault,
            r.sent,
            r.acknowledged,
            r.stored,
            r.missing,
            r.duplicated,
            r.incidents,
            r.written,
            r.delivered,
            r.pages_duplicated,
            recovery,
            r.measured,
            r.target,
            verdict,
        )
        out.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--only",
        default=",".join(FAULTS),
        help=f"comma-separated faults to run, of {', '.join(FAULTS)}",
    )
    parser.add_argument("--repeats", type=int, default=4, help="kills during delivery")
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES,
        help="an admin URL of the PostgreSQL server (databases are made there)",
    )
    parser.add_argument(
        "--drain-bound",
        type=float,
        default=90.0,
        help="seconds the full spool may take to drain once the store is back",
    )
    parser.add_argument(
        "--page-bound",
        type=float,
        default=40.0,
        help="seconds a page may take to be delivered after a (re)start",
    )
    parser.add_argument("--lock-s", type=float, default=60.0, help="how long the store is stuck")
    parser.add_argument("--outage-s", type=float, default=60.0, help="how long the store is out")
    parser.add_argument("--hog-s", type=float, default=10.0, help="seconds measured per hog")
    parser.add_argument(
        "--report-only", action="store_true", help="exit 0 whatever the verdicts (the smoke test)"
    )
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in FAULTS]
    if unknown:
        parser.error(f"unknown fault(s) {', '.join(unknown)}; choose from {', '.join(FAULTS)}")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        for name in chosen:
            progress(f"== {name}")
            work = Path(tmp) / name
            work.mkdir()
            try:
                row = FAULTS[name](args, work)
            except Exception as exc:
                row = Row(name, "runs to the end")
                row.fail(f"{type(exc).__name__}: {str(exc)[:300]}")
            rows.append(row)
            progress(f"{name}: {'PASS' if row.passed else 'FAIL: ' + '; '.join(row.problems)}")
    print()
    print(table(rows))
    failed = [r.fault for r in rows if not r.passed]
    print(
        f"\n{len(rows) - len(failed)} of {len(rows)} rows meet their target"
        f" (total {time.monotonic() - STARTED:.0f} s)"
    )
    write_json(args.json, {"rows": [{**asdict(r), "passed": r.passed} for r in rows]})
    return 1 if failed and not args.report_only else 0


if __name__ == "__main__":
    sys.exit(main())
