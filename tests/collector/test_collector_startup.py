"""A (re)started sidecar binds and acknowledges exports before it loads the store's libraries
and builds its writer, so it comes back within its exporters' retry budget
(``bench/bench_restart.py`` measures how soon)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from collector.shipper import Backoff
from collector.sidecar import Sidecar, SidecarConfig
from core.write import Sink
from storage.tables import requests
from storage.writer import open_writer
from tests.collector.harness import encoded, vllm_spans

ROOT = Path(__file__).resolve().parents[2]


def wait_until(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


@pytest.mark.e2e
def test_a_sidecar_acknowledges_exports_before_its_store_writer_exists(
    store, tmp_path: Path
) -> None:
    release = threading.Event()
    asked = threading.Event()

    def slow_writer() -> Sink:  # stands for seconds of imports on a loaded host
        asked.set()
        release.wait(60)
        return open_writer(store.engine)

    config = SidecarConfig(
        "startup",
        tmp_path / "spool",
        http_port=0,
        grpc_port=0,
        window_s=0.0,
        backoff=Backoff(0.1, 1.5, 0.5),
    )
    app = Sidecar(config, slow_writer)
    app.shipper.open_delay_s = 600.0  # only the first export may start it, on any machine
    app.start()
    base = f"http://127.0.0.1:{app.http.port}"
    try:
        assert not asked.is_set()  # nothing is built before the first export is answered
        spans = vllm_spans(10)
        response = httpx.post(
            f"{base}/v1/traces",
            content=encoded(spans),
            headers={"content-type": "application/x-protobuf"},
        )
        assert response.status_code == 200
        assert asked.wait(30)  # the first acknowledgement lets the writer be built
        state = httpx.get(f"{base}/healthz").json()
        assert (state["status"], state["shipping"]) == ("ok", "starting")
        assert state["spool_records"] == 10
        release.set()
        expected = {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans}

        def keys() -> set[tuple[str, str]]:
            with store.engine.connect() as c:
                rows = c.execute(select(requests.c.trace_id, requests.c.span_id))
                return {(t, s) for t, s in rows}

        assert wait_until(lambda: keys() == expected)
        assert wait_until(lambda: httpx.get(f"{base}/healthz").json()["shipping"] == "ok")
    finally:
        release.set()
        app.stop()


def test_the_sidecar_command_imports_no_store_library_before_it_binds() -> None:
    code = (
        "import sys, infersight.cli, infersight.commands_sidecar; "
        "print(sorted(m for m in ('sqlalchemy', 'alembic', 'numpy', 'psycopg') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=60,
    )
    assert result.stdout.strip() == "[]"
