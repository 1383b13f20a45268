"""The Scaling page in Debian's Chromium with a disaggregated model: one row and one chart per
pool, each naming its pool (set ``INFERSIGHT_DASHBOARD_SHOTS`` to keep a screenshot)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from infersight.core.scaling import ScalingPolicy
from infersight.service.evaluation import default_policy
from infersight.service.scaling import Recommender
from infersight.storage import migrate
from infersight.storage import scaling as scaling_store
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from tests.dashboard.conftest import Live, Page, browser, page, screenshot, serve
from tests.doubles import NOW
from tests.scaling.split_fleet import MODEL, seed_split

pytestmark = [pytest.mark.e2e]
__all__ = ["browser", "page"]  # the dashboard's Chromium fixtures, used here


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    path: Path = tmp_path_factory.mktemp("scaling-pools") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    seed_split(
        engine, NOW, prefill=2, decode=2, prefill_waiting=12.0, decode_waiting=0.5, minutes=45
    )
    scaling_store.put_policy(engine, ScalingPolicy(name="pd", model=MODEL), NOW)
    recommender = Recommender(SqlStore(engine), default_policy())
    for minutes_ago in range(40, -1, -5):
        recommender.run(NOW - timedelta(minutes=minutes_ago))
    with serve(engine, NOW) as server:
        yield server
    engine.dispose()


def test_the_scaling_page_shows_a_row_and_charts_per_pool(live: Live, page: Page) -> None:
    response = page.goto(f"{live.url}/ui/scaling?range=1h")
    assert response.status == 200
    rows = page.tab.locator("table.scaling tbody tr")
    assert rows.count() == 2
    pools = [rows.nth(i).get_attribute("data-pool") for i in range(2)]
    assert pools == ["decode", "prefill"]
    prefill = page.tab.locator('table.scaling tr[data-pool="prefill"]')
    assert "queue" in prefill.inner_text()
    sections = page.tab.locator("section.model-scaling")
    assert sections.count() == 2
    heading = page.tab.locator('section.model-scaling[data-pool="prefill"] h2').inner_text()
    assert heading.startswith(f"{MODEL} · prefill pool")
    assert "0 recommendations" not in sections.first.inner_text()
    screenshot(page, "scaling_pools")
    assert page.problems == []
