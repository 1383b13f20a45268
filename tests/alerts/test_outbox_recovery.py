"""The outbox after a crash, on a real store (#32): an attempt is claimed before it is sent; a
claim left without an outcome is sent again only to a receiver that deduplicates; an incident
change and its messages commit together; what a crash kept from the outbox between the
evaluation's commit of an escalation or resolution and its notifications is sent by the restarted
process. ``test_crash_consistency`` kills real processes; this covers every receiver, the claim's
lease and those windows without one."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from infersight.alerts.dispatch import deliver_due, recover_interrupted
from infersight.alerts.notifiers.alertmanager import AlertmanagerNotifier
from infersight.alerts.notifiers.pagerduty import PagerDutyNotifier
from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.alerts.notify import Event, Notification, Notifier
from infersight.core.burn import Incident, Severity, Transition
from infersight.service.diagnosis import DiagnosisListener
from infersight.service.notifications import Announcer, Delivery, FollowUp
from infersight.storage import signals
from infersight.storage.outbox import CLAIM_LEASE, MessageState, Outbox
from tests.alerts.committed import T0, committed_step
from tests.conftest import Store
from tests.doubles import Endpoint


def _notifiers() -> tuple[dict[str, Notifier], dict[str, Endpoint]]:
    ends = {name: Endpoint() for name in ("slack", "pagerduty", "alertmanager")}
    notifiers: dict[str, Notifier] = {
        "slack": SlackNotifier("https://hooks.slack.test/x", ends["slack"].client()),
        "pagerduty": PagerDutyNotifier(
            "rk-0123456789", ends["pagerduty"].client(), url="https://pd.test/"
        ),
        "alertmanager": AlertmanagerNotifier("https://am.test", ends["alertmanager"].client()),
    }
    return notifiers, ends


def _claimed_everywhere(outbox: Outbox, notifiers: dict[str, Notifier]) -> None:
    """One page per receiver, each claimed and never settled (the process died mid-send)."""
    n = Notification(7, "chat", "*", "page", Event.TRIGGER, T0, T0)
    for name, notifier in notifiers.items():
        assert outbox.enqueue(name, n.key, json.dumps(notifier.render(n)), T0)
    for message in outbox.due(T0):
        assert outbox.claim(message.id, T0)
        assert not outbox.claim(message.id, T0)  # a claim is taken once


def test_an_interrupted_attempt_is_sent_again_only_where_the_receiver_deduplicates(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    notifiers, ends = _notifiers()
    outbox = Outbox(store.engine)
    _claimed_everywhere(outbox, notifiers)
    # The restarted deliverer's first pass settles every claim before it sends anything.
    assert recover_interrupted(outbox, notifiers, T0 + timedelta(seconds=5), every=True) == (2, 1)
    report = deliver_due(outbox, notifiers, T0 + timedelta(seconds=5))
    assert report.delivered == 2
    assert [len(ends[name].accepted) for name in ("slack", "pagerduty", "alertmanager")] == [
        0,
        1,
        1,
    ]
    states = {m.notifier: (m.state, m.attempts) for m in outbox.messages()}
    assert states == {
        "slack": (MessageState.UNKNOWN, 1),
        "pagerduty": (MessageState.DELIVERED, 2),
        "alertmanager": (MessageState.DELIVERED, 2),
    }
    [slack] = outbox.messages("slack")
    assert "not sent again" in slack.last_error
    warned = [r for r in caplog.records if "not sent again" in r.getMessage()]
    assert len(warned) == 1
    # Nothing later sends it: the unknown message is history.
    deliver_due(outbox, notifiers, T0 + timedelta(hours=1))
    assert ends["slack"].accepted == []


def test_a_claim_outliving_its_lease_is_settled_without_a_restart(store: Store) -> None:
    notifiers, ends = _notifiers()
    outbox = Outbox(store.engine)
    _claimed_everywhere(outbox, notifiers)
    assert recover_interrupted(outbox, notifiers, T0 + CLAIM_LEASE / 2) == (0, 0)
    assert deliver_due(outbox, notifiers, T0 + CLAIM_LEASE / 2).delivered == 0  # still claimed
    assert recover_interrupted(outbox, notifiers, T0 + CLAIM_LEASE) == (2, 1)
    assert deliver_due(outbox, notifiers, T0 + CLAIM_LEASE).delivered == 2
    assert ends["slack"].accepted == []


def test_messages_enqueued_in_a_transaction_that_rolls_back_are_not_there(store: Store) -> None:
    outbox = Outbox(store.engine)
    with store.engine.connect() as connection:
        transaction = connection.begin()
        assert outbox.enqueue("slack", "k:1:trigger:page", "{}", T0, connection=connection)
        transaction.rollback()  # the process stopped before the commit
    assert outbox.messages() == []
    with store.engine.begin() as connection:
        assert outbox.enqueue("slack", "k:1:trigger:page", "{}", T0, connection=connection)
        assert not outbox.enqueue("slack", "k:1:trigger:page", "{}", T0, connection=connection)
    assert [m.key for m in outbox.messages()] == ["k:1:trigger:page"]


# -- what a crash between the evaluation's commit and the notifications kept back ------------


def _follow_up(store: Store, pager: Endpoint) -> tuple[Announcer, FollowUp]:
    """A restarted process's follow-up job, PagerDuty its one receiver."""
    pd = PagerDutyNotifier("rk-0123456789", pager.client(), url="https://pd.test/")
    announcer = Announcer(store.sql, {"pagerduty": pd}, lambda: T0)
    listener = DiagnosisListener(store.sql, announce=announcer)
    return announcer, FollowUp(listener, Delivery(store.sql, {"pagerduty": pd}))


