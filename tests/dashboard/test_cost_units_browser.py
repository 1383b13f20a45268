"""The Cost page in Debian's Chromium: a small unit cost keeps its significant digits and its
currency (#16)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from tests.cost.cheap_prefill import HOUR, write_cheap_prefill_hour
from tests.dashboard.conftest import RETENTION, Live, Page
from tests.peers import serving_app

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def cheap_live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    engine = create_store_engine(f"sqlite:///{tmp_path_factory.mktemp('cheap') / 'store.db'}")
    migrate.upgrade(engine)
    write_cheap_prefill_hour(engine)
    now = HOUR.end + timedelta(minutes=1)
    settings = ApiSettings(run_jobs=False, cost_model="worked")
    try:
        with serving_app(create_app(settings, engine, lambda: now, retention=RETENTION)) as url:
            yield Live(url)
    finally:
        engine.dispose()


def test_the_cost_page_keeps_small_unit_costs_and_their_currency(cheap_live: Live, page: Page):
    page.goto(f"{cheap_live.url}/ui/cost")
    kpi = page.tab.locator("#kpi-cost-per-million small").inner_text()
    assert "in 0.000142 USD" in kpi  # was "in 0.000 USD"
    row = page.tab.locator("table.cost-models tbody tr").first
    cells = [c.strip() for c in row.locator("td").all_inner_texts()]
    assert "0.000142 USD" in cells
    assert not any(c.startswith("0.000 ") for c in cells)
    assert page.problems == []
