"""One apply for every versioned kind (``service.apply``, ``infersight apply -f``): a mixed
stream stored in one transaction on SQLite and PostgreSQL, all or nothing, and a dry run that
answers what applying would do and stores nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from infersight.cli.group import cli
from infersight.core.errors import InvalidInput
from infersight.core.scaling import ScalingPolicy
from infersight.service.apply import apply, read_documents
from infersight.storage import budgets, cost_models, scaling, slo_store

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 10, 12, tzinfo=UTC)
#: One of each kind; the cost model is the one in use (``prices``), in euros like the budget.
MIXED = """\
apiVersion: infersight/v1
kind: SLO
metadata: {name: chat-ttft}
spec:
  sli: {goodput: {ttft: 2s, per: token}}
  window: 28d
  objective: 0.99
---
apiVersion: infersight/v1
kind: CostModel
metadata: {name: prices}
spec: {currency: EUR, gpuPrices: {H200: {onDemandPerHour: "3.50"}}}
---
apiVersion: infersight/v1
kind: ScalingPolicy
metadata: {name: chat}
spec: {model: llama-70b, replicas: {min: 2, max: 8}}
---
apiVersion: infersight/v1
kind: Budget
metadata: {name: acme}
spec: {scope: {tenant: acme}, amount: "100", currency: EUR}
"""


def stored(engine) -> dict[str, object]:
    return {
        "slos": [s.name for s in slo_store.list_slos(engine)],
        "models": [m.name for m in cost_models.list_models(engine)],
        "policies": [p.name for p in scaling.list_policies(engine)],
        "budgets": [(b.name, b.version, str(b.amount)) for b in budgets.list_budgets(engine)],
    }


def said(outcome, dry_run: bool = False) -> list[str]:
    return [f"{a.document.kind} {a.document.name}: {a.said(dry_run)}" for a in outcome.applied]


def test_a_mixed_stream_is_applied_once_then_updated(store) -> None:
    outcome = apply(store.sql, read_documents(MIXED), now=NOW, cost_model="prices")
    assert said(outcome) == [
        "SLO chat-ttft: created",
        "CostModel prices: created",
        "ScalingPolicy chat: created",
        "Budget acme: version 1",
    ]
    assert [a.in_use for a in outcome.applied] == [False, True, False, False]
    assert "chat-ttft counts output tokens" in outcome.applied[0].notes[0]
    assert stored(store.engine) == {
        "slos": ["chat-ttft"],
        "models": ["prices"],
        "policies": ["chat"],
        "budgets": [("acme", 1, "100")],
    }
    assert cost_models.get_model(store.engine, "prices").currency == "EUR"
    again = apply(store.sql, read_documents(MIXED), now=NOW, cost_model="prices")
    assert said(again) == [
        "SLO chat-ttft: updated",
        "CostModel prices: updated",
        "ScalingPolicy chat: updated",
        "Budget acme: unchanged (version 1)",
    ]


def test_a_dry_run_answers_what_applying_would_do_and_stores_nothing(store) -> None:
    apply(store.sql, read_documents(MIXED), now=NOW, cost_model="prices")
    before = stored(store.engine)
    raised = MIXED.replace('amount: "100"', 'amount: "250"') + (
        "---\napiVersion: infersight/v1\nkind: ScalingPolicy\nmetadata: {name: batch}\nspec: {}\n"
    )
    dry = apply(store.sql, read_documents(raised), now=NOW, cost_model="prices", dry_run=True)
    assert said(dry, dry_run=True) == [
        "SLO chat-ttft: would be updated",
        "CostModel prices: would be updated",
        "ScalingPolicy chat: would be updated",
        "Budget acme: would be version 2",
        "ScalingPolicy batch: would be created",
    ]
    assert dry.dry_run
    assert stored(store.engine) == before
    done = apply(store.sql, read_documents(raised), now=NOW, cost_model="prices")
    assert said(done)[3:] == ["Budget acme: version 2", "ScalingPolicy batch: created"]
    assert stored(store.engine)["budgets"] == [("acme", 2, "250")]


def test_a_write_the_store_refuses_rolls_back_the_whole_stream(store) -> None:
    # A policy of another name already covers llama-70b: the third document's write is
    # refused, after the SLO and the cost model were written in the same transaction.
    scaling.put_policy(store.engine, ScalingPolicy(name="other", model="llama-70b"), NOW)
    with pytest.raises(InvalidInput) as caught:
        apply(store.sql, read_documents(MIXED), now=NOW, cost_model="prices")
    assert caught.value.message == (
        "document 3 (ScalingPolicy chat): scaling policy 'other' already applies to model "
        "'llama-70b'"
    )
    assert caught.value.details["document"] == 3
    assert stored(store.engine) == {
        "slos": [],
        "models": [],
        "policies": ["other"],
        "budgets": [],
    }


def test_budgets_are_held_to_the_currency_of_the_cost_model_in_use(store) -> None:
    # The stream's cost model is the one in use: its currency, not the stored (or example) one.
    usd = MIXED.replace("currency: EUR, gpuPrices", "currency: USD, gpuPrices")
    with pytest.raises(InvalidInput, match=r"^document 4 \(Budget acme\): budget 'acme' is in EUR"):
        apply(store.sql, read_documents(usd), now=NOW, cost_model="prices")
    # Without the cost model in the stream, the stored one (here none: the example prices, USD).
    only_budget = MIXED.rsplit("---\n", maxsplit=1)[-1]
    with pytest.raises(InvalidInput, match="the cost model prices in USD"):
        apply(store.sql, read_documents(only_budget), now=NOW, cost_model="prices")
    assert stored(store.engine)["budgets"] == []
    apply(store.sql, read_documents(MIXED), now=NOW - timedelta(days=1), cost_model="prices")
    assert budgets.get_budget(store.engine, "acme").amount == Decimal("100")


def test_the_command_applies_a_mixed_file_all_or_nothing(store, tmp_path: Path) -> None:
    path = tmp_path / "all.yaml"
    path.write_text(MIXED)
    runner = CliRunner()
    env = {"INFERSIGHT_COST_MODEL": "prices"}
    base = ["--store", store.url, "apply", "-f", str(path)]
    dry = runner.invoke(cli, [*base, "--dry-run"], env=env)
    assert dry.exit_code == 0, dry.output
    assert dry.stdout.splitlines() == [
        "SLO chat-ttft: would be created",
        "CostModel prices: would be created (in use)",
        "ScalingPolicy chat: would be created",
        "Budget acme: would be version 1",
        "dry run: 4 documents (SLO 1, CostModel 1, ScalingPolicy 1, Budget 1) checked; "
        "nothing was stored",
    ]
    assert stored(store.engine)["slos"] == []
    done = runner.invoke(cli, base, env=env)
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [
        "SLO chat-ttft: created",
        "CostModel prices: created (in use)",
        "ScalingPolicy chat: created",
        "Budget acme: version 1",
        "applied 4 documents (SLO 1, CostModel 1, ScalingPolicy 1, Budget 1) in one transaction",
    ]
    assert "note: chat-ttft counts output tokens" in done.stderr
    as_json = json.loads(runner.invoke(cli, [*base, "--json"], env=env).stdout)
    assert as_json["dry_run"] is False
    assert [(a["kind"], a["created"], a["version"]) for a in as_json["applied"]] == [
        ("SLO", False, None),
        ("CostModel", False, None),
        ("ScalingPolicy", False, None),
        ("Budget", False, 1),
    ]
    assert as_json["applied"][0]["source"] == str(path)


def test_the_per_area_commands_read_only_their_kind(store, tmp_path: Path) -> None:
    path = tmp_path / "all.yaml"
    path.write_text(MIXED)
    result = CliRunner().invoke(cli, ["--store", store.url, "slo", "apply", str(path)])
    assert isinstance(result.exception, InvalidInput)
    assert result.exception.message.startswith(
        f"{path}: 3 of 4 documents are invalid: document 2 (CostModel prices): expected kind SLO"
    )
    assert stored(store.engine)["slos"] == []


def run(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSIGHT_")}
    return subprocess.run(
        [sys.executable, "-c", "from infersight.cli import main; main()", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT), "INFERSIGHT_COST_MODEL": "prices"},
        check=False,
        timeout=300,
    )


def test_a_bad_stream_from_standard_input_applies_nothing_and_says_so(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    bad = MIXED.replace("window: 28d", "window: forever")
    done = run("--store", store, "apply", "-f", "-", stdin=bad)
    assert done.returncode == 2, done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("error: /dev/stdin: document 1 (SLO chat-ttft): invalid SLO ")
    assert "spec.window: not a duration: 'forever'" in first
    assert first.endswith("(nothing was applied)")
    assert not (tmp_path / "x.db").exists()  # read before the store is opened
    good = run("--store", store, "apply", "-f", "-", stdin=MIXED)
    assert good.returncode == 0, good.stderr
    assert good.stdout.splitlines()[-1].startswith("applied 4 documents")
