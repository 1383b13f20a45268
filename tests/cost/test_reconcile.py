"""Reconciliation with a cloud bill in FOCUS (issue 34), on SQLite and PostgreSQL: the worked
week's store, a CSV bill for Monday to Wednesday and a Parquet bill for Thursday
(``tests.cost.bill``), imported through ``service.reconcile`` and reconciled against the
cost model's own figures."""

from __future__ import annotations

import gzip
from datetime import timedelta
from decimal import Decimal

import pytest

from infersight.core.errors import Conflict, InvalidInput
from infersight.core.focus import BillMapping
from infersight.core.window import Window
from infersight.service import reconcile as rec
from infersight.service.report_render import render_html
from infersight.service.reports import WeeklyReports
from infersight.storage import bills, cost
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from tests.conftest import BOTH_STORES, Store, empty_store
from tests.cost import bill
from tests.cost.scenario import MODEL, WEEK, WEEK_START, write_worked_week

MON_WED = Window(WEEK_START, WEEK_START + timedelta(days=3))
THURSDAY = Window(WEEK_START + timedelta(days=3), WEEK_START + timedelta(days=4))


@pytest.fixture(scope="module", params=BOTH_STORES)
def billed(request: pytest.FixtureRequest) -> Store:
    store = empty_store(request)
    write_worked_week(store.engine)
    cost.put_model(store.engine, MODEL, WEEK.end)
    mapping = BillMapping()
    rec.import_bytes(store.sql, bill.to_csv(bill.rows(0, 3)), "mon-wed.csv", mapping, WEEK.end)
    rec.import_bytes(store.sql, bill.to_parquet(bill.rows(3, 1)), "thu.parquet", mapping, WEEK.end)
    return store


def test_the_csv_import_stores_every_line_with_its_instance(billed):
    imports = {i.name: i for i in bills.list_imports(billed.engine)}
    csv_import = imports["mon-wed.csv"]
    assert csv_import.format == "csv"
    assert csv_import.rows == 72 + 3 * 3
    assert csv_import.currency == "USD"
    assert csv_import.billed == Decimal("3.00") * 72 + 3 * Decimal("115.00")
    assert (csv_import.period_start, csv_import.period_end) == (MON_WED.start, MON_WED.end)
    assert imports["thu.parquet"].format == "parquet"
    assert imports["thu.parquet"].rows == 24 + 3
    assert bills.line_count(billed.engine) == 81 + 27


def test_billed_against_modelled_per_day_and_instance(billed):
    answer = rec.reconcile(SqlStore(billed.engine), MODEL, MON_WED.start, MON_WED.end).as_dict()
    days = [d for d in answer["days"] if d["instance"] == "h200-a"]
    assert [d["date"] for d in days] == ["2026-11-23", "2026-11-24", "2026-11-25"]
    for day in days:
        assert day["billed"] == "72.000000"
        assert day["modelled"] == "80.640000"  # 74.40 GPU + 1.44 energy + 4.80 overhead
        assert day["drift"] == "-8.640000"
        assert day["drift_pct"] == "-10.71"
        assert day["gpu_hours"] == "24.000000"
        assert day["billed_per_gpu_hour"] == "3.000000"
        assert day["bill_lines"] == 24
    (h200,) = answer["instances"]
    assert h200["instance"] == "h200-a"
    assert (h200["billed"], h200["modelled"], h200["drift"]) == (
        "216.000000",
        "241.920000",
        "-25.920000",
    )
    assert h200["billed_per_gpu_hour"] == "3.000000"
    assert h200["typed_price_per_gpu_hour"] == "3.1000"  # 0.75 × 2.80 + 0.25 × 4.00
    assert answer["total"]["drift_pct"] == "-10.71"
    assert answer["other_charges"] == {"Tax": "30.000000"}
    assert answer["reconciled"] is True
    assert answer["covered_days"] == ["2026-11-23", "2026-11-24", "2026-11-25"]
    assert "3 instance-day(s) on 3 day(s) reconciled with 1 imported bill(s)" in answer["summary"]


