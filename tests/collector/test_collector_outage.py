"""The store unreachable for a while under load, then back, and unreachable from the start:
the spool grows while it is down, the sidecar says so truthfully (ship lag, backlog, the
error, ``/healthz`` degraded) at every moment, and drains afterwards with every acknowledged
span stored exactly once."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from infersight.collector.shipper import Backoff
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.collector.harness import (
    Sender,
    base_url,
    post_spans,
    running_sidecar,
    sidecar_args,
    sidecar_config,
    span_key,
    spawn_sidecar,
    stored_keys,
    vllm_spans,
    wait_until,
)
from tests.collector.tcp_proxy import TcpProxy

pytestmark = pytest.mark.e2e


def scrape(base: str) -> dict[str, float]:
    text = httpx.get(f"{base}/metrics", timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.labels
    }


def proxied(store_url: str) -> tuple[TcpProxy, str]:
    """A TCP proxy in front of the PostgreSQL server of ``store_url``, and the URL through it."""
    url = make_url(store_url)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432)).start()
    return proxy, url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)


def health(base: str, strict: bool = False) -> httpx.Response:
    return httpx.get(f"{base}/healthz", params={"strict": "1"} if strict else None, timeout=10)


@pytest.mark.postgres
def test_a_postgres_outage_under_load_is_reported_truthfully_and_loses_nothing(
    pg_store, tmp_path: Path
) -> None:
    proxy, through_proxy = proxied(pg_store.url)
    engine = create_store_engine(through_proxy)
    config = sidecar_config("outage", tmp_path / "spool")
    try:
        with running_sidecar(open_writer(engine), config) as app:
            base = base_url(app)
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
            stored = stored_keys(pg_store.engine)
            assert set(sender.acked) <= set(stored)
            assert len(stored) == len(set(stored)) == len(sender.acked)
    finally:
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
    config = sidecar_config("late-store", tmp_path / "spool", backoff=Backoff(0.1, 1.5, 0.3))
    try:
        with running_sidecar(lambda: open_writer(engine), config) as app:
            base = base_url(app)
            spans = vllm_spans(20)
            assert post_spans(base, spans).status_code == 200
            assert wait_until(lambda: health(base).json()["status"].startswith("degraded"))
            assert "unable to open" in health(base).json()["last_error"]
            assert app.spool.stats()[0] == 20
            path.parent.mkdir()
            migrate.upgrade(engine)
            expected = {span_key(s) for s in spans}
            assert wait_until(lambda: set(stored_keys(engine)) == expected)
            assert wait_until(lambda: health(base).json()["status"] == "ok")
    finally:
        engine.dispose()


def start_sidecar(store_url: str, spool: Path) -> tuple[subprocess.Popen[str], str]:
    """``infersight --store URL sidecar …``, the command as an operator runs it."""
    args = ["--store", store_url, "sidecar", *sidecar_args(spool, "down-at-start")]
    return spawn_sidecar("from infersight.cli import main; main()", args)


@pytest.mark.postgres
def test_infersight_sidecar_starts_and_spools_while_postgres_is_down(
    pg_store, tmp_path: Path
) -> None:
    proxy, through_proxy = proxied(pg_store.url)
    proxy.cut()  # the store is down before the sidecar starts
    proc, base = start_sidecar(through_proxy, tmp_path / "spool")
    try:
        spans = vllm_spans(30)
        assert post_spans(base, spans).status_code == 200
        assert wait_until(lambda: health(base).json()["status"].startswith("degraded"))
        assert scrape(base)[BACKLOG] == 30
        proxy.restore()
        expected = {span_key(s) for s in spans}
        assert wait_until(lambda: set(stored_keys(pg_store.engine)) == expected)
        assert wait_until(lambda: health(base).json()["status"] == "ok")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        proxy.cut()
    assert proc.returncode == 0
    assert "stopped" in out
    with pg_store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(requests)).scalar_one() == 30
