"""``GET /api/v1/scaling``, the KEDA metrics-api endpoint and the ``/metrics`` gauges, over a
real store (recommendations recorded as the job records them)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from infersight.core.scaling import Recommendation, ScalingPolicy
from infersight.storage import scaling as scaling_store
from infersight.storage.writer import open_writer
from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN, Api
from tests.conftest import Store
from tests.doubles import NOW
from tests.factories import make_records


def rec(model: str, age_s: float, desired: int, stale: tuple[str, ...] = ()) -> Recommendation:
    return Recommendation(
        model=model,
        at=NOW.timestamp() - age_s,
        observed=3,
        desired=desired,
        predictive=desired,
        reactive=2,
        forecast_rps=12.5,
        driver="forecast",
        reason=f"the forecast of 12.5 req/s needs {desired} instances",
        stale=stale,
    )


def samples(api: Api, name: str) -> dict[str, float]:
    text = api.get("/metrics").text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))] = sample.value
    return found


def test_the_listing_shows_each_model_s_newest_recommendation_and_its_staleness(
    api: Api, store: Store
) -> None:
    scaling_store.record(store.engine, rec("llama-8b", 90, 2))
    scaling_store.record(store.engine, rec("llama-8b", 30, 4))
    scaling_store.record(store.engine, rec("llama-70b", 20, 6, stale=("demand_rps",)))
    scaling_store.record(store.engine, rec("mixtral", 20, 2, stale=("gpu_util", "kv_usage")))
    body = api.get("/api/v1/scaling").json()
    by_model = {m["model"]: m for m in body["models"]}
    assert set(by_model) == {"llama-8b", "llama-70b", "mixtral"}
    small = by_model["llama-8b"]
    assert (small["observed"], small["desired"], small["predicted_demand_rps"]) == (3, 4, 12.5)
    assert small["driver"] == "forecast"
    assert small["reason"] == "the forecast of 12.5 req/s needs 4 instances"
    assert small["staleness_s"] == 30.0
    assert small["usable"] is True
    assert small["refusal"] is None
    large = by_model["llama-70b"]
    assert large["usable"] is False
    assert large["stale_inputs"] == ["demand_rps"]
    assert "demand_rps" in large["refusal"]
    # Inputs a deployment does not measure (no GPU telemetry) are listed but do not block it.
    assert by_model["mixtral"]["stale_inputs"] == ["gpu_util", "kv_usage"]
    assert by_model["mixtral"]["usable"] is True


def test_keda_gets_the_desired_replicas_of_a_fresh_recommendation(api: Api, store: Store) -> None:
    scaling_store.record(store.engine, rec("llama-8b", 30, 4))
    response = api.get("/api/v1/scaling/keda/llama-8b")
    assert response.status_code == 200
    assert response.json()["desiredReplicas"] == 4


def test_a_stale_input_is_answered_503_never_0_and_counted(api: Api, store: Store) -> None:
    scaling_store.record(store.engine, rec("llama-8b", 30, 0, stale=("demand_rps",)))
    response = api.get("/api/v1/scaling/keda/llama-8b")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "unavailable"
    assert error["details"]["stale_inputs"] == ["demand_rps"]
    assert "desiredReplicas" not in response.json()
    assert samples(api, "infersight_scaling_keda_refusals_total") == {"reason=stale_inputs": 1.0}
    # …and the gauge leaves the model out rather than exporting a number.
    assert samples(api, "infersight_desired_replicas") == {}


def test_a_recommendation_that_no_input_sized_is_answered_503(api: Api, store: Store) -> None:
    unsized = dataclasses.replace(
        rec("llama-8b", 10, 3, stale=("capacity_rps",)), predictive=None, reactive=None
    )
    scaling_store.record(store.engine, unsized)
    response = api.get("/api/v1/scaling/keda/llama-8b")
    assert response.status_code == 503
    assert "no input sized the pool" in response.json()["error"]["message"]
    assert samples(api, "infersight_scaling_keda_refusals_total") == {"reason=no_basis": 1.0}


def test_a_recommendation_older_than_the_policy_allows_is_answered_503(
    api: Api, store: Store
) -> None:
    policy = ScalingPolicy(name="chat", model="llama-8b", stale_after_s=120.0)
    scaling_store.put_policy(store.engine, policy, NOW)
    scaling_store.record(store.engine, rec("llama-8b", 100, 5))
    assert api.get("/api/v1/scaling/keda/llama-8b").status_code == 200
    api.clock.now = NOW + timedelta(seconds=30)  # 130 s old now
    response = api.get("/api/v1/scaling/keda/llama-8b")
    assert response.status_code == 503
    assert "130 s old" in response.json()["error"]["message"]
    assert samples(api, "infersight_scaling_keda_refusals_total") == {
        "reason=old_recommendation": 1.0
    }


def test_a_served_model_without_a_recommendation_is_503_and_an_unknown_one_404(
    api: Api, store: Store
) -> None:
    open_writer(store.engine).write_requests(
        make_records(
            np.random.default_rng(1),
            NOW - timedelta(minutes=5),
            20,
            span=timedelta(minutes=4),
            models=("llama-8b",),
        )
    )
    assert api.get("/api/v1/scaling/keda/llama-8b").status_code == 503
    unknown = api.get("/api/v1/scaling/keda/nope")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    assert samples(api, "infersight_scaling_keda_refusals_total") == {
        "reason=no_recommendation": 1.0,
        "reason=unknown_model": 1.0,
    }


def test_the_desired_replicas_gauge_is_on_metrics(api: Api, store: Store) -> None:
    scaling_store.record(store.engine, rec("llama-8b", 30, 4))
    scaling_store.record(store.engine, rec("llama-70b", 10, 7))
    assert samples(api, "infersight_desired_replicas") == {
        "model=llama-70b,pool=": 7.0,
        "model=llama-8b,pool=": 4.0,
    }
    assert samples(api, "infersight_observed_replicas")["model=llama-8b,pool="] == 3.0
    assert samples(api, "infersight_scaling_recommendation_age_seconds") == {
        "model=llama-70b,pool=": 10.0,
        "model=llama-8b,pool=": 30.0,
    }


def test_the_scaling_routes_need_a_token_like_every_other(make_api, store: Store) -> None:
    api = make_api(api_tokens=f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}")
    scaling_store.record(store.engine, rec("llama-8b", 30, 4))
    assert api.get("/api/v1/scaling").status_code == 401
    assert api.get("/api/v1/scaling/keda/llama-8b").status_code == 401
    read = {"Authorization": f"Bearer {READ_TOKEN}"}
    assert api.get("/api/v1/scaling", headers=read).status_code == 200
    assert api.get("/api/v1/scaling/keda/llama-8b", headers=read).json()["desiredReplicas"] == 4


def test_the_scaling_page_says_how_to_get_recommendations_when_there_are_none(api: Api) -> None:
    response = api.get("/ui/scaling")
    assert response.status_code == 200
    assert "No replica recommendation yet" in response.text
    assert 'id="purchasing"' in response.text
