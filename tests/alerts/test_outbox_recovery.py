"""The outbox after a crash, on a real store (#32): an attempt is claimed before it is sent; a
claim left without an outcome is sent again only to a receiver that deduplicates; an incident
change and its messages commit together. ``test_crash_consistency`` kills real processes; this
covers every receiver and the claim's lease without one."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from infersight.alerts.dispatch import deliver_due, recover_interrupted
from infersight.alerts.notifiers.alertmanager import AlertmanagerNotifier
from infersight.alerts.notifiers.pagerduty import PagerDutyNotifier
from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.alerts.notify import Event, Notification, Notifier
from infersight.storage.outbox import CLAIM_LEASE, MessageState, Outbox
from tests.conftest import Store
from tests.doubles import Endpoint

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


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
