"""The announcer's flap hold-down (``service.notifications.Announcer``): incidents of one SLO
and scope that resolve and open again within it page once, and what is new in the next one is
told as an update of the open alert; delivered by ``alerts.dispatch`` to a PagerDuty endpoint
behind ``httpx.MockTransport``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infersight.alerts.dispatch import deliver_due
from infersight.alerts.notifiers.pagerduty import PagerDutyNotifier
from infersight.core.burn import AlertState, Incident, IncidentState, Severity, Transition
from infersight.service.notifications import Announcer
from infersight.storage import incidents, signals
from infersight.storage.outbox import Outbox
from tests.conftest import Store
from tests.doubles import Endpoint


def test_an_alert_that_flaps_within_the_hold_down_pages_once(store: Store) -> None:
    pager = Endpoint()
    pd = PagerDutyNotifier("rk-0123456789", pager.client(), url="https://pd.test/")
    t0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    now = [t0]
    announce = Announcer(store.sql, {"pagerduty": pd}, lambda: now[0])

    def incident(number: int, opened: datetime, resolved: datetime | None = None) -> Incident:
        state = IncidentState.RESOLVED if resolved else IncidentState.FIRING
        return Incident(number, "chat", "*", Severity.PAGE, state, opened, resolved or opened,
                        resolved)  # fmt: skip

    def deliver(at: datetime) -> None:
        now[0] = at
        deliver_due(Outbox(store.engine), {"pagerduty": pd}, at)

    announce(incident(1, t0), Transition.OPENED, {}, {"cause": "overload"})
    deliver(t0)
    resolved_at = t0 + timedelta(minutes=10)
    now[0] = resolved_at
    announce(incident(1, t0, resolved_at), Transition.RESOLVED, {}, {})
    deliver(resolved_at + timedelta(minutes=1))  # the resolve is held back
    reopened = resolved_at + timedelta(minutes=2)
    now[0] = reopened
    announce(incident(2, reopened), Transition.OPENED, {}, {"cause": "overload"})
    deliver(reopened + timedelta(minutes=10))
    assert [b["event_action"] for b in pager.accepted] == ["trigger"]  # one page, still open
    final = reopened + timedelta(minutes=20)
    now[0] = final
    announce(incident(2, reopened, final), Transition.RESOLVED, {}, {})
    deliver(final + timedelta(minutes=6))
    assert [b["event_action"] for b in pager.accepted] == ["trigger", "resolve"]
    assert len({b["dedup_key"] for b in pager.accepted}) == 1
    states = sorted(m.state.value for m in Outbox(store.engine).messages())
    assert states == ["cancelled", "delivered", "delivered"]


@pytest.mark.parametrize(
    ("first_severity", "second"),
    [
        (Severity.PAGE, {"cause": "kv_cache_pressure", "instance": "vllm-8b-1"}),
        (Severity.TICKET, {"cause": "overload", "instance": "vllm-8b-0"}),
    ],
    ids=["another instance", "same cause, now a page"],
)
def test_an_incident_that_opens_within_the_hold_down_with_news_is_told(
    store: Store, first_severity: Severity, second: dict[str, Any]
) -> None:
    # The first fault's incident resolved; the next incident of the same SLO and scope opens
    # two minutes later, inside the resolve's hold-down: on another instance, or as a page
    # after a ticket.
    pager = Endpoint()
    pd = PagerDutyNotifier("rk-0123456789", pager.client(), url="https://pd.test/")
    t0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    now = [t0]
    announce = Announcer(store.sql, {"pagerduty": pd}, lambda: now[0])
    first_cause = {"cause": "overload", "instance": "vllm-8b-0"}

    def opened(at: datetime, diagnosis: dict[str, Any], severity: Severity) -> Incident:
        with store.engine.begin() as connection:
            incident = incidents.apply_step(
                connection, "chat", "*", AlertState(severity, at), Transition.OPENED,
                {"5m": 20.0}, at,
            )  # fmt: skip
        assert incident is not None
        signals.save_diagnosis(store.engine, incident.id, {}, diagnosis, at)
        announce(incident, Transition.OPENED, {}, diagnosis)
        return incident

    def resolved(incident: Incident, at: datetime) -> None:
        now[0] = at
        with store.engine.begin() as connection:
            done = incidents.apply_step(
                connection, "chat", "*", AlertState(), Transition.RESOLVED, {"5m": 0.0}, at,
                current=incident,
            )  # fmt: skip
        assert done is not None
        announce(done, Transition.RESOLVED, {}, first_cause)

    def deliver(at: datetime) -> None:
        now[0] = at
        deliver_due(Outbox(store.engine), {"pagerduty": pd}, at)

    first = opened(t0, first_cause, first_severity)
    deliver(t0)
    resolved(first, t0 + timedelta(minutes=10))
    reopened = t0 + timedelta(minutes=12)
    now[0] = reopened
    opened(reopened, second, Severity.PAGE)
    deliver(reopened + timedelta(minutes=10))
    # The receiver's alert stays open (the resolve was withdrawn) and learns of the new cause:
    # an update under the same dedup key, not a second page.
    assert [b["event_action"] for b in pager.accepted] == ["trigger", "trigger"]
    update = pager.accepted[1]
    assert update["dedup_key"] == pager.accepted[0]["dedup_key"]
    assert update["payload"]["summary"].startswith("[PAGE UPDATE]")
    assert second["cause"] in update["payload"]["summary"]
    assert second["instance"] in update["payload"]["summary"]
    assert update["payload"]["severity"] == "critical"


def test_a_page_links_to_its_incident_page(store: Store) -> None:
    """The receivers' link is the incident's own page (diagnosis, evidence, profile), not the
    dashboard's front page."""
    pager = Endpoint()
    pd = PagerDutyNotifier("rk-0123456789", pager.client(), url="https://pd.test/")
    t0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    announce = Announcer(
        store.sql, {"pagerduty": pd}, lambda: t0, dashboard_url="https://slo.example.com/"
    )
    opened = Incident(42, "chat", "*", Severity.PAGE, IncidentState.FIRING, t0, t0, None)
    announce(opened, Transition.OPENED, {}, {"cause": "overload"})
    deliver_due(Outbox(store.engine), {"pagerduty": pd}, t0)
    (body,) = pager.accepted
    assert body["client_url"] == "https://slo.example.com/ui/incidents/42"
    assert body["links"][0]["href"] == "https://slo.example.com/ui/incidents/42"
