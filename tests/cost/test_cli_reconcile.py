"""``infersight cost import-bill | reconcile | use-billed-price | bills`` against a real store
(SQLite and PostgreSQL), with FOCUS files on disk: CSV and Parquet."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from click.testing import CliRunner

from infersight.cli.group import cli
from infersight.storage import bills, cost
from tests.conftest import BOTH_STORES, Store, empty_store
from tests.cost import bill
from tests.cost.scenario import MODEL, WEEK, WEEK_START, write_worked_week

ENV = {"INFERSIGHT_COST_MODEL": "worked"}
WINDOW = ["--start", WEEK_START.isoformat(), "--end", (WEEK_START + timedelta(days=4)).isoformat()]


@pytest.fixture(scope="module", params=BOTH_STORES)
def worked_store(request: pytest.FixtureRequest) -> Store:
    store = empty_store(request)
    write_worked_week(store.engine)
    cost.put_model(store.engine, MODEL, WEEK.end)
    return store


def test_import_reconcile_and_use_the_billed_price(worked_store, tmp_path):
    runner = CliRunner()
    base = ["--store", worked_store.url, "cost"]
    csv_file = tmp_path / "focus-mon-wed.csv"
    csv_file.write_bytes(bill.to_csv(bill.rows(0, 3)))
    parquet_file = tmp_path / "focus-thu.parquet"
    parquet_file.write_bytes(bill.to_parquet(bill.rows(3, 1)))
    done = runner.invoke(cli, [*base, "import-bill", str(csv_file)], env=ENV)
    assert done.exit_code == 0, done.output
    assert "81 lines" in done.output
    assert "instances named: gpu-node-9, h200-a" in done.output
    assert "3 usage line(s) name no instance" in done.output
    done = runner.invoke(
        cli,
        [*base, "import-bill", str(parquet_file), "--key", "tag:infersight.instance", "--json"],
        env=ENV,
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["format"] == "parquet"
    again = runner.invoke(cli, [*base, "import-bill", str(csv_file)], env=ENV)
    assert again.exit_code != 0
    assert "imported already" in str(again.exception)

    table = runner.invoke(cli, [*base, "reconcile", *WINDOW], env=ENV)
    assert table.exit_code == 0, table.output
    assert "2026-11-26 h200-a" in table.output
    assert "TOTAL" in table.output
    assert "-34.560000" in table.output  # 4 days × −8.64
    assert "the bill implies 3.000000 USD per GPU-hour; the cost model says 3.1000" in table.output
    assert "billed, not seen: 2026-11-23 gpu-node-9 100.000000 USD" in table.output
    assert "seen, not billed: 2026-11-25 h200-idle modelled 79.488000" in table.output
    assert "not compared: Tax 40.000000" in table.output
    body = json.loads(runner.invoke(cli, [*base, "reconcile", *WINDOW, "--json"], env=ENV).output)
    assert body["total"]["billed"] == "288.000000"

    dry = runner.invoke(cli, [*base, "use-billed-price", *WINDOW, "--dry-run"], env=ENV)
    assert dry.exit_code == 0, dry.output
    document = yaml.safe_load(dry.stdout)
    assert document["spec"]["instancePrices"] == {"h200-a": {"onDemandPerHour": "3.000000"}}
    assert cost.get_model(worked_store.engine, "worked") == MODEL
    try:
        used = runner.invoke(cli, [*base, "use-billed-price", *WINDOW], env=ENV)
        assert used.exit_code == 0, used.output
        stored = cost.get_model(worked_store.engine, "worked")
        assert str(stored.instance_prices["h200-a"].on_demand_per_hour) == "3.000000"
        shown = runner.invoke(cli, [*base, "model"], env=ENV)
        assert "h200-a" in shown.output
    finally:
        cost.put_model(worked_store.engine, MODEL, WEEK.end)
    listed = runner.invoke(cli, [*base, "bills"], env=ENV)
    assert "focus-mon-wed.csv" in listed.output
    assert "focus-thu.parquet" in listed.output


def test_a_bad_file_lists_its_rows_and_stores_nothing(worked_store, tmp_path):
    data = bill.rows(5, 1)
    data[2]["BilledCost"] = "1.5.0"
    data[3]["ChargePeriodEnd"] = ""
    path = tmp_path / "bad.csv"
    path.write_bytes(bill.to_csv(data))
    before = bills.line_count(worked_store.engine)
    result = CliRunner().invoke(
        cli, ["--store", worked_store.url, "cost", "import-bill", str(path)], env=ENV
    )
    assert result.exit_code == 2
    assert "2 row(s) could not be read; nothing was imported" in result.stderr
    assert "row 3, column BilledCost: must be a decimal number" in result.stderr
    assert "row 4, column ChargePeriodEnd: must not be empty" in result.stderr
    assert bills.line_count(worked_store.engine) == before
