"""Crash-consistent alerting (#32, defects 2 and 3): ``infersight serve`` killed with SIGKILL at
the worst moment neither loses a page nor sends one twice to a receiver that cannot deduplicate.

Each case runs the real thing on both stores: a store holding an availability SLO that burns
now (an hour of healthy traffic, then eight minutes of failures), ``infersight serve`` as a
subprocess with its jobs (evaluation every half second, the follow-up every second) and two local
HTTP receivers, a Slack-shaped webhook and a PagerDuty-shaped Events endpoint. The kill is timed
on an event seen from outside, never on a sleep:

* inside the outbox insert of a new incident's page — held there by a ``BEFORE INSERT`` trigger
  on the outbox: ``pg_sleep`` on PostgreSQL, seen in ``pg_stat_activity``; on SQLite a trigger
  that first writes 16 MiB of ballast (the uncommitted pages spill to the write-ahead log, whose
  size the test watches) and then counts for minutes;
* inside a delivery — the receiver holds its answer and signals that the POST arrived.

Then the trigger is dropped, ``serve`` restarts on the same store, and the test waits until the
restarted process has run its follow-up job twice (or a page arrives twice) before it counts
what the receivers got.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import Engine, select, text

from infersight.core.burn import Incident
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.storage import incidents, migrate, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.outbox import MessageState, Outbox
from infersight.storage.tables import incident_history
from infersight.storage.writer import open_writer
from tests.conftest import fresh_database
from tests.factories import make_records
from tests.peers import free_port
from tests.waiting import until

pytestmark = pytest.mark.e2e

STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
AVAILABILITY = SloSpec("chat-avail", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=30))
ROUTING_KEY = "rk-crash-0123456789"
#: The SQLite trigger's ballast (16 MiB) spills past the page cache into the WAL; this much WAL
#: means the writer is inside the trigger (the test truncates the WAL before serve starts).
WAL_INSIDE_TRIGGER = 8 << 20


# -- the store -------------------------------------------------------------------------------


@dataclass
class CrashStore:
    url: str
    engine: Engine
    path: Path | None  # the SQLite file

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name


@pytest.fixture(params=STORES)
def crash_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CrashStore]:
    """A store of this test's own (its triggers die with it), migrated, burning now."""
    if request.param == "sqlite":
        path = tmp_path / "infersight.db"
        url = f"sqlite:///{path}"
        engine = create_store_engine(url)
        migrate.upgrade(engine)
        yield _burning(CrashStore(url, engine, path))
        engine.dispose()
        return
    with fresh_database() as url:
        engine = create_store_engine(url)
        migrate.upgrade(engine)
        yield _burning(CrashStore(url, engine, None))
        engine.dispose()


def _burning(store: CrashStore) -> CrashStore:
    now = datetime.now(UTC)
    rng = np.random.default_rng(32)
    healthy = make_records(
        rng, now - timedelta(minutes=70), 3000, span=timedelta(minutes=62), error_rate=0.0
    )
    failing = make_records(
        rng, now - timedelta(minutes=8), 480, span=timedelta(minutes=7, seconds=50), error_rate=1.0
    )
    open_writer(store.engine).write_requests(healthy + failing)
    slo_store.put_slo(store.engine, AVAILABILITY, now)
    if store.path is not None:  # start serve with an empty WAL (see WAL_INSIDE_TRIGGER)
        with store.engine.connect() as connection:
            connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    return store


def _hold_outbox_inserts(store: CrashStore) -> None:
    """A trigger that holds whoever inserts into the outbox inside the insert."""
    with store.engine.begin() as connection:
        if store.dialect == "postgresql":
            connection.execute(
                text(
                    "CREATE FUNCTION crash_test_hold() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$ BEGIN PERFORM pg_sleep(600); RETURN NEW; END $$"
                )
            )
            connection.execute(
                text(
                    "CREATE TRIGGER crash_test_hold BEFORE INSERT ON outbox "
                    "FOR EACH ROW EXECUTE FUNCTION crash_test_hold()"
                )
            )
            return
        connection.exec_driver_sql("CREATE TABLE crash_test_ballast (b BLOB)")
        connection.exec_driver_sql(
            "CREATE TRIGGER crash_test_hold BEFORE INSERT ON outbox BEGIN "
            " INSERT INTO crash_test_ballast SELECT randomblob(4096) FROM (WITH RECURSIVE "
            "  n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 4096) SELECT x FROM n);"
            " SELECT count(*) FROM (WITH RECURSIVE "
            "  n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 2000000000) "
            "  SELECT x FROM n);"
            "END"
        )


