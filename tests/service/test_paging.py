"""How the listener applies the lifecycle's decisions (``alerts.lifecycle``) on a real store, and
what the announcer makes of each kind of notification: an update of the open alert is a kind of
its own (``Notice.UPDATE``), never an incident change."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import sqlalchemy

from infersight.alerts.dispatch import deliver_due
from infersight.alerts.lifecycle import Notice, Told
from infersight.alerts.notifiers.pagerduty import PagerDutyNotifier
from infersight.core.burn import AlertState, Incident, IncidentState, Severity, Transition
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.service.diagnosis import DiagnosisListener
from infersight.service.notifications import Announcer
from infersight.storage import incident_history, incidents, signals, slo_store
from infersight.storage.outbox import Outbox
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.doubles import Endpoint
from tests.factories import make_records

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _pagerduty() -> tuple[Endpoint, PagerDutyNotifier]:
    pager = Endpoint()
    return pager, PagerDutyNotifier("rk-0123456789", pager.client(), url="https://pd.test/")


def test_an_update_of_the_open_alert_is_told_under_its_dedup_key(store: Store) -> None:
    pager, pd = _pagerduty()
    announce = Announcer(store.sql, {"pagerduty": pd}, lambda: T0)
    opened = Incident(7, "chat", "*", Severity.PAGE, IncidentState.FIRING, T0, T0)
    announce(opened, Transition.OPENED, {}, {"cause": "overload", "instance": "vllm-8b-0"})
    news = {"cause": "gpu_throttled", "instance": "vllm-8b-1", "burning_again_at": "x"}
    announce(opened, Notice.UPDATE, {}, news)
    announce(opened, Notice.UPDATE, {}, news)  # the same news again: one message
    deliver_due(Outbox(store.engine), {"pagerduty": pd}, T0)
    page, update = pager.accepted
    assert page["event_action"] == update["event_action"] == "trigger"
    assert update["dedup_key"] == page["dedup_key"]
    assert update["payload"]["summary"].startswith("[PAGE UPDATE] SLO chat (*) burning again")


def test_no_change_is_no_notification(store: Store) -> None:
    _, pd = _pagerduty()
    announce = Announcer(store.sql, {"pagerduty": pd}, lambda: T0)
    opened = Incident(7, "chat", "*", Severity.PAGE, IncidentState.FIRING, T0, T0)
    with pytest.raises(ValueError, match="no notification"):
        announce(opened, Transition.NONE, {}, {"cause": "overload"})
    assert Outbox(store.engine).messages() == []


TTFT = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 1.0), 0.999, timedelta(days=30))


def _burning(store: Store) -> Incident:
    """Ten healthy minutes, then three in which every other request is slow; an incident
    opened 2.5 minutes into the burn."""
    rng = np.random.default_rng(21)
    healthy = make_records(rng, T0, 1200, span=timedelta(minutes=10), error_rate=0.0)
    burning = make_records(rng, T0 + timedelta(minutes=10), 300, span=timedelta(minutes=3),
                           error_rate=0.0)  # fmt: skip
    slow = [dataclasses.replace(r, ttft_s=2.0) if i % 2 else r for i, r in enumerate(burning)]
    open_writer(store.engine).write_requests(healthy + slow)
    slo_store.put_slo(store.engine, TTFT, T0)
    opened = T0 + timedelta(minutes=12, seconds=30)
    with store.engine.begin() as connection:
        incident = incidents.apply_step(connection, "ttft", "*",
                                        AlertState(Severity.PAGE, opened), Transition.OPENED,
                                        {"5m": 500.0}, opened)  # fmt: skip
    assert incident is not None
    return incident


def test_a_page_whose_notification_fails_leaves_nothing_behind_and_is_paged_again(
    store: Store,
) -> None:
    # The decision's writes and its notification are one transaction: an announcer that fails
    # (a crash between them) leaves the incident unpaged, and the follow-up pages it.
    incident = _burning(store)
    told: list[tuple[Told, dict[str, Any]]] = []
    broken = [True]

    def announce(i: Incident, kind: Told, symptom: dict[str, Any], diagnosis: dict[str, Any],
                 tx: SqlStore | None = None) -> None:  # fmt: skip
        if broken[0]:
            raise RuntimeError("the outbox is gone")
        told.append((kind, diagnosis))

    listener = DiagnosisListener(store.sql, announce=announce)
    with pytest.raises(RuntimeError):
        listener.on_incident(incident, Transition.OPENED)
    assert signals.notes(store.engine, [incident.id]) == {}
    assert incident_history.entries(store.engine, incident.id) == []
    broken[0] = False
    assert listener.refresh(incident.opened_at + timedelta(seconds=10)) == 1
    [(kind, paged)] = told
    assert kind is Transition.OPENED
    assert paged["window"]["start"] == "2026-01-05T09:10:00Z"  # from the burn's onset
    [onset] = incident_history.entries(store.engine, incident.id)
    assert (onset.verdict, onset.cause) == ("onset", paged["cause"])
    # Diagnosed a moment ago: the next pass reads nothing and tells nothing.
    assert listener.refresh(incident.opened_at + timedelta(seconds=20)) == 0
    assert len(told) == 1


def test_a_pass_over_incidents_diagnosed_lately_reads_no_evidence_of_each(store: Store) -> None:
    # The follow-up reads every firing incident's note and newest entry at once; an incident
    # diagnosed a moment ago needs nothing more, so the pass costs the same for one or three.
    incident = _burning(store)
    listener = DiagnosisListener(store.sql)
    opened = incident.opened_at
    listener.on_incident(incident, Transition.OPENED)
    statements: list[str] = []

    def counted(at: datetime) -> int:
        statements.clear()
        return listener.refresh(at)

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    sqlalchemy.event.listen(store.engine, "before_cursor_execute", count)
    try:
        assert counted(opened + timedelta(seconds=10)) == 0
        one = len(statements)
        ids = [incident.id]
        for scope in ("model=a", "model=b"):
            with store.engine.begin() as connection:
                other = incidents.apply_step(connection, "ttft", scope,
                                             AlertState(Severity.PAGE, opened), Transition.OPENED,
                                             {"5m": 500.0}, opened)  # fmt: skip
            assert other is not None
            listener.on_incident(other, Transition.OPENED)
            ids.append(other.id)
        assert len(signals.notes(store.engine, ids)) == 3  # all three paged
        assert counted(opened + timedelta(seconds=20)) == 0
        assert len(statements) == one
        # Past ``every``, each is diagnosed again (its evidence read then).
        assert counted(opened + timedelta(minutes=3)) == 3
    finally:
        sqlalchemy.event.remove(store.engine, "before_cursor_execute", count)
