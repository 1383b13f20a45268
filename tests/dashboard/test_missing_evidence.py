"""The Incidents page in Chromium for an incident diagnosed without GPU telemetry.

A store holding the compressed thermal-throttle scenario without its GPU samples (sidecars
with ``--gpu-source none``), an SLO on the 70B model's TPOT, evaluated by the app's own
evaluator (diagnosis listener included) until the incident opens; the real app under uvicorn.
The page names the fallback cause and lists what could not be checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from bench.harness import scenarios
from infersight.alerts.rules import load_rules
from infersight.core.query import Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.service.diagnosis import DiagnosisListener
from infersight.service.evaluation import Evaluator, default_policy
from infersight.storage import migrate, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from tests.dashboard.conftest import Live, Page, screenshot, serve

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def blind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    path: Path = tmp_path_factory.mktemp("blind") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    scenario, batch = scenarios.simulate_cached("fault-thermal-throttle")
    scenarios.store_batch(engine, scenarios.without_gpu(batch))
    tpot = SloSpec(
        "chat-70b-tpot",
        Sli(SliKind.LATENCY, "tpot", 0.03),
        0.99,
        timedelta(days=7),
        Selector(model="meta-llama/Llama-3.1-70B-Instruct"),
    )
    slo_store.put_slo(engine, tpot, scenario.start)
    evaluator = Evaluator(
        SqlStore(engine), default_policy(), [DiagnosisListener(SqlStore(engine), pack=load_rules())]
    )
    incident, _ = scenarios.windows(scenario)
    at = incident.start
    while at <= incident.start + timedelta(minutes=6):
        evaluator.run(at)
        at += timedelta(minutes=1)
    with serve(engine, at) as live:
        yield live
    engine.dispose()


def test_an_incident_without_gpu_samples_shows_its_fallback_and_what_is_missing(
    blind: Live, page: Page
) -> None:
    page.goto(f"{blind.url}/ui/incidents")
    card = page.tab.locator("section.incident").first
    diagnosis = card.locator(".diagnosis")
    assert "Decode bound (GPU side)" in diagnosis.locator("h3").inner_text()
    assert "vllm-70b-0" in diagnosis.locator("h3").inner_text()
    missing = diagnosis.locator(".missing-evidence li")
    assert missing.count() == 1
    sentence = (
        "no GPU samples for vllm-70b-0: cannot tell compute from memory bandwidth, "
        "nor see clock throttling"
    )
    assert missing.first.inner_text() == sentence
    screenshot(page, "incidents-no-gpu")
    # The incident's own page lists the same missing evidence under its headline.
    card.locator("h2 a").click()
    page.tab.wait_for_load_state("load")
    assert "Decode bound (GPU side)" in page.tab.locator("#headline h3").inner_text()
    detail = page.tab.locator("#missing-evidence li")
    assert detail.count() == 1
    assert detail.first.inner_text() == sentence
    assert page.problems == []
