"""The Scaling page in Debian's Chromium: a model whose demand follows the day, recorded
recommendations every ten minutes, two earlier weeks for the forecast band, and a second model
whose newest recommendation was made with a stale input."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from infersight.core.scaling import Recommendation
from infersight.storage import migrate
from infersight.storage import scaling as scaling_store
from infersight.storage.engine import create_store_engine
from infersight.storage.writer import open_writer
from tests.dashboard.conftest import Live, Page, screenshot, serve
from tests.factories import make_records

pytestmark = [pytest.mark.e2e]
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
MODEL = "llama-3.1-8b"
STALE = "llama-3.1-70b"
CAPACITY = 0.02  # req/s per instance


def rate(at: datetime) -> float:
    """A diurnal curve: quiet at night, busiest in the afternoon (req/s)."""
    hour = at.hour + at.minute / 60
    return 0.07 + 0.05 * math.sin((hour - 9) / 24 * 2 * math.pi)


def desired(at: datetime) -> int:
    return max(1, math.ceil(rate(at + timedelta(minutes=10)) * 1.4 / CAPACITY))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    path: Path = tmp_path_factory.mktemp("scaling-page") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    rng = np.random.default_rng(17)
    writer = open_writer(engine)
    for weeks_back, scale in ((0, 1.0), (1, 0.9), (2, 1.15)):
        records = []
        start = NOW - timedelta(days=1) - timedelta(weeks=weeks_back)
        for hour in range(24):
            at = start + timedelta(hours=hour)
            count = int(rate(at) * scale * 3600)
            records += make_records(
                rng, at, count, span=timedelta(hours=1), models=(MODEL,), error_rate=0.0
            )
        writer.write_requests(records)
    at = NOW - timedelta(days=1)
    previous = desired(at)
    while at <= NOW:
        scaling_store.record(
            engine,
            Recommendation(
                MODEL,
                at.timestamp(),
                previous,
                desired(at),
                desired(at),
                max(1, math.ceil(rate(at) / CAPACITY / 2)),
                rate(at + timedelta(minutes=10)),
                "forecast",
                f"the forecast of {rate(at + timedelta(minutes=10)):.3f} req/s needs "
                f"{desired(at)} instances at {CAPACITY} req/s each with 40 % headroom",
                (),
            ),
        )
        previous = desired(at)
        at += timedelta(minutes=10)
    scaling_store.record(
        engine,
        Recommendation(
            STALE,
            (NOW - timedelta(minutes=1)).timestamp(),
            4,
            4,
            None,
            None,
            None,
            "hold",
            "holding 4 instances: the demand is 400 s old",
            ("demand_rps",),
        ),
    )
    with serve(engine, NOW) as server:
        yield server
    engine.dispose()


def test_the_scaling_page_charts_desired_against_observed_with_the_forecast_band(
    live: Live, page: Page
) -> None:
    response = page.goto(f"{live.url}/ui/scaling")
    assert response.status == 200
    rows = page.tab.locator("table.scaling tbody tr")
    assert rows.count() == 2
    row = page.tab.locator(f'table.scaling tr[data-model="{MODEL}"]')
    assert row.locator("td b").inner_text() == str(desired(NOW))
    assert "yes" in row.inner_text()
    assert "forecast" in row.inner_text()
    stale = page.tab.locator(f'table.scaling tr[data-model="{STALE}"]')
    assert "warn" in (stale.get_attribute("class") or "")
    assert "stale or missing inputs: demand_rps" in stale.inner_text()
    section = page.tab.locator(f'section.model-scaling[data-model="{MODEL}"]')
    instances = section.locator('[id^="instances-"] svg.chart')
    assert instances.locator("g.series").count() == 2  # desired and observed
    assert instances.locator("polyline").count() >= 2
    forecast = section.locator('[id^="forecast-"] svg.chart')
    assert forecast.locator("g.band polygon").count() >= 1
    assert forecast.locator("g.series").count() == 2  # demand and the recorded forecast
    assert "previous 2 weeks" in section.inner_text()
    change = section.locator(".latest-change").inner_text()
    assert change.startswith("Latest change, ")
    assert "needs" in change
    assert page.tab.locator("#purchasing").count() == 1
    screenshot(page, "scaling")
    assert page.problems == []


def test_the_model_filter_keeps_one_model(live: Live, page: Page) -> None:
    page.goto(f"{live.url}/ui/scaling?model={STALE}")
    assert page.tab.locator("table.scaling tbody tr").count() == 1
    section = page.tab.locator("section.model-scaling")
    assert section.count() == 1
    assert "did not change" in section.inner_text()
    assert "no requests or forecast" in section.inner_text()
    assert page.problems == []
