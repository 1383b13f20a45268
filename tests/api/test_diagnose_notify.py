"""Incident → diagnosis → outbox → notifiers, through the app's own evaluator and delivery job.

The store holds the compressed thermal-throttle scenario (``bench/harness/scenarios.py``); a TPOT
SLO on the 70B model pages six minutes into the fault. Endpoints are ``httpx.MockTransport``
fakes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from bench.harness import scenarios
from infersight.alerts.notifiers.pagerduty import PagerDutyNotifier
from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.query import Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.storage import slo_store
from infersight.storage.outbox import MessageState, Outbox
from infersight.storage.tables import gpu_samples
from infersight.storage.writer import open_writer
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
        request.addfinalizer(app.state.context.jobs.stop)
        slo_store.put_slo(store.engine, TPOT, scenario.start)
        return Api(app, clock), scenario, pager, chat

    return make


def _evaluate(api: Api, at: Any) -> Any:
    api.clock.now = at
    return api.app.state.context.evaluator.run(at)


def test_a_page_reaches_every_notifier_once_with_its_diagnosis(setup: Any) -> None:
    api, scenario, pager, chat = setup()
    incident, _ = scenarios.windows(scenario)
    opened = _evaluate(api, incident.start + timedelta(minutes=6))
    assert [t.value for _, t in opened.changes] == ["opened"]
    assert pager.accepted == chat.accepted == []  # evaluation only enqueues
    messages = Outbox(api.app.state.context.engine).messages()
    assert sorted(m.notifier for m in messages) == ["pagerduty", "slack"]
    jobs = api.app.state.context.jobs
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
    jobs = api.app.state.context.jobs
    evaluations = 0
    for minutes in range(0, 60, 2):
        at = start + timedelta(minutes=minutes)
        api.clock.now = at
        assert jobs.tick_delivery(), jobs.last_error
        if at < incident.end:  # evaluation goes on while the endpoint is down (data ends here)
            assert api.app.state.context.evaluator.run(at).changes == ()
            evaluations += 1
    assert evaluations == 2
    assert len(chat.accepted) == 1
    assert pager.accepted == []
    outbox = Outbox(api.app.state.context.engine)
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
    assert Outbox(api.app.state.context.engine).messages() == []
    [alert] = api.get("/api/v1/incidents").json()["incidents"]
    assert alert["diagnosis"]["cause"] == "gpu_throttled"


def test_a_changed_diagnosis_updates_the_open_alert_without_a_new_page(setup: Any) -> None:
    api, scenario, pager, chat = setup()
    # The GPU metrics lag (a stalled exporter): the first diagnosis cannot see the throttling.
    engine = api.app.state.context.engine
    with engine.begin() as connection:
        connection.execute(gpu_samples.delete())
    incident, _ = scenarios.windows(scenario)
    early = incident.start + timedelta(minutes=1)
    opened = _evaluate(api, early)
    assert [t.value for _, t in opened.changes] == ["opened"]
    jobs = api.app.state.context.jobs
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
    [alert] = api.get("/api/v1/incidents").json()["incidents"]
    assert alert["diagnosis"]["cause"] == "gpu_throttled"
    assert alert["onset"]["cause"] == early_cause  # the page's cause stays in the record
    verdicts = [h["verdict"] for h in api.get(f"/api/v1/incidents/{alert['id']}").json()["history"]]
    assert verdicts == ["onset", "kept", "raised", "kept"]
