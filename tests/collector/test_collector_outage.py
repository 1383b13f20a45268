"""PostgreSQL unreachable for a while under load, then back: the spool grows during the
outage and drains afterwards, with every acknowledged span stored exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from collector.shipper import Backoff
from collector.sidecar import Sidecar, SidecarConfig
from storage.engine import create_store_engine
from storage.tables import requests
from storage.writer import open_writer
from tests.collector.harness import encoded, vllm_spans
from tests.collector.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]


def test_a_postgres_outage_under_load_loses_and_duplicates_nothing(
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
    acked: list[tuple[str, str]] = []
    stop = threading.Event()

    def send() -> None:
        with httpx.Client(timeout=10) as client:
            while not stop.is_set():
                spans = vllm_spans(10)
                response = client.post(
                    f"http://127.0.0.1:{app.http.port}/v1/traces",
                    content=encoded(spans),
                    headers={"content-type": "application/x-protobuf"},
                )
                if response.status_code == 200:
                    acked.extend(
                        (f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}") for s in spans
                    )
                time.sleep(0.02)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        time.sleep(1.0)
        proxy.cut()
        during = len(acked)
        time.sleep(2.5)
        assert len(acked) > during  # ingest goes on while the store is down
        assert app.metrics.value("infersight_collector_ship_errors_total", reason="unavailable") > 0
        assert app.spool.stats()[0] > 0
        proxy.restore()
        time.sleep(1.0)
    finally:
        stop.set()
        sender.join(timeout=15)

    def keys() -> list[tuple[str, str]]:
        with pg_store.engine.connect() as c:
            return [tuple(r) for r in c.execute(select(requests.c.trace_id, requests.c.span_id))]

    deadline = time.monotonic() + 30
    while not set(acked) <= set(keys()) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        stored = keys()
        assert set(acked) <= set(stored)
        assert len(stored) == len(set(stored))
        with pg_store.engine.connect() as c:
            assert c.execute(select(func.count()).select_from(requests)).scalar_one() == len(acked)
    finally:
        app.stop()
        proxy.cut()
        engine.dispose()
