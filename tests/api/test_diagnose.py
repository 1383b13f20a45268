"""POST /api/v1/diagnose, and incidents diagnosed by the evaluation job (GET /api/v1/incidents).

The store holds a compressed shipped scenario (``bench/harness/scenarios.py``: 20
minutes, fault over the last ten) written through ``StoreSink`` → ``storage.writer``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from bench.harness import scenarios
from infersight.core.query import Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.storage import slo_store
from tests.api.conftest import Api
from tests.conftest import Store

_cache: dict[str, Any] = {}


@pytest.fixture
def throttled(store: Store) -> Any:
    """The thermal-throttle scenario in the store; returns the compressed scenario."""
    if "run" not in _cache:
        _cache["run"] = scenarios.simulate("fault-thermal-throttle")
    scenario, batch = _cache["run"]
    scenarios.store_batch(store.engine, batch)
    return scenario


def _iso(ts: Any) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def test_diagnose_names_the_throttled_instance_with_its_evidence(throttled: Any, api: Api) -> None:
    incident, _ = scenarios.windows(throttled)
    response = api.request(
        "POST",
        "/api/v1/diagnose",
        json={"start": _iso(incident.start), "end": _iso(incident.end)},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["cause"] == "gpu_throttled"
    assert body["instance"] == "vllm-70b-0"
    assert 0.5 <= body["confidence"] <= 1.0
    evidence = {e["signal"]: e for e in body["evidence"]}
    assert evidence["sm_clock_mhz"]["ratio"] == pytest.approx(0.55, abs=0.05)
    assert set(evidence["sm_clock_mhz"]) >= {"signal", "current", "baseline", "ratio"}
    assert isinstance(body["alternatives"], list)
    assert body["reference"]["end"] == body["window"]["start"]


def test_diagnose_of_a_healthy_model_is_unknown(throttled: Any, api: Api) -> None:
    incident, _ = scenarios.windows(throttled)
    body = api.request(
        "POST",
        "/api/v1/diagnose",
        json={
            "start": _iso(incident.start),
            "end": _iso(incident.end),
            "model": "meta-llama/Llama-3.1-8B-Instruct",
        },
    ).json()
    assert body["cause"] == "unknown"
    assert body["confidence"] <= 0.2
    assert {e["signal"] for e in body["symptoms"]} >= {"ttft_p90", "tpot_p90"}  # data was read


@pytest.mark.parametrize(
    "body",
    [
        {"start": "2026-01-05T09:20:00Z"},
        {"start": "2026-01-05T09:20:00Z", "end": "2026-01-05T09:10:00Z"},
        {"start": "2026-01-05T09:00:00Z", "end": "2026-01-07T09:00:00Z"},
        {"start": "0", "end": "60", "reference_start": "0"},
        {"start": "0", "end": "60", "colour": "blue"},
    ],
    ids=["no end", "end before start", "over a day", "half a reference", "unknown field"],
)
def test_an_invalid_diagnose_request_gets_the_one_error_shape(api: Api, body: Any) -> None:
    response = api.request("POST", "/api/v1/diagnose", json=body)
    assert response.status_code == 400
    assert set(response.json()["error"]) == {"code", "message", "details"}


def test_a_firing_slo_alert_carries_symptom_and_diagnosis(
    throttled: Any, make_api: Callable[..., Api]
) -> None:
    api = make_api()
    tpot = SloSpec(
        "70b-tpot",
        Sli(SliKind.LATENCY, "tpot", 0.03),
        0.99,
        timedelta(days=7),
        Selector(model="meta-llama/Llama-3.1-70B-Instruct"),
    )
    incident_window, _ = scenarios.windows(throttled)
    slo_store.put_slo(api.app.state.context.engine, tpot, throttled.start)
    evaluator = api.app.state.context.evaluator
    quiet = evaluator.run(incident_window.start)
    assert quiet.changes == ()
    at = incident_window.start + timedelta(minutes=6)
    api.clock.now = at
    report = evaluator.run(at)
    assert [t.value for _, t in report.changes] == ["opened"]

    [alert] = api.get("/api/v1/incidents").json()["incidents"]
    assert alert["state"] == "firing"
    assert alert["symptom"]["slo"] == "70b-tpot"
    assert alert["symptom"]["sli"]["metric"] == "tpot"
    assert alert["diagnosis"]["cause"] == "gpu_throttled"
    assert alert["diagnosis"]["instance"] == "vllm-70b-0"
    assert "throttled_share" in {e["signal"] for e in alert["diagnosis"]["evidence"]}

    acked = api.request("POST", f"/api/v1/incidents/{alert['id']}/acknowledge", json={"by": "sre"})
    assert acked.status_code == 200
    [alert] = api.get("/api/v1/incidents").json()["incidents"]
    assert (alert["state"], alert["acknowledged_by"]) == ("acknowledged", "sre")
    assert alert["diagnosis"]["cause"] == "gpu_throttled"


def test_acknowledging_an_unknown_incident_is_not_found(api: Api) -> None:
    response = api.request("POST", "/api/v1/incidents/4242/acknowledge", json={})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_silences_are_created_listed_and_ended(api: Api) -> None:
    created = api.request(
        "POST",
        "/api/v1/silences",
        json={"matchers": {"slo": "70b-tpot"}, "duration_s": 3600, "comment": "maintenance"},
    )
    assert created.status_code == 201, created.text
    silence = created.json()
    assert silence["matchers"] == {"slo": "70b-tpot"}
    assert [s["id"] for s in api.get("/api/v1/silences").json()["silences"]] == [silence["id"]]
    api.clock.now += timedelta(hours=2)
    assert api.get("/api/v1/silences").json()["silences"] == []
    api.clock.now -= timedelta(hours=2)
    assert api.delete(f"/api/v1/silences/{silence['id']}").status_code == 204
    assert api.get("/api/v1/silences").json()["silences"] == []
    bad = api.request(
        "POST", "/api/v1/silences", json={"matchers": {"colour": "x"}, "duration_s": 1}
    )
    assert bad.status_code == 400


def test_a_firing_incident_is_diagnosed_again_while_it_fires_and_keeps_its_headline(
    throttled: Any, make_api: Callable[..., Api], request: pytest.FixtureRequest
) -> None:
    api = make_api()
    request.addfinalizer(api.app.state.context.jobs.stop)  # releases the leader lock on PostgreSQL
    tpot = SloSpec(
        "70b-tpot",
        Sli(SliKind.LATENCY, "tpot", 0.03),
        0.99,
        timedelta(days=7),
        Selector(model="meta-llama/Llama-3.1-70B-Instruct"),
    )
    slo_store.put_slo(api.app.state.context.engine, tpot, throttled.start)
    incident_window, _ = scenarios.windows(throttled)
    opened_at = incident_window.start + timedelta(minutes=6)
    api.clock.now = opened_at
    api.app.state.context.evaluator.run(opened_at)
    [first] = api.get("/api/v1/incidents").json()["incidents"]
    jobs = api.app.state.context.jobs
    api.clock.now = opened_at + timedelta(minutes=1)
    assert jobs.tick_delivery()  # too soon: the diagnosis is kept
    [same] = api.get("/api/v1/incidents").json()["incidents"]
    assert same["diagnosis"]["window"] == first["diagnosis"]["window"]
    later = opened_at + timedelta(minutes=3, seconds=30)
    api.clock.now = later
    assert jobs.tick_delivery()
    [again] = api.get("/api/v1/incidents").json()["incidents"]
    # The headline is the onset's diagnosis; the new one went to the history.
    assert again["diagnosis"] == first["diagnosis"]
    assert again["onset"]["cause"] == first["diagnosis"]["cause"] == "gpu_throttled"
    detail = api.get(f"/api/v1/incidents/{first['id']}").json()
    onset, kept = detail["history"]
    assert onset["verdict"] == "onset"
    assert onset["diagnosis"] == first["diagnosis"]
    assert kept["verdict"] == "kept"
    assert kept["window"]["end"] == _iso(later)
    assert kept["diagnosis"]["reference"] == first["diagnosis"]["reference"]
    assert kept["cause"] == "gpu_throttled"
