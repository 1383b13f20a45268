"""The Cost page's reconciliation with the bill in Debian's Chromium: the worked week with a
FOCUS bill for Monday to Wednesday (``tests.cost.bill``) — billed vs modelled per instance,
the drift, the unmatched lines both ways, the effective price and the command that uses it;
and the page before any bill is imported."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.focus import BillMapping
from infersight.service import reconcile as rec
from infersight.storage import bills, migrate
from infersight.storage import cost as cost_store
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from tests.cost import bill
from tests.cost.scenario import MODEL, WEEK, WEEK_START, write_worked_week
from tests.dashboard.conftest import Live, Page, screenshot
from tests.peers import serving_app

pytestmark = [pytest.mark.e2e]
NOW = WEEK_START + timedelta(days=3)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, object]]:
    path: Path = tmp_path_factory.mktemp("reconcile-pages") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    write_worked_week(engine)
    cost_store.put_model(engine, MODEL, WEEK.end)
    settings = ApiSettings(run_jobs=False, cost_model=MODEL.name)
    with serving_app(create_app(settings, engine, lambda: NOW)) as url:
        yield Live(url), engine
    engine.dispose()


def test_the_cost_page_reconciles_with_the_bill(live, page: Page) -> None:
    server, engine = live
    page.goto(f"{server.url}/ui/cost?range=24h")  # (another query: pages are cached a while)
    before = page.tab.locator("#reconciliation").inner_text()
    assert "not reconciled" in before
    assert "infersight cost import-bill FILE" in before
    imported = rec.import_bytes(
        SqlStore(engine), bill.to_csv(bill.rows(0, 3)), "nov.csv", BillMapping(), WEEK.end
    )
    try:
        response = page.goto(f"{server.url}/ui/cost?range=7d")
        assert response.status == 200
        section = page.tab.locator("#reconciliation")
        summary = section.locator("#reconciliation-summary").inner_text()
        assert "3 instance-day(s) on 3 day(s) reconciled with 1 imported bill(s)" in summary
        assert "drift -10.71%" in summary
        row = section.locator('table.reconcile-instances tr[data-instance="h200-a"]').inner_text()
        for text in ("216.00 USD", "241.92 USD", "-25.92 USD", "-10.7 %", "3.000 USD", "3.100 USD"):
            assert text in row
        not_seen = section.locator("#reconcile-not-seen").inner_text()
        assert "gpu-node-9" in not_seen
        assert "315.00 USD" in not_seen
        not_billed = section.locator("#reconcile-not-billed").inner_text()
        assert "h200-idle" in not_billed
        assert "79.49 USD" in not_billed
        assert "Tax 30.00 USD" in section.inner_text()
        assert "infersight cost use-billed-price --start" in section.inner_text()
        section.scroll_into_view_if_needed()
        screenshot(page, "cost-reconciliation")
        assert page.problems == []
        filtered = page.goto(f"{server.url}/ui/cost?range=7d&model=llama-70b")
        assert filtered.status == 200
        assert "clear the filters" in page.tab.locator("#reconciliation").inner_text()
    finally:
        bills.delete_import(engine, imported.id)
