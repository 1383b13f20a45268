"""The evaluation job end to end: stored requests → burn rates → one incident → listeners
(``service.evaluation``; what the HTTP API shows of it: ``tests/api/test_api_evaluation.py``)."""

from __future__ import annotations

import dataclasses
import sqlite3
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import make_url

from infersight.core.burn import Incident, IncidentState, Severity, Transition
from infersight.core.query import Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Resolution
from infersight.service.evaluation import Evaluator, default_policy
from infersight.storage import incidents, migrate, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.doubles import NOW
from tests.factories import make_records

OUTAGE = NOW - timedelta(minutes=2)
AVAILABILITY = SloSpec("chat-avail", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=30))


class Recorder:
    """An ``IncidentListener`` that remembers what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[Incident, Transition]] = []

    def on_incident(self, incident: Incident, transition: Transition) -> None:
        self.calls.append((incident, transition))


class Broken:
    def on_incident(self, incident: Incident, transition: Transition) -> None:
        raise RuntimeError("notifier down")


def stored_outage(store: Store) -> Store:
    """Two quiet hours of healthy traffic, then two minutes in which every request fails; the
    availability SLO over them."""
    rng = np.random.default_rng(2)
    healthy = make_records(rng, OUTAGE - timedelta(hours=2), 7200, span=timedelta(hours=2),
                           error_rate=0.0)  # fmt: skip
    failing = make_records(rng, OUTAGE, 120, span=timedelta(minutes=2), error_rate=1.0)
    open_writer(store.engine).write_requests(healthy + failing)
    slo_store.put_slo(store.engine, AVAILABILITY, NOW)
    return store


@pytest.fixture
def outage(store: Store) -> Store:
    return stored_outage(store)


def _replay(outage, policy):
    recorder = Recorder()
    evaluator = Evaluator(SqlStore(outage.engine), policy, [Broken(), recorder])
    before = evaluator.run(OUTAGE - timedelta(seconds=30))
    assert before.slos == 1
    assert before.changes == ()
    for at in (
        NOW,
        NOW + timedelta(seconds=30),
        NOW + timedelta(minutes=45),
        NOW + timedelta(hours=7),
    ):
        evaluator.run(at)
    [incident] = incidents.list_incidents(outage.engine)
    assert incident.state is IncidentState.RESOLVED
    assert incident.peak_burn_rate > 14.4
    assert incident.scope == "*"
    return [(i.severity, t) for i, t in recorder.calls], incident


def test_an_outage_opens_one_incident_that_resolves_once_its_burn_stopped(outage):
    changes, incident = _replay(outage, default_policy())
    # At +45 min the page rules no longer hold, and the ticket rules fire on the memory of
    # the outage alone (their 2 h and 6 h windows), not on a burn present now.
    assert changes == [(Severity.PAGE, Transition.OPENED), (Severity.PAGE, Transition.RESOLVED)]
    assert (incident.opened_at, incident.resolved_at) == (NOW, NOW + timedelta(minutes=45))


def test_without_resolve_after_an_outage_steps_down_to_a_ticket_before_it_resolves(outage):
    policy = dataclasses.replace(default_policy(), resolve_after=timedelta(0))
    changes, incident = _replay(outage, policy)
    assert changes == [
        (Severity.PAGE, Transition.OPENED),
        (Severity.TICKET, Transition.DEESCALATED),
        (Severity.TICKET, Transition.RESOLVED),
    ]
    assert (incident.opened_at, incident.resolved_at) == (NOW, NOW + timedelta(hours=7))


def test_an_slo_scoped_to_another_model_does_not_alert(outage):
    quiet = SloSpec("other", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=30),
                    Selector(model="not-served"))  # fmt: skip
    slo_store.put_slo(outage.engine, quiet, NOW)
    report = Evaluator(SqlStore(outage.engine), default_policy()).run(NOW)
    assert [(i.slo, t) for i, t in report.changes] == [("chat-avail", Transition.OPENED)]


def test_re_scoping_an_slo_resolves_the_old_scope_and_tells_the_listeners(outage):
    recorder = Recorder()
    evaluator = Evaluator(SqlStore(outage.engine), default_policy(), [recorder])
    evaluator.run(NOW)
    rescoped = SloSpec("chat-avail", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=30),
                       Selector(model="llama-8b"))  # fmt: skip
    slo_store.put_slo(outage.engine, rescoped, NOW)
    evaluator.run(NOW + timedelta(seconds=30))
    changes = [(i.scope, i.severity, t) for i, t in recorder.calls]
    assert changes == [
        ("*", Severity.PAGE, Transition.OPENED),
        ("model=llama-8b", Severity.PAGE, Transition.OPENED),
        ("*", Severity.PAGE, Transition.RESOLVED),
    ]
    firing = incidents.list_incidents(outage.engine, "firing")
    assert [i.scope for i in firing] == ["model=llama-8b"]


def test_a_cycle_holds_no_sqlite_write_lock_while_it_counts(tmp_path):
    """The sidecars' writers must not wait for a cycle: it counts first (reading), then
    writes its alert states in one short transaction."""
    path = tmp_path / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    store = stored_outage(Store(engine.url.render_as_string(), engine))
    # A second SLO, after the first by name, with a window of its own.
    slo_store.put_slo(engine, dataclasses.replace(AVAILABILITY, name="z-avail",
                                                  window=timedelta(days=7)), NOW)  # fmt: skip
    writable: list[bool] = []

    def finest_for(window, now):
        # Called while the cycle counts: can a sidecar's writer start a write now?
        other = sqlite3.connect(make_url(store.url).database, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.rollback()
            writable.append(True)
        except sqlite3.OperationalError:
            writable.append(False)
        finally:
            other.close()
        return Resolution.MINUTE

    report = Evaluator(SqlStore(engine), default_policy(), finest_for=finest_for).run(NOW)
    engine.dispose()
    assert [t for _, t in report.changes] == [Transition.OPENED] * 2  # both SLOs paged
    assert writable
    assert all(writable)
