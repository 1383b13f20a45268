"""The store unreachable for a while under load, then back, and unreachable from the start:
the spool grows while it is down, the sidecar says so truthfully (ship lag, backlog, the
error, ``/healthz`` degraded) at every moment, and drains afterwards with every acknowledged
span stored exactly once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from collector.shipper import Backoff
from collector.sidecar import Sidecar, SidecarConfig
from storage import migrate
from storage.engine import create_store_engine
from storage.tables import requests
from storage.writer import open_writer
from tests.collector.harness import encoded, vllm_spans
from tests.collector.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e
Key = tuple[str, str]


def wait_until(predicate: Callable[[], object], timeout: float = 60.0) -> bool:
    """Poll for an event; the timeout only bounds a broken run, it is no performance budget."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def scrape(base: str) -> dict[str, float]:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def health(base: str, strict: bool = False) -> httpx.Response:
    return httpx.get(f"{base}/healthz", params={"strict": "1"} if strict else None, timeout=10)


def keys(engine) -> list[Key]:
    with engine.connect() as c:
        return [tuple(r) for r in c.execute(select(requests.c.trace_id, requests.c.span_id))]


class Sender:
    """Exports batches of ten spans in a loop; remembers the acknowledged ones."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.acked: list[Key] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                spans = vllm_spans(10)
                try:
                    response = client.post(
                        self.url,
                        content=encoded(spans),
                        headers={"content-type": "application/x-protobuf"},
                    )
                except httpx.HTTPError:
                    continue
                if response.status_code == 200:
                    self.acked.extend(
                        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans
                    )
                self._stop.wait(0.02)

    def __enter__(self) -> Sender:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def more_than(self, n: int) -> Callable[[], bool]:
        return lambda: len(self.acked) > n


@pytest.mark.postgres
def test_a_postgres_outage_under_load_is_reported_truthfully_and_loses_nothing(
    pg_store, tmp_path: Path
) -> None:
    url = make_url(pg_store.url)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432)).start()
    engine = create_store_engine(
        url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    )
    config = SidecarConfig(
        "outage",
        tmp_path / "spool",
        http_port=0,
        grpc_port=0,
        window_s=0.0,
        backoff=Backoff(0.1, 1.5, 0.5),
    )
    app = Sidecar(config, open_writer(engine)).start()
    base = f"http://127.0.0.1:{app.http.port}"
    try:
        with Sender(f"{base}/v1/traces") as sender:
            assert wait_until(sender.more_than(100))
            assert wait_until(lambda: scrape(base)[SHIPPED] > 0)
            assert health(base).json()["status"] == "ok"
            proxy.cut()
            assert wait_until(lambda: health(base).json()["status"].startswith("degraded"))
            during = len(sender.acked)
            state = health(base)
            assert state.status_code == 200  # alive and spooling: probes leave it be
            assert state.json()["status"].startswith("degraded: cannot ship since ")
            assert state.json()["last_error"]
            assert health(base, strict=True).status_code == 503
            first = scrape(base)
            assert wait_until(sender.more_than(during + 100))  # ingest goes on meanwhile
            later = scrape(base)
            # Lag and backlog grow while the store is down, between shipping attempts too.
            assert 0 < first[LAG] < later[LAG]
            assert 0 < first[BACKLOG] < later[BACKLOG]
            assert later[FAILING_SINCE] > 0
            assert app.metrics.value(ERRORS, reason="unavailable") > 0
            proxy.restore()
            assert wait_until(lambda: health(base).json()["status"] == "ok")
        assert wait_until(lambda: app.spool.stats()[0] == 0)
        after = scrape(base)
        assert after[LAG] == 0.0
        assert after[FAILING_SINCE] == 0.0
        assert health(base, strict=True).status_code == 200
        stored = keys(pg_store.engine)
        assert set(sender.acked) <= set(stored)
        assert len(stored) == len(set(stored)) == len(sender.acked)
    finally:
        app.stop()
        proxy.cut()
        engine.dispose()


LAG = "infersight_collector_ship_lag_seconds"
BACKLOG = "infersight_collector_spool_records"
FAILING_SINCE = "infersight_collector_ship_failing_since_timestamp_seconds"
SHIPPED = "infersight_collector_ship_last_success_timestamp_seconds"
ERRORS = "infersight_collector_ship_errors_total"


def test_a_sidecar_whose_sqlite_store_is_missing_at_start_spools_then_ships(
    tmp_path: Path,
) -> None:
    """The store does not exist yet (its directory is missing): the sidecar starts, accepts
    and reports degraded; once the store is created it ships everything."""
    path = tmp_path / "not-yet" / "store.db"
    url = f"sqlite:///{path}"
    engine = create_store_engine(url)
    config = SidecarConfig(
        "late-store",
        tmp_path / "spool",
        http_port=0,
        grpc_port=0,
        window_s=0.0,
        backoff=Backoff(0.1, 1.5, 0.3),
    )
    app = Sidecar(config, lambda: open_writer(engine)).start()
    base = f"http://127.0.0.1:{app.http.port}"
    try:
        spans = vllm_spans(20)
        response = httpx.post(
            f"{base}/v1/traces",
            content=encoded(spans),
            headers={"content-type": "application/x-protobuf"},
        )
        assert response.status_code == 200
        assert wait_until(lambda: health(base).json()["status"].startswith("degraded"))
        assert "unable to open" in health(base).json()["last_error"]
        assert app.spool.stats()[0] == 20
        path.parent.mkdir()
        migrate.upgrade(engine)
        expected = {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans}
        assert wait_until(lambda: set(keys(engine)) == expected)
        assert wait_until(lambda: health(base).json()["status"] == "ok")
    finally:
        app.stop()
        engine.dispose()


def start_sidecar(store_url: str, spool: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from infersight.cli import main; main()",
            "--store",
            store_url,
            "sidecar",
            "--otlp-http",
            "127.0.0.1:0",
            "--otlp-grpc",
            "127.0.0.1:0",
            "--spool-dir",
            str(spool),
            "--gpu-source",
            "none",
            "--window",
            "0",
            "--instance",
            "down-at-start",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http=127\.0\.0\.1:(\d+)", line)
    assert match, f"unexpected first line: {line!r}"
    return proc, f"http://127.0.0.1:{match.group(1)}"


@pytest.mark.postgres
def test_infersight_sidecar_starts_and_spools_while_postgres_is_down(
    pg_store, tmp_path: Path
) -> None:
    url = make_url(pg_store.url)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432)).start()
    proxy.cut()  # the store is down before the sidecar starts
    behind_proxy = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    proc, base = start_sidecar(behind_proxy, tmp_path / "spool")
    try:
        spans = vllm_spans(30)
        response = httpx.post(
            f"{base}/v1/traces",
            content=encoded(spans),
            headers={"content-type": "application/x-protobuf"},
        )
        assert response.status_code == 200
        assert wait_until(lambda: health(base).json()["status"].startswith("degraded"))
        assert scrape(base)[BACKLOG] == 30
        proxy.restore()
        expected = {(f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans}
        assert wait_until(lambda: set(keys(pg_store.engine)) == expected)
        assert wait_until(lambda: health(base).json()["status"] == "ok")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        proxy.cut()
    assert proc.returncode == 0
    assert "stopped" in out
    with pg_store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(requests)).scalar_one() == 30
