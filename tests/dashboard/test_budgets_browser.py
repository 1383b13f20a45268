"""The Budgets page in Debian's Chromium: a tenant's budget that burns (its page alert open,
its top spender), a fleet budget on track, and the cost step of an idle surge with its factors;
the budget's incident page; and the page before any budget is applied."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.window import Window
from infersight.service.budgets import MoneyAlerts, apply_budgets, parse_budgets
from infersight.storage import cost as cost_store
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.cost.scenario import gpu_series
from tests.cost.test_budget_surfaces import FLEET
from tests.cost.test_budgets import DOC, NOW, flat_model, seed
from tests.dashboard.conftest import Live, Page, screenshot
from tests.peers import serving_app

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, object]]:
    path: Path = tmp_path_factory.mktemp("budget-pages") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    model = flat_model("4.00")
    cost_store.put_model(engine, model, NOW - timedelta(days=10))
    settings = ApiSettings(run_jobs=False, cost_model=model.name)
    with serving_app(create_app(settings, engine, lambda: NOW)) as url:
        yield Live(url), engine
    engine.dispose()


def test_the_budgets_page_shows_spend_burn_alerts_and_the_cost_step(live, page: Page) -> None:
    server, engine = live
    response = page.goto(f"{server.url}/ui/budgets?range=1h")
    assert response.status == 200
    assert "infersight budget apply FILE" in page.tab.locator("#budgets").inner_text()
    assert page.problems == []

    # Long prompts: the last 6 h hold over a million tokens (the step's minimum volume).
    seed(Store("", engine), Window(NOW - timedelta(days=10), NOW), input_tokens=100_000)
    writer = open_writer(engine)
    for name in ("h200-b", "h200-c", "h200-d"):
        writer.write_gpu_samples(
            gpu_series(name, Window(NOW - timedelta(hours=6), NOW), util=0.0, power_w=90.0)
        )
    apply_budgets(
        SqlStore(engine), parse_budgets(DOC + "---\n" + FLEET), NOW - timedelta(days=9), "USD"
    )
    MoneyAlerts(SqlStore(engine), lambda: flat_model("4.00"))(NOW)

    response = page.goto(f"{server.url}/ui/budgets?range=24h")
    assert response.status == 200
    acme = page.tab.locator("#budget-acme-monthly").inner_text()
    assert "tenant acme" in acme
    assert "100.00 USD" in acme
    assert "page" in acme
    assert "llama-70b @ h200-a" in acme
    fleet = page.tab.locator("#budget-fleet-weekly").inner_text()
    assert "ok" in fleet
    steps = page.tab.locator("#cost-steps").inner_text()
    assert "idle gpus" in steps
    screenshot(page, "budgets")
    assert page.problems == []

    # The alert's incident page tells the budget's evidence.
    page.tab.locator("#budget-acme-monthly a.badge").click()
    page.tab.wait_for_load_state()
    text = page.tab.locator("main").inner_text()
    assert "budget:acme-monthly" in text
    screenshot(page, "budget-incident")
    assert page.problems == []
