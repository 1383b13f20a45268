"""The newcomer's stumbles on the dashboard (issue 35, item 11), over the seeded fleet of the
browser tests (``tests.dashboard.seed``: 45 minutes of data, 28-day SLOs, one incident).

Each test failed before its fix: burn-rate chips in window order, not the text's; the
Overview's state, burn rates and budget agree and say how much data backs each window; a
chart's colours never repeat; the Scaling charts' time axis fits the data.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import httpx

from infersight.api import create_app
from infersight.api.context import context_of
from infersight.api.dashboard import charts as svg
from infersight.api.settings import ApiSettings
from infersight.core.scaling import Recommendation
from infersight.core.window import parse_duration
from infersight.storage import scaling as scaling_store
from infersight.storage import slo_store
from tests.dashboard.conftest import RETENTION, Seeded
from tests.dashboard.seed import MODEL_70B


def get(seeded: Seeded, path: str, now: datetime | None = None, **params: str) -> str:
    at = now or seeded.now
    app = create_app(
        ApiSettings(run_jobs=False, dashboard_answer_ttl_s=0),
        seeded.engine,
        lambda: at,
        retention=RETENTION,
    )

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await client.get(path, params=params)

    response = asyncio.run(call())
    assert response.status_code == 200, response.text[-2000:]
    return response.text


def section(html: str, element_id: str) -> str:
    found = re.search(rf'<section[^>]*id="{element_id}".*?</section>', html, re.S)
    assert found, element_id
    return found.group(0)


def incident_path(seeded: Seeded) -> str:
    found = re.search(r'href="(/ui/incidents/\d+)', get(seeded, "/ui/incidents"))
    assert found
    return found.group(1)


def test_the_incident_page_lists_burn_rates_shortest_window_first(seeded: Seeded):
    onset = section(get(seeded, incident_path(seeded)), "onset-evidence")
    chips = re.findall(r'<span class="tag">(\d+[smhdw]) ', onset)
    assert len(chips) >= 4, onset
    assert chips == sorted(chips, key=parse_duration), chips  # was 1d, 1h, 2h, 30m, 3d, 5m, 6h


def _row(html: str, slo: str) -> str:
    found = re.search(rf'<tr data-slo="{slo}">.*?</tr>', html, re.S)
    assert found, slo
    return found.group(0)


def test_the_overview_s_state_burn_rates_and_budget_agree_and_say_how_much_data(
    seeded: Seeded,
):
    # A burning SLO without an incident (the evaluation has not stepped it): the row said
    # "ok" in green beside red 155× burn rates and "0 %" budget left.
    burning = slo_store.get_slo(seeded.engine, "chat-70b-tpot")
    slo_store.put_slo(seeded.engine, replace(burning, name="tpot-no-incident-yet"), seeded.now)
    html = get(seeded, "/ui/overview")
    row = _row(html, "tpot-no-incident-yet")
    state = re.search(r'<span class="badge state ([^"]+)"[^>]*>([^<]+)</span>', row)
    assert state, row
    assert state.group(1) == "sev-page", state.group(0)  # the alert condition holds
    assert state.group(2) == "page"
    # 45 minutes of data behind a 28-day SLO: said, not left to guess.
    assert "45 min of 28 days" in row
    kinds = {
        w: kind
        for kind, w in re.findall(r'<td class="num burn-cell (\w+)" data-window="(\w+)"', row)
    }
    assert kinds == {
        "5m": "full", "30m": "full", "1h": "partial", "2h": "none", "6h": "none",
        "1d": "none", "3d": "none",
    }, kinds  # fmt: skip
    # Long windows over 45 minutes of data show no number as if complete.
    for window in ("1d", "3d"):
        cell = re.search(rf'data-window="{window}"[^>]*>(.*?)</td>', row, re.S)
        assert cell, window
        assert "×" not in cell.group(1), cell.group(0)
    # An SLO that holds is ok.
    quiet = _row(html, "chat-8b-ttft")
    assert 'class="badge state ok"' in quiet


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_no_gpu_chart_repeats_a_colour_or_uses_two_alike(seeded: Seeded):
    html = get(seeded, "/ui/gpus")
    charts = re.findall(r'<svg class="chart".*?</svg>', html, re.S)
    assert charts
    many = 0
    for chart in charts:
        strokes = []
        for group in re.findall(r'<g class="series" data-series="\d+">(.*?)</g>', chart, re.S):
            found = re.search(r'(?:stroke|fill)="(#[0-9a-f]{6}|hsl\([^"]+\))"', group)
            if found:
                strokes.append(found.group(1))
        assert len(set(strokes)) == len(strokes), strokes
        many = max(many, len(strokes))
        hexes = [_rgb(c) for c in strokes if c.startswith("#")]
        for i, a in enumerate(hexes):
            for b in hexes[i + 1 :]:
                distance = sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) ** 0.5
                assert distance >= 60, (a, b)  # was amber beside orange: 36 apart
    assert many >= 10  # the fleet's ten GPUs on one chart


def test_a_chart_of_more_series_than_the_palette_repeats_no_colour():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    series = [svg.Series(f"gpu{i}", [(start, float(i))]) for i in range(23)]
    chart = str(svg.line_chart(series, start, start + timedelta(hours=1), label="many"))
    fills = re.findall(r'fill="((?:#|hsl)[^"]+)"', chart)
    assert len(fills) == 23
    assert len(set(fills)) == 23


def _axis_minutes(chart: str) -> list[int]:
    labels = re.findall(r'text-anchor="middle">(\d\d):(\d\d)</text>', chart)
    return [int(h) * 60 + int(m) for h, m in labels]


def test_scaling_charts_at_24h_start_where_an_hour_of_data_does(seeded: Seeded):
    # The recommender ran for the last 40 minutes only: on a 24-hour axis, in 24-hour
    # buckets, its lines were squashed against the right edge.
    for k in range(40):
        at = seeded.now - timedelta(minutes=40 - k)
        scaling_store.record(
            seeded.engine,
            Recommendation(
                MODEL_70B, at.timestamp(), observed=2, desired=2 + k // 20, predictive=None,
                reactive=2 + k // 20, forecast_rps=None, driver="reactive",
                reason="bench", stale=(),
            ),
        )  # fmt: skip
    html = get(seeded, "/ui/scaling", range="24h")
    card = re.search(r'<section class="card model-scaling".*?</section>', html, re.S)
    assert card, html[-2000:]
    assert "where its data begins" in card.group(0)
    charts = re.findall(r'<svg class="chart".*?</svg>', card.group(0), re.S)
    assert len(charts) == 2
    for chart in charts:
        ticks = _axis_minutes(chart)
        assert len(ticks) >= 3, ticks
        gaps = {(b - a) % 1440 for a, b in pairwise(ticks)}
        assert max(gaps) <= 30, ticks  # ticks minutes apart, not 3 hours
    # The instances line has a point per few minutes, not one or two.
    points = re.findall(r'<polyline[^>]*points="([^"]+)"', charts[0])
    assert points
    assert max(len(p.split()) for p in points) >= 6


def test_the_overview_shows_the_evaluation_s_statuses_until_the_next_cycle_lands(
    seeded: Seeded,
):
    # A cycle stamped at its start replaces the previous one at its end: 30 s after the
    # stamp plus a 10-second cycle, the statuses are still the newest there are.
    settings = ApiSettings(run_jobs=False, dashboard_answer_ttl_s=0)
    at = seeded.now - timedelta(seconds=settings.evaluation_interval_s + 5)
    app = create_app(settings, seeded.engine, lambda: seeded.now, retention=RETENTION)
    context = context_of(app)
    context.evaluator.run(at)
    context.jobs.durations["evaluate"].append(10.0)

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
            return await c.get("/ui/overview")

    html = asyncio.run(call()).text
    assert f"as of {at.strftime('%H:%M:%S')} UTC" in html  # reused, not counted again
