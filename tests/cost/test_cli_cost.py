"""``infersight cost apply|model|show`` against a real store."""

from __future__ import annotations

import json

import yaml
from click.testing import CliRunner

from api.cost_spec import to_document
from infersight.cli import cli
from tests.cost.scenario import MODEL, WEEK, write_worked_week


def test_apply_then_show_prices_the_worked_week_with_the_applied_model(
    store, tmp_path, monkeypatch
):
    write_worked_week(store.engine)
    path = tmp_path / "cost.yaml"
    path.write_text(yaml.safe_dump(to_document(MODEL)))
    monkeypatch.setenv("INFERSIGHT_COST_MODEL", "worked")
    runner = CliRunner()
    applied = runner.invoke(cli, ["--store", store.url, "cost", "apply", str(path)])
    assert applied.exit_code == 0, applied.output
    assert "worked (in use)" in applied.output
    shown = runner.invoke(
        cli,
        [
            "--store", store.url, "cost", "show", "--json",
            "--start", WEEK.start.isoformat(), "--end", WEEK.end.isoformat(),
            "--instance", "h200-a",
        ],
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    body = json.loads(shown.output)
    assert body["groups"][0]["cost_per_million_tokens"]["total"] == "56.000000"
    table = runner.invoke(
        cli,
        ["--store", store.url, "cost", "show", "--start", WEEK.start.isoformat(),
         "--end", WEEK.end.isoformat()],
    )  # fmt: skip
    assert table.exit_code == 0, table.output
    assert "model=llama-70b" in table.output
    assert "56.00" in table.output
    model = runner.invoke(cli, ["--store", store.url, "cost", "model"])
    assert yaml.safe_load(model.output) == to_document(MODEL)


def test_a_bad_cost_model_file_is_refused_with_the_reason(store, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: infersight/v1\nkind: CostModel\nmetadata: {name: x}\nspec: {}\n")
    result = CliRunner().invoke(cli, ["--store", store.url, "cost", "apply", str(path)])
    assert result.exit_code != 0
    assert "invalid CostModel document" in str(result.exception)
