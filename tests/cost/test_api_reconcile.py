"""The reconciliation routes over real HTTP (ASGI) on SQLite and PostgreSQL: who may import
and read, the figures, bad files, duplicates and the billed price into the cost model."""

from __future__ import annotations

from datetime import timedelta

import pytest

from infersight.storage import bills, cost
from tests.conftest import BOTH_STORES, Store, empty_store
from tests.cost import bill
from tests.cost.conftest import api_for
from tests.cost.scenario import MODEL, WEEK, WEEK_START, write_worked_week

ADMIN = "admin-token-0123456789"
READ = "read-token-0123456789"
INGEST = "ingest-token-0123456789"
TENANT = "tenant-token-0123456789"
TOKENS = f"admin:{ADMIN},read:{READ},ingest:{INGEST},read@acme:{TENANT}"
RANGE = {
    "start": WEEK_START.isoformat(),
    "end": (WEEK_START + timedelta(days=3)).isoformat(),
}


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module", params=BOTH_STORES)
def served(request: pytest.FixtureRequest) -> Store:
    store = empty_store(request)
    write_worked_week(store.engine)
    cost.put_model(store.engine, MODEL, WEEK.end)
    return store


def test_import_and_reconcile_through_the_api(served):
    api = api_for(served, api_tokens=TOKENS, cost_model="worked")
    data = bill.to_csv(bill.rows(0, 3))
    url = "/api/v1/cost/bills"
    # Only an admin imports: no token 401, read and ingest tokens 403.
    assert api.request("POST", url, content=data).status_code == 401
    for token in (READ, INGEST, TENANT):
        assert api.request("POST", url, content=data, headers=_auth(token)).status_code == 403
    assert bills.list_imports(served.engine) == []
    answer = api.request(
        "POST", url, params={"name": "nov.csv"}, content=data, headers=_auth(ADMIN)
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["rows"], body["format"], body["instances"]) == (
        81,
        "csv",
        ["gpu-node-9", "h200-a"],
    )
    again = api.request("POST", url, content=data, headers=_auth(ADMIN))
    assert again.status_code == 409
    listed = api.get(url, headers=_auth(READ)).json()["bills"]
    assert [b["name"] for b in listed] == ["nov.csv"]

    recon = api.get("/api/v1/cost/reconciliation", params=RANGE, headers=_auth(READ))
    assert recon.status_code == 200, recon.text
    figures = recon.json()
    assert figures["total"]["billed"] == "216.000000"
    assert figures["total"]["modelled"] == "241.920000"
    assert figures["total"]["drift_pct"] == "-10.71"
    assert figures["instances"][0]["billed_per_gpu_hour"] == "3.000000"
    assert figures["unmatched"]["seen_not_billed_count"] == 1
    assert figures["unmatched"]["billed_not_seen_total"] == "315.000000"
    # Instance costs are not a tenant's to read; no token, no answer.
    assert (
        api.get("/api/v1/cost/reconciliation", params=RANGE, headers=_auth(TENANT)).status_code
        == 403
    )
    assert api.get("/api/v1/cost/reconciliation", params=RANGE).status_code == 401
    bad = api.get(
        "/api/v1/cost/reconciliation", params={**RANGE, "basis": "list"}, headers=_auth(READ)
    )
    assert bad.status_code == 400

    price = "/api/v1/cost/model/billed-price"
    assert api.request("POST", price, params=RANGE, headers=_auth(READ)).status_code == 403
    dry = api.request(
        "POST", price, params={**RANGE, "dry_run": "true"}, headers=_auth(ADMIN)
    ).json()
    assert dry["stored"] is False
    assert dry["prices"] == {"h200-a": "3.000000"}
    assert dry["document"]["spec"]["instancePrices"]["h200-a"] == {"onDemandPerHour": "3.000000"}
    assert cost.get_model(served.engine, "worked") == MODEL

    gone = api.delete(f"{url}/{body['id']}", headers=_auth(ADMIN))
    assert gone.json() == {"id": body["id"], "lines_deleted": 81}
    assert api.delete(f"{url}/{body['id']}", headers=_auth(ADMIN)).status_code == 404


def test_a_bad_file_is_answered_with_its_rows_and_columns(served):
    api = api_for(served, api_tokens=TOKENS, cost_model="worked")
    data = bill.rows(4, 1)
    data[1]["EffectiveCost"] = "USD 3"
    answer = api.request(
        "POST", "/api/v1/cost/bills", content=bill.to_csv(data), headers=_auth(ADMIN)
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["details"]["errors"] == [
        {
            "row": 2,
            "column": "EffectiveCost",
            "problem": error["details"]["errors"][0]["problem"],
            "value": "USD 3",
        }
    ]
    assert bills.list_imports(served.engine) == []
    empty = api.request("POST", "/api/v1/cost/bills", content=b"", headers=_auth(ADMIN))
    assert empty.status_code == 400


def test_a_parquet_bill_is_uploaded_as_binary(served):
    api = api_for(served, api_tokens=TOKENS, cost_model="worked")
    data = bill.to_parquet(bill.rows(6, 1))
    answer = api.request(
        "POST",
        "/api/v1/cost/bills",
        params={"name": "sun.parquet", "key": ["ResourceName", "tag:infersight.instance"]},
        content=data,
        headers={**_auth(ADMIN), "Content-Type": "application/vnd.apache.parquet"},
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    try:
        assert body["format"] == "parquet"
        # ResourceName first: the H200 line is named by its cloud name, which is no instance.
        assert body["instances"] == ["gpu-node-9", "i-0aaa1111"]
        listed = api.get("/api/v1/cost/bills", headers=_auth(READ)).json()["bills"]
        assert listed[0]["mapping"]["keys"] == ["ResourceName", "tag:infersight.instance"]
    finally:
        bills.delete_import(served.engine, body["id"])
