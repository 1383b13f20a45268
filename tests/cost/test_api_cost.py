"""``GET /api/v1/cost``, the cost model routes, ``/metrics`` and ``infersight cost`` over the
worked week in a real store."""

from __future__ import annotations

import json
from datetime import timedelta

import yaml
from click.testing import CliRunner

from infersight.cli.group import cli
from infersight.service.cost_spec import to_document
from tests.cost.conftest import api_for
from tests.cost.scenario import IDLE_DAY, MODEL, WEEK

ADMIN = "admin-token-0123456789"
READ = "read-token-0123456789"


def _window(window) -> dict[str, str]:
    return {"start": window.start.isoformat(), "end": window.end.isoformat()}


def test_the_cost_route_answers_the_worked_week_in_decimal_strings(worked):
    api = api_for(worked, cost_model="worked")
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


def test_without_a_stored_model_the_example_prices_are_used_and_flagged(worked):
    body = api_for(worked).get("/api/v1/cost", params=_window(IDLE_DAY)).json()
    assert body["cost_model"] == {"name": "example", "example_prices": True}
    # The example model bills a sample for at most 5 minutes (sampleGap) and these samples
    # are 15 minutes apart: 96 × 5 min = 8 H200-hours at the example 4.00, nothing else.
    idle = next(i for i in body["instances"] if i["instance"] == "h200-idle")
    assert idle["gpu_hours"] == "8.000000"
    assert idle["cost"] == "32.000000"


def test_the_cost_model_can_be_replaced_by_an_admin_and_read_back(worked):
    api = api_for(worked, api_tokens=f"admin:{ADMIN},read:{READ}", cost_model="worked")
    document = to_document(MODEL)
    as_reader = {"Authorization": f"Bearer {READ}"}
    refused = api.put("/api/v1/cost/model", json=document, headers=as_reader)
    assert refused.status_code == 403
    put = api.put("/api/v1/cost/model", json=document, headers={"Authorization": f"Bearer {ADMIN}"})
    assert put.status_code == 200
    assert api.get("/api/v1/cost/model", headers=as_reader).json() == document
    assert api.get("/api/v1/cost").status_code == 401


def test_bad_cost_questions_get_the_one_error_shape(worked):
    api = api_for(worked)
    bad = api.get("/api/v1/cost", params={"group_by": "colour"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_input"
    wrong = api.put("/api/v1/cost/model", content=b"apiVersion: infersight/v1\nkind: SLO\n")
    assert wrong.status_code == 400
    negative = dict(to_document(MODEL))
    negative["metadata"] = {"name": "default"}
    negative["spec"] = {**negative["spec"], "electricityPerKwh": "-1"}
    answer = api.put("/api/v1/cost/model", json=negative)
    assert answer.status_code == 400
    assert "electricity_per_kwh" in answer.json()["error"]["message"]
    other = dict(to_document(MODEL))  # named "worked", but this API uses "default"
    assert api.put("/api/v1/cost/model", json=other).status_code == 400
    too_long = {**_window(WEEK), "end": (WEEK.start + timedelta(days=500)).isoformat()}
    assert api.get("/api/v1/cost", params=too_long).status_code == 400


def test_metrics_carry_the_cost_gauges(worked):
    api = api_for(worked, cost_model="worked")
    api.clock.now = WEEK.start + timedelta(days=1)
    text = api.get("/metrics").text
    assert (
        'infersight_cost_per_million_tokens{currency="USD",kind="total",model="llama-70b"}' in text
    )
    assert 'infersight_gpu_utilisation_ratio{instance="h200-a"} 0.6' in text
    assert "infersight_idle_cost_last_hour" in text


def test_cost_apply_then_show_prices_the_week_with_the_applied_model(worked, tmp_path):
    path = tmp_path / "cost.yaml"
    path.write_text(yaml.safe_dump(to_document(MODEL)))
    env = {"INFERSIGHT_COST_MODEL": "worked"}
    runner = CliRunner()
    base = ["--store", worked.url, "cost"]
    applied = runner.invoke(cli, [*base, "apply", str(path)], env=env)
    assert applied.exit_code == 0, applied.output
    assert "updated worked (in use)" in applied.output
    window = ["--start", WEEK.start.isoformat(), "--end", WEEK.end.isoformat()]
    shown = runner.invoke(cli, [*base, "show", "--json", *window, "--instance", "h200-a"], env=env)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["groups"][0]["cost_per_million_tokens"]["total"] == "56.000000"
    table = runner.invoke(cli, [*base, "show", *window], env=env)
    assert table.exit_code == 0, table.output
    assert "model=llama-70b" in table.output
    assert "56.00" in table.output
    model = runner.invoke(cli, [*base, "model"], env=env)
    assert yaml.safe_load(model.output) == to_document(MODEL)


def test_a_bad_cost_model_file_is_refused_with_the_reason(worked, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: infersight/v1\nkind: CostModel\nmetadata: {name: x}\nspec: {}\n")
    result = CliRunner().invoke(cli, ["--store", worked.url, "cost", "apply", str(path)])
    assert result.exit_code != 0
    assert "invalid CostModel document" in str(result.exception)