def _inside_outbox_insert(store: CrashStore) -> int | None:
    """The writer is held inside the outbox insert: its backend pid on PostgreSQL, 1 on SQLite."""
    if store.dialect == "postgresql":
        with store.engine.connect() as connection:
            pid = connection.execute(
                text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state = 'active' AND wait_event = 'PgSleep' "
                    "AND query ILIKE 'INSERT INTO outbox%'"
                )
            ).scalar()
        return int(pid) if pid is not None else None
    assert store.path is not None
    wal = store.path.with_name(store.path.name + "-wal")
    return 1 if wal.exists() and wal.stat().st_size > WAL_INSIDE_TRIGGER else None


def _release_outbox_inserts(store: CrashStore, pid: int) -> None:
    """After the kill: end the dead writer's transaction (PostgreSQL only notices a dead client
    when its statement ends) and drop the trigger."""
    with store.engine.begin() as connection:
        if store.dialect == "postgresql":
            connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    if store.dialect == "postgresql":
        until(lambda: _backend_gone(store, pid), "the dead writer's backend ended")
    on = " ON outbox" if store.dialect == "postgresql" else ""
    with store.engine.begin() as connection:
        connection.exec_driver_sql(f"DROP TRIGGER crash_test_hold{on}")


def _backend_gone(store: CrashStore, pid: int) -> bool:
    with store.engine.connect() as connection:
        found = connection.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
        ).scalar_one()
    return found == 0


# -- the receivers ---------------------------------------------------------------------------


class Receiver:
    """A local HTTP endpoint that records every POST body; while ``holding`` it keeps its answer
    until ``release`` (the POST's arrival is ``arrived``)."""

    def __init__(self, status: int, holding: bool = False) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrived = threading.Event()
        self.released = threading.Event()
        if not holding:
            self.released.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.bodies.append(json.loads(body))
                receiver.arrived.set()
                receiver.released.wait(timeout=300)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"status": "success"}')
                except OSError:
                    pass  # the sender was killed while we held the answer

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def receivers(hold: str | None = None) -> Iterator[dict[str, Receiver]]:
    made = {
        "slack": Receiver(200, holding=hold == "slack"),
        "pagerduty": Receiver(202, holding=hold == "pagerduty"),
    }
    try:
        yield made
    finally:
        for receiver in made.values():
            receiver.close()


# -- serve -----------------------------------------------------------------------------------


@dataclass
class Serving:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def deliveries(self) -> int:
        """How many follow-up passes (re-diagnosis, then delivery) this process has run."""
        try:
            answer = httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=10)
            return int(answer.json().get("jobs", {}).get("deliver", 0))
        except (httpx.TransportError, ValueError):
            return 0

    def get(self, path: str) -> Any:
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=30).json()


@contextmanager
def serving(
    store: CrashStore, made: dict[str, Receiver], tmp_path: Path, name: str
) -> Iterator[Serving]:
    port = free_port()
    log = tmp_path / f"serve-{name}.log"
    environ = {
        **os.environ,
        "INFERSIGHT_DATABASE_URL": store.url,
        "INFERSIGHT_RUN_JOBS": "true",
        "INFERSIGHT_EVALUATION_INTERVAL_S": "0.5",
        "INFERSIGHT_DELIVERY_INTERVAL_S": "1",
        "INFERSIGHT_SLACK_WEBHOOK_URL": f"http://127.0.0.1:{made['slack'].port}/services/T/B/X",
        "INFERSIGHT_PAGERDUTY_ROUTING_KEY": ROUTING_KEY,
        "INFERSIGHT_PAGERDUTY_URL": f"http://127.0.0.1:{made['pagerduty'].port}/v2/enqueue",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    command = [
        sys.executable, "-c", "from infersight.cli import main; main()",
        "serve", "--listen", f"127.0.0.1:{port}",
    ]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=environ, stdout=sink, stderr=subprocess.STDOUT)
    try:
        yield Serving(process, port, log)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def killed(served: Serving) -> None:
    served.process.send_signal(signal.SIGKILL)
    assert served.process.wait(timeout=120) == -signal.SIGKILL


def _the_incident(store: CrashStore) -> Incident:
    [incident] = incidents.list_incidents(store.engine)
    return incident


def _trigger(body: dict[str, Any]) -> bool:
    """A body that pages (Slack's text; PagerDuty's event action)."""
    if "event_action" in body:
        return bool(body["event_action"] == "trigger")
    return "chat-avail" in str(body.get("text", ""))


# -- defect 2: a crash inside the page's outbox insert ----------------------------------------


