"""In Debian's Chromium (#16): ``/docs`` and ``/redoc`` render with the network closed, a
dashboard path that does not exist answers the dashboard's own 404 page (its navigation and a
link home) while the JSON API keeps its error shape, and the Latency table has every
percentile the charts toggle, P95 included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.dashboard.conftest import Live, Page, screenshot, watch

pytestmark = [pytest.mark.e2e]

#: How long a page may take to draw before the test gives up (a bound, not a budget).
DRAWN_MS = 60_000


@pytest.fixture
def offline(browser: Any) -> Iterator[tuple[Page, list[str]]]:
    """A tab whose network reaches 127.0.0.1 only: every other request is aborted and kept."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    refused: list[str] = []

    def only_loopback(route: Any) -> None:
        if urlparse(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort("internetdisconnected")

    context.route("**/*", only_loopback)
    tab = context.new_page()
    problems = watch(tab)
    yield Page(tab, problems), refused
    context.close()


def test_swagger_ui_renders_every_operation_with_the_network_closed(
    live: Live, offline: tuple[Page, list[str]]
):
    page, refused = offline
    response = page.goto(f"{live.url}/docs")
    assert response.status == 200
    latency = page.tab.locator('.opblock-summary-path[data-path="/api/v1/latency"]')
    latency.wait_for(timeout=DRAWN_MS)
    csp = response.headers["content-security-policy"]
    assert "script-src 'self'" in csp
    assert "default-src 'none'" in csp
    assert page.tab.locator(".opblock").count() >= 25
    assert page.tab.locator('.opblock-summary-path[data-path="/api/v1/incidents"]').count() == 1
    assert page.tab.locator('.opblock-summary-path[data-path^="/api/v1/alerts"]').count() == 0
    # Opening an operation shows its parameters, range= among them.
    latency.click()
    page.tab.locator('tr[data-param-name="range"]').first.wait_for(timeout=DRAWN_MS)
    screenshot(page, "docs-offline")
    assert refused == []
    assert page.problems == []


def test_redoc_renders_with_the_network_closed(live: Live, offline: tuple[Page, list[str]]):
    page, refused = offline
    response = page.goto(f"{live.url}/redoc")
    assert response.status == 200
    # The operation's heading in the document pane: its entry in the side menu sits folded
    # under its tag ("queries") and is not visible until the tag is opened.
    page.tab.get_by_role("heading", name="Latency quantiles per group").first.wait_for(
        timeout=DRAWN_MS
    )
    screenshot(page, "redoc-offline")
    assert refused == []
    # ReDoc's own "API docs by Redocly" badge points at its CDN; the policy blocks it (and only
    # it) before it is requested.
    assert [p for p in page.problems if "cdn.redoc.ly/redoc/logo-mini.svg" not in p] == []


@pytest.mark.parametrize("path", ["/ui/no-such-page", "/ui/latency/extra", "/overveiw"])
def test_a_missing_dashboard_page_is_the_dashboards_404_with_its_navigation(
    live: Live, page: Page, path: str
):
    # The JSON API keeps its error shape, whatever the client accepts.
    for accept in ("application/json", "text/html,application/xhtml+xml,*/*;q=0.8"):
        response = httpx.get(f"{live.url}/api/v1/no-such-thing", headers={"accept": accept})
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    response = page.goto(f"{live.url}{path}")
    assert response.status == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'self'" in response.headers["content-security-policy"]
    tabs = page.tab.locator("nav.tabs a")
    assert [tabs.nth(i).inner_text() for i in range(tabs.count())] == [
        "Overview", "Latency", "GPUs", "Cost", "Budgets", "Incidents", "Baselines", "Capacity",
        "Scaling",
    ]  # fmt: skip
    assert path in page.tab.locator("[data-state=error]").inner_text()
    home = page.tab.locator("a.home")
    assert home.get_attribute("href") == "/ui/overview"
    if path == "/ui/no-such-page":
        screenshot(page, "not-found")
    home.click()
    page.tab.wait_for_load_state("load")
    assert page.tab.url.endswith("/ui/overview")
    # Chromium reports the 404 of the page itself; nothing else may go wrong.
    document_404 = "Failed to load resource: the server responded with a status of 404"
    assert [p for p in page.problems if document_404 not in p] == []
    assert len(page.problems) <= 1


def test_the_latency_table_has_p95_beside_the_other_percentiles(live: Live, page: Page):
    page.goto(f"{live.url}/ui/latency")
    table = page.tab.locator("table.latency")
    header = table.locator("thead tr").nth(1).locator("th")
    labels = [header.nth(i).inner_text() for i in range(header.count())]
    assert labels == ["P50", "P90", "P95", "P99"] * 3
    pickers = page.tab.locator(".pickers a.pill")
    assert [pickers.nth(i).inner_text() for i in range(pickers.count())] == labels[:4]
    rows = table.locator("tbody tr")
    assert rows.count() >= 2
    for i in range(rows.count()):
        cells = rows.nth(i).locator('td[data-q="0.95"]')
        assert cells.count() == 3  # TTFT, TPOT and E2E
        assert all(cells.nth(c).inner_text().strip() not in ("", "—") for c in range(3))
    screenshot(page, "latency")
    assert page.problems == []
