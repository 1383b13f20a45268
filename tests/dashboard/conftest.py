"""Fixtures of the dashboard tests: a seeded store, the real app under uvicorn, Chromium.

The browser tests share one SQLite store filled by ``seed.seed`` (a simulated fleet with a
throttled GPU, SLOs and the incident it causes) and two live servers over it: one open, one
with API tokens. Chromium is Debian's (``/usr/bin/chromium``), driven by Playwright.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from infersight.api import answers, create_app
from infersight.api.settings import ApiSettings
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy
from tests.dashboard.seed import seed
from tests.peers import serving_app

CHROMIUM = os.environ.get("INFERSIGHT_CHROMIUM", "/usr/bin/chromium")
READ_TOKEN = "viewer-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789ab"
#: The seeded data is from January 2026; keep all of it at full resolution.
RETENTION = RetentionPolicy(raw_days=400, minute_days=400, hour_days=400, day_days=1095)


@pytest.fixture(autouse=True)
def fresh_answers() -> Iterator[None]:
    """Every test starts with empty dashboard answer caches: a test that writes and asks a
    page again under a fixed clock must see what it wrote, not a page computed before."""
    answers.clear_all()
    yield
    answers.clear_all()


@dataclass
class Seeded:
    engine: Engine
    now: datetime


@dataclass(frozen=True)
class Live:
    url: str


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    path: Path = tmp_path_factory.mktemp("dashboard") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    now = seed(engine)
    yield Seeded(engine, now)
    engine.dispose()


@contextmanager
def serve(engine: Engine, now: datetime, tokens: str = "") -> Iterator[Live]:
    """The real app on a free port in a thread (uvicorn), its clock fixed at ``now``."""
    settings = ApiSettings(run_jobs=False, api_tokens=tokens)
    with serving_app(create_app(settings, engine, lambda: now, retention=RETENTION)) as url:
        yield Live(url)


@pytest.fixture(scope="module")
def live(seeded: Seeded) -> Iterator[Live]:
    with serve(seeded.engine, seeded.now) as server:
        yield server


@pytest.fixture(scope="module")
def live_auth(seeded: Seeded) -> Iterator[Live]:
    with serve(seeded.engine, seeded.now, f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}") as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium for one test module: Playwright's sync API keeps an event loop running in
    this thread while it is open, which ``asyncio.run`` in later tests would trip over."""
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM} (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        yield browser
        browser.close()


@dataclass
class Page:
    """A browser tab that records console errors and warnings and uncaught page errors."""

    tab: Any
    problems: list[str]

    def goto(self, url: str) -> Any:
        response = self.tab.goto(url)
        self.tab.wait_for_load_state("load")
        return response


def watch(tab: Any) -> list[str]:
    """The console errors and warnings and uncaught page errors of ``tab``, as they come."""
    problems: list[str] = []
    tab.on(
        "console",
        lambda m: (
            problems.append(f"console {m.type}: {m.text}")
            if m.type in ("error", "warning")
            else None
        ),
    )
    tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    return problems


@pytest.fixture
def page(browser: Any) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    tab = context.new_page()
    problems = watch(tab)
    yield Page(tab, problems)
    context.close()


def screenshot(page: Page, name: str) -> None:
    """Full-page screenshot into ``INFERSIGHT_DASHBOARD_SHOTS`` when set (for eyeballing)."""
    folder = os.environ.get("INFERSIGHT_DASHBOARD_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.tab.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)
