"""The outbox across a change of jobs leader, and a notifier that raises (#32), on a real store.

A replica that takes the lead again settles what the leader before it left half done: the
notifications of an escalation it committed without them (``Announcer.reconcile``) and the
claims it left mid-send (``recover``), on its first pass of the new term, not only after a
process start. A leader that lost the lead mid-send and reports its outcome late does not
overwrite what its successor decided since. A notifier that raises leaves its message due
again, not ``sending`` (then ``unknown``)."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import httpx
import pytest

from infersight.alerts.dispatch import deliver_due, recover_interrupted
from infersight.alerts.notifiers.pagerduty import PagerDutyNotifier
from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.alerts.notify import Event, Notification, Notifier
from infersight.core.burn import Severity, Transition
from infersight.service.diagnosis import DiagnosisListener
from infersight.service.evaluation import Evaluator, default_policy
from infersight.service.jobs import Jobs
from infersight.service.notifications import Announcer, Delivery, FollowUp
from infersight.storage import signals
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.outbox import MessageState, Outbox
from tests.alerts.committed import T0, committed_step
from tests.conftest import Store
from tests.doubles import Endpoint, FakeClock

SLACK_URL = "https://hooks.slack.test/services/T000/B000/secret-part"


class ToggledLock:
    """A leader lock the test hands out and takes back (the advisory lock's two answers)."""

    def __init__(self) -> None:
        self.leads = True

    def acquire(self) -> bool:
        return self.leads

    def release(self) -> None:
        pass


def test_a_replica_that_takes_the_lead_again_reconciles_and_settles_every_claim(
    store: Store,
) -> None:
    pager = Endpoint()
    pd = PagerDutyNotifier("rk-0123456789", pager.client(), url="https://pd.test/")
    announcer = Announcer(store.sql, {"pagerduty": pd}, lambda: T0)
    listener = DiagnosisListener(store.sql, announce=announcer)
    follow_up = FollowUp(listener, Delivery(store.sql, {"pagerduty": pd}))
    lock, clock = ToggledLock(), FakeClock(T0)
    jobs = Jobs(
        store.sql,
        Evaluator(store.sql, default_policy()),
        RetentionPolicy(),
        clock,
        lock,
        evaluation_interval_s=30.0,
        maintenance_interval_s=3600.0,
        deliver=follow_up,
    )
    # This replica leads first: a ticket is paged and delivered.
    incident = committed_step(store, Severity.TICKET, Transition.OPENED, T0)
    signals.save_diagnosis(store.engine, incident.id, {"slo": "chat"}, {"cause": "overload"}, T0)
    announcer(incident, Transition.OPENED, {"slo": "chat"}, {"cause": "overload"})
    assert jobs.tick_delivery()
    assert [b["payload"]["severity"] for b in pager.accepted] == ["warning"]

    # Another replica leads; it escalates the incident and dies before its listener ran, with a
    # page of its own claimed and not sent.
    lock.leads = False
    clock.now = T0 + timedelta(seconds=30)
    assert not jobs.tick_delivery()
    committed_step(store, Severity.PAGE, Transition.ESCALATED, clock.now)
    other = Notification(99, "other", "*", "page", Event.TRIGGER, clock.now, clock.now)
    outbox = Outbox(store.engine)
    assert outbox.enqueue("pagerduty", other.key, json.dumps(pd.render(other)), clock.now)
    [claimed] = outbox.due(clock.now)
    assert outbox.claim(claimed.id, clock.now) == 1

    # This replica takes the lead again, long before the claim's lease runs out.
    lock.leads = True
    clock.now = T0 + timedelta(seconds=60)
    assert jobs.tick_delivery()
    assert jobs.tick_delivery()  # the escalation enqueued by the reconcile goes out
    sent = sorted((b["payload"]["summary"].split()[0], b["dedup_key"]) for b in pager.accepted)
    assert sent == [
        ("[PAGE]", "infersight/chat/*"),
        ("[PAGE]", "infersight/other/*"),
        ("[TICKET]", "infersight/chat/*"),
    ]
    assert {m.state for m in outbox.messages()} == {MessageState.DELIVERED}


def _answering(answer: httpx.Response, before: object = None) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        if callable(before):
            before()
        return answer

    return httpx.Client(transport=httpx.MockTransport(handle))


def test_a_late_outcome_of_a_superseded_claim_does_not_overwrite(store: Store) -> None:
    outbox = Outbox(store.engine)
    page = Notification(7, "chat", "*", "page", Event.TRIGGER, T0, T0)
    pager = Endpoint()
    successor = {"pagerduty": PagerDutyNotifier("rk-1", pager.client(), url="https://pd.test/")}

    def take_over() -> None:
        # While the old leader waits for its answer, the new one takes the lead: it settles
        # the claim (sent again: PagerDuty deduplicates) and delivers it.
        assert recover_interrupted(outbox, successor, T0, every=True) == (1, 0)
        assert deliver_due(outbox, successor, T0).delivered == 1

    late = _answering(httpx.Response(503), before=take_over)
    old = {"pagerduty": PagerDutyNotifier("rk-1", late, url="https://pd.test/")}
    assert outbox.enqueue("pagerduty", page.key, json.dumps(old["pagerduty"].render(page)), T0)
    assert deliver_due(outbox, old, T0).retried == 1  # the old leader's 503, late
    [message] = outbox.messages()
    assert (message.state, message.attempts) == (MessageState.DELIVERED, 2)
    assert deliver_due(outbox, successor, T0 + timedelta(hours=1)).delivered == 0
    assert len(pager.accepted) == 1
    # An outcome names its claim: attempt 1's is not recorded over attempt 2's.
    assert not outbox.failed(message.id, "HTTP 400", 1)
    assert not outbox.retry_at(message.id, T0, "HTTP 503", 1)


def test_a_late_answer_settles_a_slack_message_marked_unknown(store: Store) -> None:
    """The successor marked the claim ``unknown`` (Slack cannot deduplicate); the answer that
    then arrives is the outcome it lacked: delivered, or due again after a refusal."""
    outbox = Outbox(store.engine)
    for number, answer, state in (
        (1, httpx.Response(200), MessageState.DELIVERED),
        (2, httpx.Response(503), MessageState.PENDING),
    ):
        slack: dict[str, Notifier] = {}

        def mark_unknown(receivers: dict[str, Notifier] = slack) -> None:
            assert recover_interrupted(outbox, receivers, T0, every=True) == (0, 1)

        slack["slack"] = SlackNotifier(SLACK_URL, _answering(answer, before=mark_unknown))
        n = Notification(number, "chat", "*", "page", Event.TRIGGER, T0, T0)
        assert outbox.enqueue("slack", n.key, json.dumps(slack["slack"].render(n)), T0)
        deliver_due(outbox, slack, T0)
        [message] = outbox.messages(key_like=n.key)
        assert message.state is state


@pytest.mark.parametrize(
    "error",
    [
        httpx.TooManyRedirects(f"too many redirects from {SLACK_URL}"),
        RuntimeError(f"a bug quoting {SLACK_URL}"),
    ],
    ids=["too-many-redirects", "bug"],
)
def test_a_notifier_that_raises_leaves_its_message_due_again(
    store: Store, error: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="infersight")
    down = True
    got: list[dict[str, object]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if down:
            raise error
        got.append(json.loads(request.content))
        return httpx.Response(200)

    client = httpx.Client(transport=httpx.MockTransport(handle))
    notifiers: dict[str, Notifier] = {
        "slack": SlackNotifier(SLACK_URL, client),
        "pagerduty": PagerDutyNotifier("rk-0123456789", client, url="https://pd.test/"),
    }
    outbox = Outbox(store.engine)
    n = Notification(7, "chat", "*", "page", Event.TRIGGER, T0, T0)
    for name, notifier in notifiers.items():
        assert outbox.enqueue(name, n.key, json.dumps(notifier.render(n)), T0)
    assert deliver_due(outbox, notifiers, T0).retried == 2
    assert deliver_due(outbox, notifiers, T0 + timedelta(minutes=1)).retried == 2
    for message in outbox.messages():
        assert message.state is MessageState.PENDING
        assert message.last_error == f"the notifier raised {type(error).__name__}"
    # A pass after a restart (every claim settled) finds nothing claimed: nothing is unknown.
    assert recover_interrupted(outbox, notifiers, T0 + timedelta(hours=1), every=True) == (0, 0)
    down = False
    assert deliver_due(outbox, notifiers, T0 + timedelta(hours=1)).delivered == 2
    assert len(got) == 2
    # The traceback once per message (not per attempt), and never the secret URL.
    tracebacks = [r for r in caplog.records if "Traceback" in r.getMessage()]
    assert len(tracebacks) == 2
    assert "secret-part" not in caplog.text
