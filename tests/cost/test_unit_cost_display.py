"""Unit costs carry their currency and keep their significant digits; group labels are shown
whole (#16)."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from click.testing import CliRunner

from infersight.cli.group import cli
from infersight.service.cost_view import unit_cost_text
from infersight.service.report_render import summary_line
from infersight.service.reports import WeeklyReports
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from tests.conftest import Store
from tests.cost.cheap_prefill import HOUR, INSTANCE, SERVED, write_cheap_prefill_hour
from tests.cost.scenario import MODEL, WEEK


@pytest.fixture
def cheap(store: Store) -> Store:
    write_cheap_prefill_hour(store.engine)
    return store


def _show(store: Store, *args: str):
    window = ["--start", HOUR.start.isoformat(), "--end", HOUR.end.isoformat()]
    return CliRunner().invoke(
        cli,
        ["--store", store.url, "cost", "show", *window, *args],
        env={"INFERSIGHT_COST_MODEL": "worked"},
    )


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("0.004211", "0.00421"),
        ("0.000142", "0.000142"),
        ("0.123456", "0.123"),
        ("56.000000", "56.00"),
        ("1234.500000", "1,234.50"),
        ("0.000000", "0.00"),
        (None, "–"),
    ],
)
def test_unit_costs_keep_significant_digits(value, text):
    assert unit_cost_text(value) == text
    if value is not None:
        assert unit_cost_text(value, "EUR") == f"{text} EUR"


def test_cost_show_grouped_by_model_and_instance_shows_whole_labels(cheap):
    result = _show(cheap, "--group-by", "model,instance")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    row = next(line for line in lines if line.startswith("model="))
    label = f"model={SERVED},instance={INSTANCE}"
    assert row.startswith(label + " ")
    # The columns still line up: every cell is right-aligned to its header's end.
    header = next(line for line in lines if line.startswith("GROUP"))
    total = next(line for line in lines if line.startswith("TOTAL"))
    assert len(header) == len(row) == len(total)


def test_cost_show_names_the_currency_and_keeps_small_unit_costs(cheap):
    as_json = _show(cheap, "--json", "--group-by", "model")
    assert as_json.exit_code == 0, as_json.output
    per = json.loads(as_json.output)["total"]["cost_per_million_tokens"]
    tiny = Decimal(per["input"])
    assert Decimal("0") < tiny < Decimal("0.005")  # what showed as 0.00 before
    table = _show(cheap, "--group-by", "model")
    assert table.exit_code == 0, table.output
    header = next(line for line in table.output.splitlines() if line.startswith("GROUP"))
    for column in ("USD/M TOTAL", "USD/M IN", "USD/M OUT", "USD/M GOOD"):
        assert column in header
    assert "$/M" not in header
    total = next(line for line in table.output.splitlines() if line.startswith("TOTAL"))
    assert unit_cost_text(per["input"]) == "0.000142"
    assert "0.000142" in total.split()


def test_the_weekly_report_shows_unit_costs_with_currency_and_digits(cheap):
    job = WeeklyReports(SqlStore(cheap.engine), lambda: MODEL, "UTC", RetentionPolicy().finest_for)
    generated = job.generate("2026-W48", WEEK.end)
    html = generated.html
    kpi = html[html.index('data-field="cost_per_million_tokens"') :]
    assert kpi[: kpi.index("</li>")].endswith(" USD</b>")
    assert "USD per M input" in html
    row = html[html.index('data-section="total"') :]
    row = row[: row.index("</tr>")]
    cell = re.search(
        r'data-field="cost_per_million_input_tokens" data-value="([^"]*)">([^<]*)<', row
    )
    assert cell is not None
    assert cell.groups() == ("0.000142", "0.000142")  # shown as it is, not as 0.00
    assert "USD per million" in summary_line(generated.body)