def _paged(store: Store, announcer: Announcer, severity: Severity, at: datetime) -> Incident:
    incident = committed_step(store, severity, Transition.OPENED, at)
    signals.save_diagnosis(store.engine, incident.id, {"slo": "chat"}, {"cause": "overload"}, at)
    announcer(incident, Transition.OPENED, {"slo": "chat"}, {"cause": "overload"})
    return incident


def test_an_escalation_committed_before_a_crash_is_paged_after_the_restart(store: Store) -> None:
    pager = Endpoint()
    announcer, follow_up = _follow_up(store, pager)
    _paged(store, announcer, Severity.TICKET, T0)
    follow_up(T0)
    committed_step(store, Severity.PAGE, Transition.ESCALATED, T0 + timedelta(seconds=30))
    # The restarted process's follow-up (the same objects: nothing in them knows of the crash).
    _, restarted = _follow_up(store, pager)
    restarted(T0 + timedelta(seconds=40))
    restarted(T0 + timedelta(seconds=50))
    assert [(b["event_action"], b["payload"]["severity"]) for b in pager.accepted] == [
        ("trigger", "warning"),
        ("trigger", "critical"),
    ]


def test_a_resolution_committed_before_a_crash_is_sent_after_the_restart(store: Store) -> None:
    pager = Endpoint()
    announcer, follow_up = _follow_up(store, pager)
    _paged(store, announcer, Severity.PAGE, T0)
    follow_up(T0)
    resolved_at = T0 + timedelta(minutes=20)
    committed_step(store, None, Transition.RESOLVED, resolved_at)
    _, restarted = _follow_up(store, pager)
    restarted(resolved_at + timedelta(minutes=6))  # past the flap hold-down
    assert [b["event_action"] for b in pager.accepted] == ["trigger", "resolve"]


def test_a_missing_resolve_is_not_sent_once_a_later_incident_holds_the_alert(store: Store) -> None:
    pager = Endpoint()
    announcer, follow_up = _follow_up(store, pager)
    _paged(store, announcer, Severity.PAGE, T0)
    follow_up(T0)
    committed_step(store, None, Transition.RESOLVED, T0 + timedelta(minutes=20))
    _paged(store, announcer, Severity.PAGE, T0 + timedelta(minutes=21))  # flapped back open
    _, restarted = _follow_up(store, pager)
    restarted(T0 + timedelta(minutes=30))
    assert [b["event_action"] for b in pager.accepted] == ["trigger", "trigger"]
