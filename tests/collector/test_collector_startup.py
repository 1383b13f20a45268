"""A (re)started sidecar binds and acknowledges exports before it loads the store's libraries
and builds its writer, so it comes back within its exporters' retry budget
(``bench/bench_restart.py`` measures how soon)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from infersight.collector.sidecar import Sidecar
from infersight.core.write import Sink
from infersight.storage.writer import open_writer
from tests.collector.harness import (
    ROOT,
    base_url,
    post_spans,
    sidecar_config,
    span_key,
    stored_keys,
    vllm_spans,
    wait_until,
)


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

    # Only the first export may start it, on any machine.
    config = sidecar_config("startup", tmp_path / "spool", store_open_delay_s=600.0)
    app = Sidecar(config, slow_writer)
    app.start()
    base = base_url(app)
    try:
        assert not asked.is_set()  # nothing is built before the first export is answered
        spans = vllm_spans(10)
        assert post_spans(base, spans).status_code == 200
        assert asked.wait(30)  # the first acknowledgement lets the writer be built
        state = httpx.get(f"{base}/healthz").json()
        assert (state["status"], state["shipping"]) == ("ok", "starting")
        assert state["spool_records"] == 10
        release.set()
        expected = {span_key(s) for s in spans}
        assert wait_until(lambda: set(stored_keys(store.engine)) == expected)
        assert wait_until(lambda: httpx.get(f"{base}/healthz").json()["shipping"] == "ok")
    finally:
        release.set()
        app.stop()


def test_the_sidecar_command_imports_no_store_library_before_it_binds() -> None:
    code = (
        "import sys, infersight.cli, infersight.cli.commands_sidecar; "
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
