"""The incident page's profile section in Debian's Chromium, served for real: a profile whose
summary an older version stored malformed (non-numeric, infinite and NaN shares, junk rows)
renders what is sound and leaves the rest out, beside a well-formed one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from infersight.storage import migrate
from infersight.storage import profiles as profile_store
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import profiles
from tests.conftest import Store
from tests.dashboard.conftest import Live, Page, browser, screenshot, serve  # noqa: F401
from tests.dashboard.conftest import page as page  # noqa: PLC0414 (the fixture)
from tests.profiles.test_claims import BAD_SUMMARY, GOOD
from tests.profiles.test_page import T0, _incident

pytestmark = [pytest.mark.e2e]


def _done(engine: Any, profile_id: int, text: str) -> None:
    with engine.begin() as connection:
        connection.execute(
            update(profiles)
            .where(profiles.c.id == profile_id)
            .values(state="done", result=text, error="", finished_at=T0)
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Live, dict[str, int]]]:
    path: Path = tmp_path_factory.mktemp("profile-pages") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    store = Store(f"sqlite:///{path}", engine)
    found = {}
    for name, text in (("bad", BAD_SUMMARY), ("good", json.dumps(GOOD))):
        incident = _incident(store, f"vllm-{name}")
        asked = profile_store.insert_request(engine, f"vllm-{name}", 2, 20, T0,
                                             reason="incident", incident_id=incident)  # fmt: skip
        _done(engine, asked, text)
        found[name] = incident
    with serve(engine, T0 + timedelta(minutes=5)) as server:
        yield server, found
    engine.dispose()


def test_a_malformed_stored_profile_renders_what_is_sound(live: Any, page: Page) -> None:
    server, found = live
    for name in ("bad", "good"):
        response = page.goto(f"{server.url}/ui/incidents/{found[name]}")
        assert response.status == 200
        section = page.tab.locator("#profile")
        section.wait_for()
        text = " ".join(section.inner_text().split())
        screenshot(page, f"profile-{name}")
        if name == "bad":
            assert "tokenizer 40 %" in text
            assert "? samples a second" in text
            assert "gil" not in text.split("not measured")[0]  # its share was infinite
            assert "lock" not in text.split("not measured")[0]  # NaN
        else:
            assert "tokenizer 62 %" in text
            assert "20 samples a second for 2 s, native frames" in text
    assert page.problems == []