def test_unmatched_lines_both_ways(billed):
    answer = rec.reconcile(SqlStore(billed.engine), MODEL, MON_WED.start, MON_WED.end).as_dict()
    unmatched = answer["unmatched"]
    not_seen = unmatched["billed_not_seen"]
    node9 = [u for u in not_seen if u["resource"] == "gpu-node-9"]
    assert [u["billed"] for u in node9] == ["100.000000"] * 3
    assert node9[0]["resource_id"].endswith("i-0999")
    assert "never" in answer["summary"]
    transfer = [u for u in not_seen if u["resource"] == "SKU-DTO"]
    assert len(transfer) == 3
    assert transfer[0]["reason"] == "none of the mapping's keys is set on this line"
    assert unmatched["billed_not_seen_total"] == "315.000000"
    # h200-idle ran on Wednesday (79.488 modelled) and the bill has no line for it.
    assert unmatched["seen_not_billed"] == [
        {"date": "2026-11-25", "instance": "h200-idle", "modelled": "79.488000"}
    ]


def test_the_parquet_bill_reconciles_thursday(billed):
    answer = rec.reconcile(SqlStore(billed.engine), MODEL, THURSDAY.start, THURSDAY.end).as_dict()
    (day,) = answer["days"]
    assert (day["date"], day["instance"], day["billed"], day["modelled"]) == (
        "2026-11-26",
        "h200-a",
        "72.000000",
        "80.640000",
    )
    assert [i["name"] for i in answer["imports"]] == ["thu.parquet"]


def test_effective_cost_basis_and_days_outside_the_bill(billed):
    answer = rec.reconcile(
        SqlStore(billed.engine), MODEL, MON_WED.start, MON_WED.end, basis="effective"
    ).as_dict()
    assert answer["instances"][0]["billed"] == "208.800000"  # 2.90 × 72
    # Friday to Sunday: no bill covers them, so nothing is unmatched, nothing reconciled.
    later = rec.reconcile(SqlStore(billed.engine), MODEL, WEEK_START + timedelta(days=4), WEEK.end)
    assert later.as_dict()["reconciled"] is False
    assert later.unbilled == {}
    assert later.summary().startswith("not reconciled")


def test_use_billed_price_writes_the_effective_price_into_the_cost_model(billed):
    _model, prices = rec.use_billed_price(
        SqlStore(billed.engine), MODEL, MON_WED.start, MON_WED.end, WEEK.end, dry_run=True
    )
    assert prices == {"h200-a": Decimal("3.000000")}
    assert cost.get_model(billed.engine, "worked") == MODEL  # a dry run stores nothing
    try:
        rec.use_billed_price(SqlStore(billed.engine), MODEL, MON_WED.start, MON_WED.end, WEEK.end)
        stored = cost.get_model(billed.engine, "worked")
        assert stored.instance_prices["h200-a"].on_demand_per_hour == Decimal("3.000000")
        again = rec.reconcile(SqlStore(billed.engine), stored, MON_WED.start, MON_WED.end)
        # 72.00 GPU + 1.44 energy + 4.80 overhead: what is left is energy and overhead.
        assert again.as_dict()["days"][0]["modelled"] == "78.240000"
    finally:
        cost.put_model(billed.engine, MODEL, WEEK.end)
    with pytest.raises(InvalidInput):
        rec.use_billed_price(
            SqlStore(billed.engine), MODEL, MON_WED.start, MON_WED.end, WEEK.end, instances=["nope"]
        )


def test_a_file_is_imported_once(billed):
    with pytest.raises(Conflict):
        rec.import_bytes(
            SqlStore(billed.engine),
            bill.to_csv(bill.rows(0, 3)),
            "again.csv",
            BillMapping(),
            WEEK.end,
        )


def _bad(store: Store, data: bytes, **limits: int) -> InvalidInput:
    before = (bills.line_count(store.engine), len(bills.list_imports(store.engine)))
    with pytest.raises(InvalidInput) as caught:
        rec.import_bytes(store.sql, data, "bad.csv", BillMapping(), WEEK.end, **limits)
    assert (bills.line_count(store.engine), len(bills.list_imports(store.engine))) == before
    return caught.value


def test_bad_files_are_refused_whole_naming_row_and_column(billed):
    data = bill.rows(5, 1)
    data[2]["BilledCost"] = "12,50"
    data[4]["ChargePeriodStart"] = "26/11/2026"
    data[6]["Tags"] = "[1, 2]"
    data[7]["ChargeCategory"] = "Discount"
    data[8]["BillingCurrency"] = "EUR"
    error = _bad(billed, bill.to_csv(data))
    assert "nothing was imported" in str(error)
    assert [(e["row"], e["column"]) for e in error.details["errors"]] == [
        (3, "BilledCost"),
        (5, "ChargePeriodStart"),
        (7, "Tags"),
        (8, "ChargeCategory"),
        (9, "BillingCurrency"),
    ]
    assert error.details["errors"][0]["value"] == "12,50"


