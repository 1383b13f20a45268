"""The first ``/healthz`` after a start answers at once (issue 32): while the first store probe
is still out it is 503 ``starting`` with ``store: "unknown"``, and it becomes ``ok`` once the
probe answers. Before, the first health request waited up to 5 s for that probe, and then
called a store that had only been slow to connect once "store slow"."""

from __future__ import annotations

import sqlite3
import threading
from types import SimpleNamespace
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import create_engine

from infersight.api.startup import add_healthz
from infersight.storage import tables
from infersight.storage.sql_store import SqlStore
from tests.api.conftest import Api
from tests.doubles import FakeClock
from tests.waiting import until


def test_the_first_healthz_does_not_wait_for_a_store_that_has_not_answered(tmp_path) -> None:
    path = tmp_path / "store.db"
    engine = create_engine(f"sqlite:///{path}")
    tables.metadata.create_all(engine)
    engine.dispose()
    release = threading.Event()
    connects: list[int] = []

    def creator() -> sqlite3.Connection:
        connects.append(1)
        release.wait()  # the store does not answer until the test lets it
        return sqlite3.connect(path, check_same_thread=False)

    blocked = create_engine("sqlite://", creator=creator)
    app = FastAPI()
    add_healthz(app, SqlStore(blocked), SimpleNamespace(runs={}, skipped={}), None)  # type: ignore[arg-type]
    api = Api(app, FakeClock())
    try:
        first = api.get("/healthz")
        assert first.status_code == 503
        body: dict[str, Any] = first.json()
        assert body["store"] == "unknown"
        assert body["status"].startswith("starting: the first store probe has not answered")
        assert connects  # the probe is out, not skipped
        live = api.get("/livez")
        assert live.status_code == 200
        assert live.json()["store"] == "unknown"
    finally:
        release.set()
    ready = until(lambda: (r := api.get("/healthz")).status_code == 200 and r, "first probe")
    assert isinstance(ready, httpx.Response)
    assert ready.json()["store"] == "ok"
    blocked.dispose()
