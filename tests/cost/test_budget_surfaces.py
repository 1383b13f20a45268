"""Budgets through their surfaces: the API (with tenant-limited tokens), and the CLI run as a
user runs it (``infersight budget apply`` / ``list`` in a subprocess) on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from infersight.service.budgets import apply_budgets, parse_budgets
from infersight.storage import cost as cost_store
from tests.api.conftest import ADMIN_TOKEN
from tests.cost.conftest import api_for
from tests.cost.test_budgets import DOC, NOW, flat_model, seed

ROOT = Path(__file__).resolve().parents[2]
GLOBEX = "globex-token-0123456789"
ACME = "acme-token-0123456789"
TOKENS = f"admin:{ADMIN_TOKEN},read@globex:{GLOBEX},read@acme:{ACME}"
FLEET = """
apiVersion: infersight/v1
kind: Budget
metadata: {name: fleet-weekly}
spec: {period: weekly, amount: "1000000", currency: USD}
"""


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_the_api_answers_spend_projection_and_burn_and_keeps_tenants_apart(store):
    seed(store)
    model = flat_model("4.00")
    cost_store.put_model(store.engine, model, NOW - timedelta(days=9))
    apply_budgets(store.sql, parse_budgets(DOC + "---\n" + FLEET), NOW, "USD")
    api = api_for(store, api_tokens=TOKENS, cost_model="prices")
    api.clock.now = NOW

    listed = api.get("/api/v1/budgets", headers=bearer(ADMIN_TOKEN))
    assert listed.status_code == 200, listed.text
    by_name = {b["metadata"]["name"]: b for b in listed.json()["budgets"]}
    assert set(by_name) == {"acme-monthly", "fleet-weekly"}
    acme = by_name["acme-monthly"]["status"]
    assert acme["firing"] == "page"
    assert float(acme["spent"]) > float(acme["expected_by_now"]) * 20
    assert float(acme["projected"]) > float(acme["amount"])
    fleet = by_name["fleet-weekly"]["status"]
    assert fleet["firing"] is None
    assert fleet["period_start"] == "2026-12-07T00:00:00Z"

    one = api.get("/api/v1/budgets/acme-monthly", headers=bearer(ADMIN_TOKEN)).json()
    assert one["versions"][0]["version"] == 1
    assert one["status"]["top_spenders"][0]["instance"] == "h200-a"

    # A token limited to a tenant sees its tenant's budgets only, never the fleet's.
    assert api.get("/api/v1/budgets", headers=bearer(GLOBEX)).json() == {"budgets": []}
    mine = api.get("/api/v1/budgets", headers=bearer(ACME)).json()["budgets"]
    assert [b["metadata"]["name"] for b in mine] == ["acme-monthly"]
    assert api.get("/api/v1/budgets/acme-monthly", headers=bearer(GLOBEX)).status_code == 403
    assert api.get("/api/v1/budgets/fleet-weekly", headers=bearer(ACME)).status_code == 403
    missing = api.get("/api/v1/budgets/nope", headers=bearer(ADMIN_TOKEN))
    assert missing.status_code == 404
    assert "nope" in missing.json()["error"]["message"]


def _cli(store_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSIGHT_")}
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from infersight.cli import main; main()",
            "--store",
            store_url,
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT), "INFERSIGHT_COST_MODEL": "prices"},
        check=False,
        timeout=300,
    )


def test_the_cli_applies_versions_lists_and_scopes_a_team(store, tmp_path):
    cost_store.put_model(store.engine, flat_model("4.00"), NOW)
    path = tmp_path / "budgets.yaml"
    path.write_text(DOC + "---\n" + FLEET)
    first = _cli(store.url, "budget", "apply", str(path))
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["acme-monthly: version 1", "fleet-weekly: version 1"]
    again = _cli(store.url, "budget", "apply", str(path))
    assert "acme-monthly: unchanged (version 1)" in again.stdout
    path.write_text(DOC.replace('"100"', '"250"'))
    raised = _cli(store.url, "budget", "apply", str(path))
    assert raised.stdout.strip() == "acme-monthly: version 2"

    listed = _cli(store.url, "budget", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["metadata"]["name"]: r for r in json.loads(listed.stdout)["budgets"]}
    assert rows["acme-monthly"]["version"] == 2
    assert rows["acme-monthly"]["spec"]["amount"] == "250"
    table = _cli(store.url, "budget", "list")
    assert "acme-monthly" in table.stdout
    assert "tenant=acme" in table.stdout

    path.write_text(DOC.replace("tenant: acme", "team: search"))
    team = _cli(store.url, "budget", "apply", str(path))
    assert team.returncode == 0, team.stderr
    assert team.stdout.strip() == "acme-monthly: version 3"
    assert "team=search" in _cli(store.url, "budget", "list").stdout
    path.write_text(DOC.replace("USD", "EUR"))
    euros = _cli(store.url, "budget", "apply", str(path))
    assert euros.returncode == 2
    assert "EUR" in euros.stderr
