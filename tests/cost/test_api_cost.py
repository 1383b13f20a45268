"""``GET /api/v1/cost`` and the cost model routes over a real store."""

from __future__ import annotations

from datetime import timedelta

from api.cost_spec import to_document
from storage import cost
from tests.cost.scenario import IDLE_DAY, MODEL, WEEK, write_worked_week

ADMIN = "admin-token-0123456789"
READ = "read-token-0123456789"


def _window(window) -> dict[str, str]:
    return {"start": window.start.isoformat(), "end": window.end.isoformat()}


def test_the_cost_route_answers_the_worked_week_in_decimal_strings(store, make_api):
    write_worked_week(store.engine)
    cost.put_model(store.engine, MODEL, WEEK.end)
    api = make_api(cost_model="worked")
    body = api.get("/api/v1/cost", params={**_window(WEEK), "group_by": "model,instance"}).json()
    assert body["currency"] == "USD"
    assert body["cost_model"] == {"name": "worked", "example_prices": False}
    served = next(g for g in body["groups"] if g["labels"]["instance"] == "h200-a")
    assert served["cost"] == "564.480000"
    assert served["cost_per_million_tokens"] == {
        "total": "56.000000",
        "input": "16.800000",
        "output": "134.400000",
        "good": "70.000000",
    }
    assert served["gpu_hours"] == "168.000000"
    assert body["total"]["idle_cost"] == "79.488000"
    assert body["good_tokens_method"] == "exact"
    idle = api.get("/api/v1/cost", params={**_window(IDLE_DAY), "instance": "h200-idle"}).json()
    assert idle["total"]["cost"] == idle["total"]["idle_cost"] == "79.488000"


def test_without_a_stored_model_the_example_prices_are_used_and_flagged(store, make_api):
    write_worked_week(store.engine)
    body = make_api().get("/api/v1/cost", params=_window(IDLE_DAY)).json()
    assert body["cost_model"] == {"name": "example", "example_prices": True}
    # 24 H200 hours at the example 4.00 per hour, nothing else billed.
    idle = next(i for i in body["instances"] if i["instance"] == "h200-idle")
    assert idle["cost"] == "96.000000"


def test_the_cost_model_can_be_replaced_by_an_admin_and_read_back(store, make_api):
    api = make_api(api_tokens=f"admin:{ADMIN},read:{READ}", cost_model="worked")
    document = to_document(MODEL)
    refused = api.put(
        "/api/v1/cost/model", json=document, headers={"Authorization": f"Bearer {READ}"}
    )
    assert refused.status_code == 403
    put = api.put("/api/v1/cost/model", json=document, headers={"Authorization": f"Bearer {ADMIN}"})
    assert put.status_code == 200
    got = api.get("/api/v1/cost/model", headers={"Authorization": f"Bearer {READ}"}).json()
    assert got == document


def test_bad_cost_questions_get_the_one_error_shape(store, make_api):
    api = make_api()
    bad = api.get("/api/v1/cost", params={"group_by": "colour"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_input"
    wrong = api.put("/api/v1/cost/model", content=b"apiVersion: infersight/v1\nkind: SLO\n")
    assert wrong.status_code == 400
    negative = dict(to_document(MODEL))
    negative["metadata"] = {"name": "default"}
    negative["spec"] = {**negative["spec"], "electricityPerKwh": "-1"}
    assert api.put("/api/v1/cost/model", json=negative).status_code == 400
    too_long = {**_window(WEEK), "end": (WEEK.start + timedelta(days=500)).isoformat()}
    assert api.get("/api/v1/cost", params=too_long).status_code == 400


def test_metrics_carry_the_cost_gauges(store, make_api):
    write_worked_week(store.engine)
    cost.put_model(store.engine, MODEL, WEEK.end)
    api = make_api(cost_model="worked")
    api.clock.now = WEEK.start + timedelta(days=1)
    text = api.get("/metrics").text
    assert (
        'infersight_cost_per_million_tokens{currency="USD",kind="total",model="llama-70b"}' in text
    )
    assert 'infersight_gpu_utilisation_ratio{instance="h200-a"} 0.6' in text
    assert "infersight_idle_cost_last_hour" in text
