"""The dashboard in Debian's Chromium against a live server over a seeded store.

Every page loads with data and draws its charts, the filters and pickers change what is shown
and keep it in the URL, legend items toggle their line, the login form admits a token and
sets a safe session cookie, and no page logs a console error or warning.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import func, select

from infersight.storage.tables import client_requests, requests
from tests.dashboard.conftest import READ_TOKEN, Live, Page, Seeded, screenshot
from tests.dashboard.seed import BASELINE, DATA_PARALLEL, INSTANCES, MODEL_8B, THROTTLED

pytestmark = [pytest.mark.e2e]


def _query(page: Page) -> dict[str, list[str]]:
    return parse_qs(urlparse(page.tab.url).query)


def test_the_overview_shows_slos_the_firing_incident_and_fleet_throughput(live: Live, page: Page):
    response = page.goto(f"{live.url}/")
    assert response.status == 200
    assert page.tab.url.endswith("/ui/overview")
    slos = page.tab.locator("tr[data-slo]")
    assert slos.count() == 3
    burning = page.tab.locator('tr[data-slo="chat-70b-tpot"]')
    assert "page" in burning.inner_text()
    assert "0 %" in burning.locator(".meter").inner_text()  # the budget is spent
    assert page.tab.locator("#kpi-incidents strong").inner_text() == "1"
    assert "GPU throttled" in page.tab.locator(".incidents-short").inner_text()
    assert page.tab.locator("svg.chart polyline").count() >= 4  # 2 charts × 2 models
    screenshot(page, "overview")
    assert page.problems == []


def test_the_latency_page_draws_percentiles_a_heatmap_and_the_stage_breakdown(
    live: Live, page: Page
):
    page.goto(f"{live.url}/ui/latency")
    rows = page.tab.locator("table.latency tbody tr")
    assert sorted(rows.nth(i).get_attribute("data-instance") for i in range(rows.count())) == (
        sorted(INSTANCES)
    )
    for metric in ("ttft", "tpot", "e2e"):
        chart = page.tab.locator(f"#chart-{metric} svg.chart")
        assert chart.locator("g.series").count() == 4
        assert chart.locator("polyline").count() >= 4
    assert page.tab.locator("#heatmap rect.cell").count() > 100
    assert page.tab.locator("#breakdown .hbar-row").count() == 2
    assert "decode" in page.tab.locator("#breakdown").inner_text()
    screenshot(page, "latency")
    # The percentile picker redraws the charts at another quantile and keeps it in the URL.
    p99 = page.tab.locator("#chart-ttft polyline").first.get_attribute("points")
    page.tab.click("a.pill:text-is('P50')")
    page.tab.wait_for_load_state("load")
    assert _query(page)["q"] == ["0.5"]
    assert page.tab.locator("#chart-ttft polyline").first.get_attribute("points") != p99
    assert page.problems == []


def test_the_latency_page_shows_the_client_engine_gap_of_joined_and_unjoined_calls(
    seeded: Seeded, live: Live, page: Page
):
    with seeded.engine.connect() as c:
        calls = c.execute(select(func.count()).select_from(client_requests)).scalar()
        joined = c.execute(
            select(func.count())
            .select_from(client_requests)
            .where(client_requests.c.trace_id.in_(select(requests.c.trace_id)))
        ).scalar()
    assert calls
    assert 0 < joined < calls
    page.goto(f"{live.url}/ui/latency")
    rows = page.tab.locator("#client-gap table.gap tbody tr")
    assert rows.count() >= 1
    models = {rows.nth(i).get_attribute("data-model") for i in range(rows.count())}
    assert models == {"llama-3.1-8b-instruct"}  # the client's short name, the server's full one
    shown = sum(
        int(rows.nth(i).locator("td[data-joined]").get_attribute("data-joined"))
        for i in range(rows.count())
    )
    assert shown == joined
    assert "unjoined" in page.tab.locator("#client-gap").inner_text()
    page.tab.locator("#client-gap").scroll_into_view_if_needed()
    screenshot(page, "latency-client-gap")
    assert page.problems == []


def test_the_gpu_page_shows_every_gpu_and_the_throttled_one(live: Live, page: Page):
    page.goto(f"{live.url}/ui/gpus")
    rows = page.tab.locator("table.gpus tbody tr")
    assert rows.count() == 10  # 2 × 70B on four GPUs, 2 × 8B on one
    throttled = page.tab.locator(f'table.gpus tr[data-instance="{THROTTLED}"]').first
    assert "thermal" in throttled.inner_text()
    healthy = page.tab.locator('table.gpus tr[data-instance="vllm-8b-0"]').first
    assert "none" in healthy.inner_text()
    for chart in ("util", "memory", "power", "sm_clock", "temperature", "throttled"):
        assert page.tab.locator(f"#gpu-{chart} polyline").count() == 10
    screenshot(page, "gpus")
    assert page.problems == []


def test_the_gpu_page_shows_the_engines_of_a_data_parallel_server(live: Live, page: Page):
    page.goto(f"{live.url}/ui/gpus")
    engines = page.tab.locator("#engines table.engines tbody tr")
    assert engines.count() == 2
    hot = page.tab.locator(f'#engines tr[data-instance="{DATA_PARALLEL}"][data-engine="0"]')
    assert "hot" in hot.inner_text()
    cool = page.tab.locator(f'#engines tr[data-instance="{DATA_PARALLEL}"][data-engine="1"]')
    assert "hot" not in cool.inner_text()
    assert page.tab.locator("#engine-kv polyline").count() == 2
    screenshot(page, "gpus-engines")
    assert page.problems == []


def test_the_incident_page_shows_the_timeline_diagnosis_and_evidence(live: Live, page: Page):
    page.goto(f"{live.url}/ui/incidents")
    cards = page.tab.locator("section.incident")
    assert cards.count() == 1
    card = cards.first
    assert "chat-70b-tpot" in card.inner_text()
    assert "GPU throttled" in card.locator(".diagnosis h3").inner_text()
    assert THROTTLED in card.locator(".diagnosis").inner_text()
    assert card.locator("table.evidence tbody tr").count() >= 1
    bar = page.tab.locator(".timeline a.tl-bar")
    assert bar.count() == 1
    bar.click()
    assert page.tab.url.endswith(f"#{card.get_attribute('id')}")
    screenshot(page, "incidents")
    assert page.problems == []


def test_an_incident_page_shows_its_burn_timeline_headline_onset_evidence_and_history(
    live: Live, page: Page
):
    page.goto(f"{live.url}/ui/incidents")
    link = page.tab.locator("section.incident h2 a")
    assert link.count() == 1
    link.click()
    page.tab.wait_for_load_state("load")
    assert re.search(r"/ui/incidents/\d+", page.tab.url)
    card = page.tab.locator("section.incident")
    assert card.get_attribute("data-state") in ("firing", "recovering")
    assert "chat-70b-tpot" in card.locator("h2").inner_text()
    headline = page.tab.locator("#headline")
    assert "GPU throttled" in headline.locator("h3").inner_text()
    assert THROTTLED in headline.inner_text()
    assert "at the onset" in headline.inner_text()
    # The burn rates each evaluation saw: one line per window the page rules watch.
    chart = page.tab.locator("#burn-timeline svg.chart")
    assert chart.locator("g.series").count() == 4
    assert chart.locator("polyline").count() >= 1
    assert "14.4× over 1h and 5m" in page.tab.locator("#burn-timeline").inner_text()
    onset = page.tab.locator("#onset-evidence")
    assert onset.locator("table.evidence tbody tr").count() >= 3  # TTFT, TPOT, E2E…
    rows = page.tab.locator("#history table.history > tbody > tr")
    assert rows.count() >= 2
    assert rows.last.get_attribute("data-verdict") == "onset"  # newest first
    assert "GPU throttled" in rows.last.inner_text()
    rows.last.locator("summary").click()
    assert rows.last.locator("table.evidence").is_visible()
    screenshot(page, "incident")
    assert page.problems == []
    # An id that does not exist is a clear 404 page, not an error.
    response = page.goto(f"{live.url}/ui/incidents/999999")
    assert response.status == 404
    assert "no incident 999999" in page.tab.locator("main").inner_text()


def test_the_cost_page_prices_every_model_and_instance(live: Live, page: Page):
    page.goto(f"{live.url}/ui/cost")
    assert page.tab.locator("table.cost-models tbody tr").count() == 2
    assert page.tab.locator("table.cost-instances tbody tr").count() == 4
    assert "USD" in page.tab.locator("#kpi-cost-per-million").inner_text()
    assert "example list prices" in page.tab.locator("main").inner_text()
    assert page.tab.locator("#cost-split .hbar-row").count() == 2
    # Good tokens are measured against the seed's SLOs, and the page says which.
    good = page.tab.locator("#kpi-cost-per-million-good")
    assert good.get_attribute("data-basis") == "slo"
    assert "chat-70b-tpot (TPOT ≤ 35 ms)" in good.inner_text()
    assert "chat-8b-ttft (TTFT ≤ 500 ms)" in good.inner_text()
    bases = page.tab.locator("table.cost-models td[data-basis]")
    assert [bases.nth(i).get_attribute("data-basis") for i in range(2)] == ["slo", "slo"]
    screenshot(page, "cost")
    assert page.problems == []


def test_the_baseline_page_finds_the_regression_the_throttling_caused(live: Live, page: Page):
    page.goto(f"{live.url}/ui/baselines")
    assert BASELINE in page.tab.locator("#comparison h2").inner_text()
    assert page.tab.locator("#comparison h2 .badge").inner_text() == "regressed"
    tpot = page.tab.locator('tr[data-metric="tpot.p99"]')
    assert tpot.locator(".badge").inner_text() == "regressed"
    assert page.tab.locator('tr[data-metric="error_ratio"] .badge').inner_text() == "pass"
    # A unit cost with the cost model's currency and significant digits (#16).
    cost = page.tab.locator('tr[data-metric="cost_per_million_tokens"] td.num')
    values = [cost.nth(i).inner_text() for i in range(2)]
    assert all(re.fullmatch(r"\d+\.\d+ USD", v) for v in values), values
    screenshot(page, "baselines")
    assert page.problems == []


def test_the_capacity_page_shows_the_step_run_and_the_fleet_load(live: Live, page: Page):
    page.goto(f"{live.url}/ui/capacity")
    levels = page.tab.locator("table.levels tbody tr")
    assert levels.count() == 6
    assert "knee" in page.tab.locator("table.levels tr.knee").inner_text()
    load = page.tab.locator(f'table.fleet-load tr[data-model="{MODEL_8B}"]')
    assert "16 req/s per instance" in load.inner_text()
    assert load.locator(".meter").count() == 1
    screenshot(page, "capacity")
    assert page.problems == []


def test_the_capacity_page_names_the_catalogue_entry_of_each_served_model(live: Live, page: Page):
    # The fleet serves Hugging Face ids; the page matches them as capacity plan does (#16).
    page.goto(f"{live.url}/ui/capacity")
    cells = page.tab.locator("table.fleet-load td.catalogue")
    assert cells.count() == 2
    text = page.tab.locator("table.fleet-load").inner_text()
    assert "llama-3.1-8b" in text
    assert "128 KiB KV/token" in text
    assert "llama-3.1-70b" in text
    assert "not in the catalogue" not in text
    assert page.problems == []


def test_filters_narrow_every_page_and_stay_in_the_url(live: Live, page: Page):
    page.goto(f"{live.url}/ui/latency")
    page.tab.select_option("#filter-instance", "vllm-8b-0")
    page.tab.wait_for_url(re.compile(r"instance=vllm-8b-0"))
    rows = page.tab.locator("table.latency tbody tr")
    assert rows.count() == 1
    assert rows.first.get_attribute("data-instance") == "vllm-8b-0"
    assert page.tab.locator("#chart-ttft g.series").count() == 1
    # The menus narrow each other: with one instance chosen, one model is left to choose.
    models = page.tab.locator("#filter-model option").all_inner_texts()
    assert models == ["all", MODEL_8B]
    # Moving to another page keeps the filter.
    page.tab.click("nav.tabs a:text-is('GPUs')")
    page.tab.wait_for_load_state("load")
    assert _query(page)["instance"] == ["vllm-8b-0"]
    assert page.tab.locator("table.gpus tbody tr").count() == 1
    # A model filter hides the incident of the other model's SLO.
    page.goto(f"{live.url}/ui/incidents?model={MODEL_8B}")
    assert page.tab.locator("section.incident").count() == 0
    assert "No incidents" in page.tab.locator("main").inner_text()
    assert page.problems == []


def test_the_range_picker_and_auto_refresh(live: Live, page: Page):
    page.goto(f"{live.url}/ui/overview")
    before = page.tab.locator(".toolbar .window").inner_text()
    page.tab.select_option("#range", "6h")
    page.tab.wait_for_url(re.compile(r"range=6h"))
    assert page.tab.locator(".toolbar .window").inner_text() != before
    # Two-minute buckets for 6 hours (180 points): six hourly dots drew no line (issue #16).
    assert "per 2m" in page.tab.locator("main").inner_text()
    # req/s over the part of the range that holds data (the seeded 45 minutes), not over 6 h.
    kpi = page.tab.locator("#kpi-requests")
    requests = float(kpi.locator("strong").inner_text().replace(" k", "e3").replace(",", ""))
    rate = kpi.locator("small")
    assert "over 45m with data" in rate.inner_text()
    assert "hold data" in (rate.get_attribute("title") or "")
    assert float(rate.inner_text().split()[0]) == pytest.approx(requests / 2700, rel=0.01)
    page.tab.select_option("#refresh", "30s")
    page.tab.wait_for_url(re.compile(r"refresh=30s"))
    assert page.tab.locator("body").get_attribute("data-refresh") == "30"
    assert _query(page)["range"] == ["6h"]
    # A custom range is two RFC 3339 times; a bad one is explained, not a stack trace.
    page.goto(f"{live.url}/ui/overview?start=2026-01-05T12:10:00Z&end=2026-01-05T12:20:00Z")
    assert page.tab.locator("#range").input_value() == "custom"
    bad = page.goto(f"{live.url}/ui/overview?start=yesterday&end=now")
    assert bad.status == 400
    assert "RFC 3339" in page.tab.locator("[data-state=error]").inner_text()
    assert [p for p in page.problems if "400" not in p] == []


def test_a_legend_item_hides_and_shows_its_line(live: Live, page: Page):
    page.goto(f"{live.url}/ui/latency")
    card = page.tab.locator("#chart-tpot")
    first = card.locator(".legend-item").first
    line = card.locator('g.series[data-series="0"]')
    assert line.is_visible()
    first.click()
    assert not line.is_visible()
    first.click()
    assert line.is_visible()
    assert page.problems == []


def test_with_tokens_a_viewer_signs_in_with_a_read_token(live_auth: Live, page: Page):
    response = page.goto(f"{live_auth.url}/ui/gpus?range=6h")
    assert urlparse(page.tab.url).path == "/ui/login"
    assert response.status == 200
    page.tab.fill("#token", "not-a-token-at-all-000")
    page.tab.click("button[type=submit]")
    assert "not valid" in page.tab.locator(".error-text").inner_text()
    page.tab.fill("#token", READ_TOKEN)
    page.tab.click("button[type=submit]")
    page.tab.wait_for_url(re.compile(r"/ui/gpus\?range=6h$"))
    assert page.tab.locator(".session .role").inner_text() == "viewer"
    assert page.tab.locator("table.gpus tbody tr").count() == 10
    (cookie,) = page.tab.context.cookies()
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert READ_TOKEN not in cookie["value"]
    screenshot(page, "gpus-viewer")
    page.tab.click(".session button")
    page.tab.wait_for_url(re.compile(r"/ui/login"))
    page.goto(f"{live_auth.url}/ui/overview")
    assert urlparse(page.tab.url).path == "/ui/login"
    # A copy of the signed-out cookie, put back in the browser, is refused by the server.
    page.tab.context.add_cookies([cookie])
    page.goto(f"{live_auth.url}/ui/overview")
    assert urlparse(page.tab.url).path == "/ui/login"
    # and signing in again (the same form, same-origin) still works
    page.tab.fill("#token", READ_TOKEN)
    page.tab.click("button[type=submit]")
    page.tab.wait_for_url(re.compile(r"/ui/overview"))
    assert [p for p in page.problems if "401" not in p] == []
