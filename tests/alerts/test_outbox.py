"""The outbox and its dispatch on a real store: retries, refusals, no duplicates, restarts."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import httpx

from infersight.alerts.dispatch import Backoff, deliver_due
from infersight.alerts.notifiers.pagerduty import PagerDutyNotifier
from infersight.alerts.notify import Event, Notification
from infersight.storage.engine import create_store_engine
from infersight.storage.outbox import MessageState, Outbox
from tests.conftest import Store

T0 = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)


class Endpoint:
    """A PagerDuty-like endpoint behind ``httpx.MockTransport`` that answers from a script."""

    def __init__(self, *statuses: int | tuple[int, dict[str, str]]) -> None:
        self.script = list(statuses)
        self.received: list[dict[str, object]] = []
        self.accepted: list[dict[str, object]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.received.append(body)
        answer = self.script.pop(0) if self.script else 202
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        if 200 <= status < 300:
            self.accepted.append(body)
        return httpx.Response(status, headers=headers)

    def notifier(self) -> PagerDutyNotifier:
        client = httpx.Client(transport=httpx.MockTransport(self))
        return PagerDutyNotifier("routing-key-0123456789", client, url="https://pd.test/v2/enqueue")


def _enqueue(outbox: Outbox, notifier: PagerDutyNotifier, incident_id: int = 1) -> bool:
    n = Notification(incident_id, "chat", "*", "page", Event.TRIGGER, T0, T0)
    return outbox.enqueue("pagerduty", n.key, json.dumps(notifier.render(n)), T0)


def test_429_then_500_then_success_is_exactly_one_delivery(store: Store) -> None:
    endpoint = Endpoint((429, {"Retry-After": "30"}), 500)
    pd = endpoint.notifier()
    outbox = Outbox(store.engine)
    assert _enqueue(outbox, pd)
    backoff = Backoff(base_s=5, max_s=600)
    first = deliver_due(outbox, {"pagerduty": pd}, T0, backoff)
    assert first.retried == 1
    assert deliver_due(outbox, {"pagerduty": pd}, T0 + timedelta(seconds=29), backoff).retried == 0
    assert len(endpoint.received) == 1  # Retry-After honoured
    second = deliver_due(outbox, {"pagerduty": pd}, T0 + timedelta(seconds=30), backoff)
    assert second.retried == 1
    third = deliver_due(outbox, {"pagerduty": pd}, T0 + timedelta(seconds=40), backoff)
    assert third.delivered == 1
    for minutes in (1, 10, 60):
        deliver_due(outbox, {"pagerduty": pd}, T0 + timedelta(minutes=minutes), backoff)
    assert len(endpoint.received) == 3
    assert len(endpoint.accepted) == 1
    [message] = outbox.messages()
    assert (message.state, message.attempts) == (MessageState.DELIVERED, 3)
    dedup = {b["dedup_key"] for b in endpoint.received}
    assert len(dedup) == 1  # the retries are the same event to PagerDuty


def test_a_4xx_other_than_429_is_never_retried(store: Store) -> None:
    endpoint = Endpoint(400)
    pd = endpoint.notifier()
    outbox = Outbox(store.engine)
    _enqueue(outbox, pd)
    assert deliver_due(outbox, {"pagerduty": pd}, T0).failed == 1
    for hours in (1, 2, 24):
        deliver_due(outbox, {"pagerduty": pd}, T0 + timedelta(hours=hours))
    assert len(endpoint.received) == 1
    [message] = outbox.messages()
    assert message.state is MessageState.FAILED
    assert message.last_error == "HTTP 400"


def test_the_same_notification_enqueued_twice_pages_once(store: Store) -> None:
    endpoint = Endpoint()
    pd = endpoint.notifier()
    outbox = Outbox(store.engine)
    assert _enqueue(outbox, pd)
    assert not _enqueue(outbox, pd)
    deliver_due(outbox, {"pagerduty": pd}, T0)
    deliver_due(outbox, {"pagerduty": pd}, T0 + timedelta(minutes=5))
    assert len(endpoint.accepted) == 1
    assert outbox.pending() == 0


def test_undelivered_notifications_survive_a_restart(store: Store) -> None:
    down = Endpoint(503, 503)
    outbox = Outbox(store.engine)
    _enqueue(outbox, down.notifier(), incident_id=1)
    _enqueue(outbox, down.notifier(), incident_id=2)
    assert deliver_due(outbox, {"pagerduty": down.notifier()}, T0).retried == 2
    # "Restart": a new engine and new objects over the same database.
    engine = create_store_engine(store.url)
    try:
        up = Endpoint()
        after = deliver_due(Outbox(engine), {"pagerduty": up.notifier()}, T0 + timedelta(hours=1))
        assert after.delivered == 2
        assert len(up.accepted) == 2
        assert Outbox(engine).pending() == 0
    finally:
        engine.dispose()


def test_backoff_grows_and_is_capped() -> None:
    backoff = Backoff(base_s=5, max_s=600, max_retry_after_s=3600)
    assert [backoff.delay(n, None) for n in range(4)] == [5, 10, 20, 40]
    assert backoff.delay(20, None) == 600
    assert backoff.delay(0, 30.0) == 30.0
    assert backoff.delay(0, 86400.0) == 3600
