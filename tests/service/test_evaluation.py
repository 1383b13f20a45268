"""The evaluation job end to end: stored requests → burn rates → one incident → listeners."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from core.burn import Incident, IncidentState, Severity, Transition
from core.query import Selector
from core.slo import Sli, SliKind, SloSpec
from service.evaluation import Evaluator, default_policy
from storage import incidents, slo_store
from storage.writer import open_writer
from tests.api.conftest import Api
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


@pytest.fixture
def outage(store):
    """Two quiet hours of healthy traffic, then two minutes in which every request fails."""
    rng = np.random.default_rng(2)
    healthy = make_records(rng, OUTAGE - timedelta(hours=2), 7200, span=timedelta(hours=2),
                           error_rate=0.0)  # fmt: skip
    failing = make_records(rng, OUTAGE, 120, span=timedelta(minutes=2), error_rate=1.0)
    open_writer(store.engine).write_requests(healthy + failing)
    slo_store.put_slo(store.engine, AVAILABILITY, NOW)
    return store


def _replay(outage, policy):
    recorder = Recorder()
    evaluator = Evaluator(outage.engine, policy, [Broken(), recorder])
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
    report = Evaluator(outage.engine, default_policy()).run(NOW)
    assert [(i.slo, t) for i, t in report.changes] == [("chat-avail", Transition.OPENED)]


def test_the_slo_route_shows_the_open_alert_and_metrics_export_the_status(outage, api: Api):
    Evaluator(outage.engine, default_policy()).run(NOW)
    body = api.get("/api/v1/slos/chat-avail").json()
    assert body["alert"]["severity"] == "page"
    assert body["status"]["firing"] == "page"
    status = body["status"]
    assert status["events"] == 7320
    assert status["bad_events"] == 120
    assert status["sli"] == pytest.approx(7200 / 7320)
    assert status["error_budget_remaining"] == 0.0

    text = api.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    burn = {s.labels["window"]: s.value for s in families["infersight_slo_burn_rate"].samples}
    assert burn == pytest.approx(status["burn_rates"])
    [sli] = families["infersight_slo_sli_ratio"].samples
    assert sli.labels == {"slo": "chat-avail", "sli": "availability", "scope": "*"}
    assert sli.value == pytest.approx(status["sli"])
    [objective] = families["infersight_slo_objective_ratio"].samples
    assert objective.value == pytest.approx(0.999)
    [budget] = families["infersight_slo_error_budget_remaining_ratio"].samples
    assert budget.value == 0.0
    latency = families["infersight_latency_seconds"].samples
    assert {(s.labels["metric"], s.labels["model"]) for s in latency} == {
        (m, model) for m in ("ttft", "tpot", "e2e") for model in ("llama-8b", "llama-70b")
    }
    assert {s.labels["quantile"] for s in latency} == {"0.5", "0.9", "0.95", "0.99"}


def test_deleting_an_slo_resolves_its_open_incident(outage, api: Api):
    Evaluator(outage.engine, default_policy()).run(NOW)
    assert api.delete("/api/v1/slos/chat-avail").status_code == 204
    [incident] = incidents.list_incidents(outage.engine)
    assert incident.state is IncidentState.RESOLVED


def test_re_scoping_an_slo_resolves_the_old_scope_and_tells_the_listeners(outage):
    recorder = Recorder()
    evaluator = Evaluator(outage.engine, default_policy(), [recorder])
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


def test_the_alerts_route_lists_incidents_by_state(outage, api: Api):
    evaluator = Evaluator(outage.engine, default_policy())
    evaluator.run(NOW)
    [firing] = api.get("/api/v1/alerts").json()["alerts"]
    assert (firing["slo"], firing["severity"], firing["state"], firing["scope"]) == (
        "chat-avail", "page", "firing", "*",
    )  # fmt: skip
    assert firing["diagnosis"] is None
    evaluator.run(NOW + timedelta(hours=7))
    assert api.get("/api/v1/alerts").json()["alerts"] == []
    [resolved] = api.get("/api/v1/alerts", params={"state": "resolved"}).json()["alerts"]
    assert resolved["id"] == firing["id"]
    assert resolved["resolved_at"] == "2026-11-20T19:00:17Z"
    assert len(api.get("/api/v1/alerts", params={"state": "all"}).json()["alerts"]) == 1
    bad = api.get("/api/v1/alerts", params={"state": "open"})
    assert bad.status_code == 400
