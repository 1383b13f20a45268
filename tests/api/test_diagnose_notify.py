"""Incident → diagnosis → outbox → notifiers, through the app's own evaluator and delivery job.

The store holds the compressed thermal-throttle scenario (``bench/harness/scenarios.py``); a TPOT
SLO on the 70B model pages six minutes into the fault. Endpoints are ``httpx.MockTransport``
fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from alerts.dispatch import deliver_due
from alerts.notifiers.pagerduty import PagerDutyNotifier
from alerts.notifiers.slack import SlackNotifier
from api import create_app
from api.settings import ApiSettings
from bench.harness import scenarios
from core.burn import AlertState, Incident, IncidentState, Severity, Transition
from core.query import Selector
from core.slo import Sli, SliKind, SloSpec
from service.notifications import Announcer
from storage import incidents, signals, slo_store
from storage.outbox import MessageState, Outbox
from storage.tables import gpu_samples
from storage.writer import open_writer
from tests.api.conftest import Api
from tests.conftest import Store
from tests.doubles import Endpoint, FakeClock

TPOT = SloSpec(
    "70b-tpot",
    Sli(SliKind.LATENCY, "tpot", 0.03),
    0.99,
    timedelta(days=7),
    Selector(model="meta-llama/Llama-3.1-70B-Instruct"),
)
_cache: dict[str, Any] = {}


@pytest.fixture
def setup(
    store: Store, request: pytest.FixtureRequest
) -> Callable[..., tuple[Api, Any, Endpoint, Endpoint]]:
    if "run" not in _cache:
        _cache["run"] = scenarios.simulate("fault-thermal-throttle")
    scenario, batch = _cache["run"]
    scenarios.store_batch(store.engine, batch)

    def make() -> tuple[Api, Any, Endpoint, Endpoint]:
        pager, chat = Endpoint(), Endpoint()
        notifiers = {
            "pagerduty": PagerDutyNotifier("rk-0123456789", pager.client(), url="https://pd.test/"),
            "slack": SlackNotifier("https://hooks.slack.test/x", chat.client()),
        }
        clock = FakeClock(scenario.start)
        app = create_app(
            ApiSettings(run_jobs=False),
            store.engine,
            clock,
            notifiers=notifiers,
            dashboard_url="http://127.0.0.1:8080/",
        )
        # The jobs' leader lock (a PostgreSQL advisory lock) must not outlive the test.
        request.addfinalizer(app.state.jobs.stop)
        slo_store.put_slo(store.engine, TPOT, scenario.start)
        return Api(app, clock), scenario, pager, chat

    return make


def _evaluate(api: Api, at: Any) -> Any:
    api.clock.now = at
    return api.app.state.evaluator.run(at)


def test_a_page_reaches_every_notifier_once_with_its_diagnosis(setup: Any) -> None:
    api, scenario, pager, chat = setup()
    incident, _ = scenarios.windows(scenario)
    opened = _evaluate(api, incident.start + timedelta(minutes=6))
    assert [t.value for _, t in opened.changes] == ["opened"]
    assert pager.accepted == chat.accepted == []  # evaluation only enqueues
    messages = Outbox(api.app.state.engine).messages()
    assert sorted(m.notifier for m in messages) == ["pagerduty", "slack"]
    jobs = api.app.state.jobs
    assert jobs.tick_delivery()
    assert jobs.tick_delivery()
    [page] = pager.accepted
    assert page["payload"]["custom_details"]["diagnosis"]["cause"] == "gpu_throttled"
    assert page["payload"]["severity"] == "critical"
    [message] = chat.accepted
    assert "gpu_throttled" in message["text"]


def test_an_endpoint_down_for_an_hour_delays_only_its_own_messages(setup: Any) -> None:
    api, scenario, pager, chat = setup()
    pager.up = False
    incident, _ = scenarios.windows(scenario)
    start = incident.start + timedelta(minutes=6)
    _evaluate(api, start)
    jobs = api.app.state.jobs
    evaluations = 0
    for minutes in range(0, 60, 2):
        at = start + timedelta(minutes=minutes)
        api.clock.now = at
        assert jobs.tick_delivery(), jobs.last_error
        if at < incident.end:  # evaluation goes on while the endpoint is down (data ends here)
            assert api.app.state.evaluator.run(at).changes == ()
            evaluations += 1
    assert evaluations == 2
    assert len(chat.accepted) == 1
    assert pager.accepted == []
    outbox = Outbox(api.app.state.engine)
    [pending] = [m for m in outbox.messages() if m.notifier == "pagerduty"]
    assert pending.state is MessageState.PENDING
    assert pending.attempts >= 3
    pager.up = True
    api.clock.now = start + timedelta(hours=2)
    jobs.tick_delivery()
    jobs.tick_delivery()
    assert len(pager.accepted) == 1


def test_a_silenced_slo_is_diagnosed_but_not_notified(setup: Any) -> None:
    api, scenario, _pager, _chat = setup()
    incident, _ = scenarios.windows(scenario)
    api.clock.now = incident.start
    created = api.request(
        "POST", "/api/v1/silences", json={"matchers": {"slo": "70b-tpot"}, "duration_s": 3600}
    )
    assert created.status_code == 201
    _evaluate(api, incident.start + timedelta(minutes=6))
    assert Outbox(api.app.state.engine).messages() == []
    [alert] = api.get("/api/v1/alerts").json()["alerts"]
    assert alert["diagnosis"]["cause"] == "gpu_throttled"


def test_an_alert_that_flaps_within_the_hold_down_pages_once(store: Store) -> None:
    pager = Endpoint()
    pd = PagerDutyNotifier("rk-0123456789", pager.client(), url="https://pd.test/")
    t0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    now = [t0]
    announce = Announcer(store.engine, {"pagerduty": pd}, lambda: now[0])

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
    announce = Announcer(store.engine, {"pagerduty": pd}, lambda: now[0])
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


def test_a_changed_diagnosis_updates_the_open_alert_without_a_new_page(setup: Any) -> None:
    api, scenario, pager, chat = setup()
    # The GPU metrics lag (a stalled exporter): the first diagnosis cannot see the throttling.
    engine = api.app.state.engine
    with engine.begin() as connection:
        connection.execute(gpu_samples.delete())
    incident, _ = scenarios.windows(scenario)
    early = incident.start + timedelta(minutes=1)
    opened = _evaluate(api, early)
    assert [t.value for _, t in opened.changes] == ["opened"]
    jobs = api.app.state.jobs
    assert jobs.tick_delivery()
    [first] = pager.accepted
    early_cause = first["payload"]["custom_details"]["diagnosis"]["cause"]
    assert early_cause not in ("gpu_throttled", "unknown")
    open_writer(engine).write_gpu_samples(_cache["run"][1].gpu_samples)
    api.clock.now = early + timedelta(minutes=5)
    assert jobs.tick_delivery()  # re-diagnoses: a stronger cause, not confirmed yet
    assert [b["event_action"] for b in pager.accepted] == ["trigger"]
    api.clock.now = early + timedelta(minutes=7)
    assert jobs.tick_delivery()  # confirmed: raised over the headline, announced, delivered
    assert jobs.tick_delivery()
    assert [b["event_action"] for b in pager.accepted] == ["trigger", "trigger"]
    update = pager.accepted[1]
    assert update["dedup_key"] == first["dedup_key"]  # the same PagerDuty incident
    assert update["payload"]["custom_details"]["diagnosis"]["cause"] == "gpu_throttled"
    assert "UPDATE" in update["payload"]["summary"]
    assert [m["text"].split("]")[0] for m in chat.accepted][1].endswith("UPDATE")
    api.clock.now = early + timedelta(minutes=10)
    jobs.tick_delivery()
    jobs.tick_delivery()
    assert len(pager.accepted) == 2  # an unchanged diagnosis sends nothing new
    [alert] = api.get("/api/v1/alerts").json()["alerts"]
    assert alert["diagnosis"]["cause"] == "gpu_throttled"
    assert alert["onset"]["cause"] == early_cause  # the page's cause stays in the record
    verdicts = [h["verdict"] for h in api.get(f"/api/v1/alerts/{alert['id']}").json()["history"]]
    assert verdicts == ["onset", "kept", "raised", "kept"]