def test_a_kill_inside_the_pages_outbox_insert_loses_no_page(
    crash_store: CrashStore, tmp_path: Path
) -> None:
    store = crash_store
    _hold_outbox_inserts(store)
    with receivers() as made:
        with serving(store, made, tmp_path, "first") as first:
            pid = until(
                lambda: _inside_outbox_insert(store),
                "serve is inside the page's outbox insert",
                process=first.process,
                every_s=0.02,
            )
            killed(first)
        _release_outbox_inserts(store, pid)
        incident = _the_incident(store)
        assert incident.state.value == "firing"
        assert Outbox(store.engine).messages() == []  # nothing of the page was committed

        with serving(store, made, tmp_path, "second") as second:
            until(
                lambda: second.deliveries() >= 2 or len(made["slack"].bodies) > 1,
                "the restarted serve ran its follow-up twice",
                process=second.process,
            )
            detail = second.get(f"/api/v1/incidents/{incident.id}")
    # The page went out once to each receiver, and the incident's onset was saved with it.
    assert [_trigger(b) for b in made["slack"].bodies] == [True]
    assert [_trigger(b) for b in made["pagerduty"].bodies] == [True]
    told = detail["notifications"]
    messages = Outbox(store.engine).messages()
    assert {(m.notifier, m.state) for m in messages} == {
        ("pagerduty", MessageState.DELIVERED),
        ("slack", MessageState.DELIVERED),
    }
    assert {(n["notifier"], n["event"], n["state"]) for n in told} == {
        ("pagerduty", "trigger", "delivered"),
        ("slack", "trigger", "delivered"),
    }
    with store.engine.connect() as connection:
        onsets = connection.execute(
            select(incident_history.c.id).where(
                incident_history.c.incident_id == incident.id,
                incident_history.c.verdict == "onset",
            )
        ).all()
    assert len(onsets) == 1


# -- defect 3: a crash during a delivery ------------------------------------------------------


def test_a_kill_during_the_slack_post_does_not_post_it_again(
    crash_store: CrashStore, tmp_path: Path
) -> None:
    """Slack cannot deduplicate: the interrupted post is not sent again (at most once), and
    the incident says so (``unknown``), logged once."""
    store = crash_store
    with receivers(hold="slack") as made:
        with serving(store, made, tmp_path, "first") as first:
            until(made["slack"].arrived.is_set, "the Slack post arrived", process=first.process)
            killed(first)
        made["slack"].released.set()
        [claimed] = Outbox(store.engine).messages("slack")

        with serving(store, made, tmp_path, "second") as second:
            until(
                lambda: second.deliveries() >= 2 or len(made["slack"].bodies) > 1,
                "the restarted serve ran its follow-up twice",
                process=second.process,
            )
            incident = _the_incident(store)
            detail = second.get(f"/api/v1/incidents/{incident.id}")
            log = second.output()
    assert len(made["slack"].bodies) == 1
    assert [_trigger(b) for b in made["pagerduty"].bodies] == [True]
    # The attempt was recorded before the post left.
    assert (claimed.state, claimed.attempts) == (MessageState.SENDING, 1)
    told = detail["notifications"]
    [slack] = Outbox(store.engine).messages("slack")
    assert slack.state is MessageState.UNKNOWN
    assert "not sent again" in slack.last_error
    [shown] = [n for n in told if n["notifier"] == "slack"]
    assert shown["state"] == "unknown"
    assert "not sent again" in shown["last_error"]
    assert log.count("interrupted mid-send and is not sent again") == 1


def test_a_kill_during_the_pagerduty_post_sends_it_again_with_the_same_dedup_key(
    crash_store: CrashStore, tmp_path: Path
) -> None:
    """PagerDuty deduplicates by ``dedup_key``: the interrupted event is sent again (at least
    once), the same body, and Slack still gets its page once."""
    store = crash_store
    with receivers(hold="pagerduty") as made:
        with serving(store, made, tmp_path, "first") as first:
            until(made["pagerduty"].arrived.is_set, "the PagerDuty post arrived",
                  process=first.process)  # fmt: skip
            killed(first)
        made["pagerduty"].released.set()
        with serving(store, made, tmp_path, "second") as second:
            until(
                lambda: second.deliveries() >= 2 or len(made["pagerduty"].bodies) > 2,
                "the restarted serve ran its follow-up twice",
                process=second.process,
            )
    first_post, again = made["pagerduty"].bodies
    assert again == first_post
    assert again["dedup_key"] == "infersight/chat-avail/*"
    assert [_trigger(b) for b in made["slack"].bodies] == [True]
    assert {(m.notifier, m.state, m.attempts) for m in Outbox(store.engine).messages()} == {
        ("pagerduty", MessageState.DELIVERED, 2),
        ("slack", MessageState.DELIVERED, 1),
    }
