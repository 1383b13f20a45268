"""The Cost page's *Who spent it* section (#34), in Debian's Chromium: cost per tenant of a
fleet whose engines named no tenant (their traces' gateway spans did), usage + idle =
allocation per row and the fleet's usage + idle / unallocated = its total; by team and by
workload through the section's pills; the top N with the rest folded into (other)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.timestamps import iso
from infersight.storage import cost as cost_store
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from tests.cost.attributed_fleet import TENANTS, WINDOW, write_fleet
from tests.cost.scenario import MODEL
from tests.dashboard.conftest import Live, Page, screenshot
from tests.peers import serving_app

pytestmark = [pytest.mark.e2e]
RANGE = f"start={iso(WINDOW.start)}&end={iso(WINDOW.end)}"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    path: Path = tmp_path_factory.mktemp("attribution-pages") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    write_fleet(engine)
    cost_store.put_model(engine, MODEL, WINDOW.end)
    settings = ApiSettings(run_jobs=False, cost_model=MODEL.name, attribution_top_n=3)
    with serving_app(create_app(settings, engine, lambda: WINDOW.end)) as url:
        yield Live(url)
    engine.dispose()


def _amount(text: str) -> Decimal:
    return Decimal(text.split(maxsplit=1)[0].replace(",", ""))


def _table(page: Page) -> list[list[str]]:
    rows = page.tab.locator("table.cost-attribution tbody tr")
    return [
        [c.strip() for c in rows.nth(i).locator("td").all_inner_texts()]
        for i in range(rows.count())
    ]


def test_the_cost_page_shows_who_spent_it(live: Live, page: Page) -> None:
    response = page.goto(f"{live.url}/ui/cost?{RANGE}")
    assert response.status == 200
    section = page.tab.locator("#attribution")
    assert section.get_attribute("data-dimension") == "tenant"
    rows = _table(page)
    labels = [row[0] for row in rows]
    assert labels == ["acme", "globex", "initech", "(other) (1 more)", "(unattributed)", "Fleet"]
    for row in rows[:-1]:
        usage, idle, allocation = (_amount(row[i]) for i in (3, 4, 5))
        assert usage + idle == allocation  # shown to the millionth, as computed
    fleet = rows[-1]
    assert int(fleet[1].replace(",", "")) == sum(TENANTS.values())
    total = _amount(fleet[5])
    assert _amount(fleet[3]) + _amount(fleet[4]) == total
    assert sum(_amount(row[5]) for row in rows[:-1]) == total
    note = page.tab.locator("#attribution-note").inner_text()
    assert "The top 3 tenants by cost are shown; 1 more of 4 are folded into (other)" in note
    assert f"{sum(TENANTS.values()) - TENANTS['']} of {sum(TENANTS.values())} requests" in note
    section.scroll_into_view_if_needed()
    screenshot(page, "cost-attribution-tenant")
    folder = Path("/tmp/shots/attribution")
    if folder.exists():
        section.screenshot(path=str(folder / "cost-who-spent-it-tenant.png"))

    page.tab.locator("#attribution a.pill", has_text="team").click()
    page.tab.wait_for_load_state("load")
    assert page.tab.locator("#attribution").get_attribute("data-dimension") == "team"
    assert [row[0] for row in _table(page)] == ["search", "ads", "(unattributed)", "Fleet"]
    if folder.exists():
        page.tab.locator("#attribution").screenshot(path=str(folder / "cost-who-spent-it-team.png"))
    assert "by=team" in page.tab.url
    page.goto(f"{live.url}/ui/cost?{RANGE}&by=workload")
    assert [row[0] for row in _table(page)][:2] in (["key-0", "key-1"], ["key-1", "key-0"])
    assert page.problems == []


def test_filters_hide_the_split_with_a_reason(live: Live, page: Page) -> None:
    page.goto(f"{live.url}/ui/cost?{RANGE}&instance=gpu-a")
    text = page.tab.locator("#attribution").inner_text()
    assert "clear the filters to see it" in text
    assert page.problems == []