def test_other_bad_files(billed):
    good = bill.to_csv(bill.rows(5, 1))
    missing = good.replace(b"EffectiveCost", b"Cost", 1)
    assert "EffectiveCost" in str(_bad(billed, missing))
    assert "more than 10 rows" in str(_bad(billed, good, max_rows=10))
    assert "larger than" in str(_bad(billed, good, max_bytes=1000))
    short = good.rstrip(b"\r\n") + b"\r\n1,2\r\n"
    (problem,) = _bad(billed, short).details["errors"]
    assert problem["row"] == 28
    assert "cells" in problem["problem"]
    assert "no FOCUS header" in str(_bad(billed, b""))
    assert "Parquet" in str(_bad(billed, b"PAR1 not really"))
    long_amount = bill.rows(5, 1)
    long_amount[0]["ListCost"] = "1." + "3" * 50
    assert _bad(billed, bill.to_csv(long_amount)).details["errors"][0]["column"] == "ListCost"
    parquet = bill.to_parquet(bill.rows(5, 1))
    assert "larger than" in str(_bad(billed, parquet, max_bytes=len(parquet) - 1))
    reversed_period = bill.rows(5, 1)
    reversed_period[0]["ChargePeriodEnd"] = reversed_period[0]["ChargePeriodStart"]
    assert _bad(billed, bill.to_csv(reversed_period)).details["errors"][0]["column"] == (
        "ChargePeriodEnd"
    )


def test_gzip_csv_and_a_declared_mapping(billed):
    text = bill.to_csv(bill.rows(6, 1))
    mapping = rec.parse_mapping(
        "apiVersion: infersight/v1\nkind: BillMapping\n"
        "spec: {keys: [ResourceId], aliases: {'" + bill.H200_ID + "': h200-a}}\n"
    )
    imported = rec.import_bytes(
        SqlStore(billed.engine), gzip.compress(text), "sun.csv.gz", mapping, WEEK.end
    )
    try:
        assert imported.format == "csv.gz"
        assert "h200-a" in imported.instances
        assert imported.unmapped_usage_rows == 1  # the data transfer line has no ResourceId
        sunday = Window(WEEK_START + timedelta(days=6), WEEK.end)
        answer = rec.reconcile(SqlStore(billed.engine), MODEL, sunday.start, sunday.end).as_dict()
        assert answer["days"][0]["billed"] == "72.000000"
    finally:
        bills.delete_import(billed.engine, imported.id)
    with pytest.raises(InvalidInput):
        rec.parse_mapping("apiVersion: infersight/v1\nkind: BillMapping\nspec: {keys: [Owner]}")


def test_the_weekly_report_says_which_figures_were_reconciled(billed):
    job = WeeklyReports(SqlStore(billed.engine), lambda: MODEL, "UTC", RetentionPolicy().finest_for)
    report = job.generate("2026-W48", WEEK.end)
    section = report.body["reconciliation"]
    assert section["reconciled"] is True
    assert [i["name"] for i in section["imports"]] == ["mon-wed.csv", "thu.parquet"]
    assert section["total"]["billed"] == "288.000000"  # h200-a, Monday to Thursday
    assert section["total"]["modelled"] == "322.560000"
    assert section["covered_days"] == ["2026-11-23", "2026-11-24", "2026-11-25", "2026-11-26"]
    assert "4 instance-day(s) on 4 day(s) reconciled with 2 imported bill(s)" in section["summary"]
    assert 'data-reconciled="yes"' in report.html
    assert '<tr data-instance="h200-a"><th scope="row">h200-a</th><td>288.00</td>' in report.html
    assert "Billed for resources infersight never saw: 420.00 USD" in report.html
    # A range no bill covers says its figures were not reconciled.
    body = dict(
        report.body,
        reconciliation=rec.reconcile(
            SqlStore(billed.engine), MODEL, WEEK.end, WEEK.end + timedelta(days=1)
        ).as_dict(),
    )
    assert 'data-reconciled="no"' in render_html(body)
