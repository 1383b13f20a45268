"""What the HTTP API shows of an evaluation: the SLO with its open alert and the metrics
export, an SLO deleted with its incident open, the alerts by state (the outage of
``tests/service/test_evaluation.py``, evaluated by ``service.evaluation``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.core.burn import IncidentState
from infersight.service.evaluation import Evaluator, default_policy
from infersight.storage import incidents
from infersight.storage.sql_store import SqlStore
from tests.api.conftest import Api
from tests.conftest import Store
from tests.doubles import NOW
from tests.service.test_evaluation import stored_outage


@pytest.fixture
def outage(store: Store) -> Store:
    return stored_outage(store)


def test_the_slo_route_shows_the_open_alert_and_metrics_export_the_status(outage, api: Api):
    Evaluator(SqlStore(outage.engine), default_policy()).run(NOW)
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
    Evaluator(SqlStore(outage.engine), default_policy()).run(NOW)
    assert api.delete("/api/v1/slos/chat-avail").status_code == 204
    [incident] = incidents.list_incidents(outage.engine)
    assert incident.state is IncidentState.RESOLVED


def test_the_alerts_route_lists_incidents_by_state(outage, api: Api):
    evaluator = Evaluator(SqlStore(outage.engine), default_policy())
    evaluator.run(NOW)
    [firing] = api.get("/api/v1/incidents").json()["incidents"]
    assert (firing["slo"], firing["severity"], firing["state"], firing["scope"]) == (
        "chat-avail", "page", "firing", "*",
    )  # fmt: skip
    assert firing["diagnosis"] is None
    evaluator.run(NOW + timedelta(hours=7))
    assert api.get("/api/v1/incidents").json()["incidents"] == []
    [resolved] = api.get("/api/v1/incidents", params={"state": "resolved"}).json()["incidents"]
    assert resolved["id"] == firing["id"]
    assert resolved["resolved_at"] == "2026-11-20T19:00:17Z"
    assert len(api.get("/api/v1/incidents", params={"state": "all"}).json()["incidents"]) == 1
    bad = api.get("/api/v1/incidents", params={"state": "open"})
    assert bad.status_code == 400
