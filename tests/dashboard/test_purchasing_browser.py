"""The Cost and Scaling pages in Debian's Chromium over the fleet week: the reserved /
on-demand split, the idle windows and the hour-of-week grid, and the next command where a
range holds no GPU data."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.storage import cost as cost_store
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from tests.dashboard.conftest import Live, Page, screenshot
from tests.peers import serving_app
from tests.purchasing import scenario as s

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    path: Path = tmp_path_factory.mktemp("purchasing-pages") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    s.write_fleet_week(engine)
    cost_store.put_model(engine, s.MODEL, s.WEEK.end)
    settings = ApiSettings(run_jobs=False, cost_model=s.MODEL.name)
    with serving_app(create_app(settings, engine, lambda: s.WEEK.end)) as url:
        yield Live(url)
    engine.dispose()


def _check_split(page: Page) -> None:
    section = page.tab.locator("#purchasing")
    assert section.count() == 1
    advice = section.locator(".purchasing-advice")
    assert advice.get_attribute("data-reserved-gpus") == str(s.RESERVED_GPUS)
    text = advice.inner_text()
    assert f"{s.SPLIT_COST:,.2f} USD" in text
    assert f"{s.ON_DEMAND_COST:,.2f} USD" in text
    assert section.locator(".saving").inner_text() == f"{s.SAVING:,.2f} USD"
    assert "85 %" in text  # 336 of 396 GPU-hours on reserved
    pool = section.locator('table.purchasing-split tr[data-pool="NVIDIA H200"]')
    assert "2.80 USD" in pool.inner_text()
    windows = section.locator("table.idle-windows tbody tr")
    assert windows.count() == 5
    assert windows.first.get_attribute("data-window") == "Mon 01:00–07:00"
    assert f"{s.WINDOW_IDLE_COST:,.2f} USD" in windows.first.inner_text()
    grid = section.locator("svg.week-grid")
    assert grid.locator("rect.cell").count() == 168
    assert grid.locator("rect.idle").count() == 42
    assert "cuts cost per million tokens by" in section.locator("p.fill").inner_text()


def test_the_cost_page_shows_the_split_and_the_idle_windows(live: Live, page: Page) -> None:
    response = page.goto(f"{live.url}/ui/cost?range=7d")
    assert response.status == 200
    _check_split(page)
    assert "over this range" in page.tab.locator(".purchasing-advice").inner_text().lower()
    page.tab.locator("#purchasing").scroll_into_view_if_needed()
    screenshot(page, "purchasing-cost")
    assert page.problems == []


def test_a_short_range_is_advised_on_the_last_four_weeks(live: Live, page: Page) -> None:
    page.goto(f"{live.url}/ui/cost?range=24h")
    advice = page.tab.locator("#purchasing .purchasing-advice").inner_text()
    assert "the last 28 days" in advice
    assert page.problems == []


def test_the_scaling_page_fills_its_purchasing_block(live: Live, page: Page) -> None:
    response = page.goto(f"{live.url}/ui/scaling?range=7d")
    assert response.status == 200
    _check_split(page)
    screenshot(page, "purchasing-scaling")
    assert page.problems == []


def test_without_gpu_data_the_scaling_page_names_the_next_command(live: Live, page: Page) -> None:
    later = (s.WEEK.start - timedelta(days=60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    earlier = (s.WEEK.start - timedelta(days=50)).strftime("%Y-%m-%dT%H:%M:%SZ")
    page.goto(f"{live.url}/ui/scaling?start={later}&end={earlier}")
    empty = page.tab.locator('#purchasing [data-state="empty"]')
    assert "infersight sidecar --instance NAME" in empty.inner_text()
    assert page.problems == []
