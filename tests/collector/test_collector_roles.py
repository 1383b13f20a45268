"""A pod's role read from the server's own /metrics (#30): SGLang labels its schedulers'
series ``engine_type`` = prefill | decode | unified, NVIDIA Dynamo labels a worker's series
``worker_type`` = prefill | decode | aggregated (its frontend labels its router queue per
``worker_type`` of the workers it sends to: not a role of its own). Without ``--role`` the
sidecar maps spans with the role the scraped server names; exports that arrive before the
first scrape answered wait for it (bounded); ``--role`` wins over the server, and the
contradiction shows in ``/healthz``.

A real HTTP server answers /metrics, a real scraper reads it inside a running sidecar, spans
come from the OpenTelemetry SDK through its OTLP/HTTP exporter, rows are read back from
SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from infersight.collector.scrape import flavours
from infersight.collector.scrape.exposition import parse
from infersight.collector.scrape.scraper import Scraper
from infersight.core.records import Role
from infersight.storage.tables import request_parts, requests
from infersight.storage.writer import open_writer
from tests.collector.engine_expositions import SGLANG_TWO_RANKS, sglang_body
from tests.collector.harness import base_url, export_spans, running_sidecar, sidecar_config
from tests.waiting import until

pytestmark = pytest.mark.e2e

#: A Dynamo vLLM worker's system port: the engine's series passed through, Dynamo's
#: component series labelled with the worker's type (label names from Dynamo's
#: ``prometheus_names``: ``dynamo_namespace``, ``dynamo_component``, ``worker_type``).
_WORKER = 'dynamo_namespace="dyn",dynamo_component="backend",dynamo_endpoint="generate"'
DYNAMO_DECODE_WORKER = f"""\
# TYPE dynamo_component_requests_total counter
dynamo_component_requests_total{{{_WORKER},worker_type="decode"}} 41
# TYPE dynamo_component_inflight_requests gauge
dynamo_component_inflight_requests{{{_WORKER},worker_type="decode"}} 3
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="llama-70b"}} 3
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="llama-70b"}} 0
"""
#: A Dynamo frontend: its router's queue per type of worker it routes to.
DYNAMO_FRONTEND = """\
# TYPE dynamo_frontend_requests_total counter
dynamo_frontend_requests_total{model="llama-70b",request_type="stream",status="success"} 12
# TYPE dynamo_frontend_router_queue_pending_requests gauge
dynamo_frontend_router_queue_pending_requests{model="llama-70b",worker_type="prefill"} 2
dynamo_frontend_router_queue_pending_requests{model="llama-70b",worker_type="decode"} 0
"""


def sglang_role_body(role: str) -> str:
    return sglang_body(SGLANG_TWO_RANKS).replace('engine_type="unified"', f'engine_type="{role}"')


@pytest.mark.parametrize(
    ("body", "role", "evidence"),
    [
        (sglang_role_body("prefill"), "prefill", "engine_type=prefill"),
        (sglang_role_body("decode"), "decode", "engine_type=decode"),
        (sglang_body(SGLANG_TWO_RANKS), "", "engine_type=unified"),
        (DYNAMO_DECODE_WORKER, "decode", "worker_type=decode"),
        (DYNAMO_DECODE_WORKER.replace('"decode"', '"aggregated"'), "", "worker_type=aggregated"),
        (DYNAMO_DECODE_WORKER.replace('"decode"', '"encoder"'), None, ""),
        (DYNAMO_FRONTEND, None, ""),
        (sglang_role_body("prefill") + sglang_role_body("decode").split("\n", 2)[2], None,
         "engine_type=decode|prefill"),
    ],
    ids=["sglang-prefill", "sglang-decode", "sglang-unified", "dynamo-decode",
         "dynamo-aggregated", "dynamo-encoder", "dynamo-frontend", "two-roles"],
)  # fmt: skip
def test_the_role_a_server_names(body: str, role: str | None, evidence: str) -> None:
    said = flavours.server_role(parse(body))
    assert (said.role, said.evidence) == (role, evidence)


class MetricsServer:
    """An engine's /metrics over real HTTP: 503 until ``ready`` is set, then ``body``."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.ready = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if not outer.ready.is_set():
                    self.send_error(503)
                    return
                data = outer.body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def __enter__(self) -> MetricsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sglang_prefill() -> Iterator[MetricsServer]:
    with MetricsServer(sglang_role_body("prefill")) as server:
        yield server


def sglang_spans(n: int, prompt: int = 900) -> list[ReadableSpan]:
    """``n`` SGLang request roots (``Req <id>``), as its tracing exports them."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "sglang"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("sglang")
    for i in range(n):
        attrs = {
            "gen_ai.response.model": "qwen",
            "gen_ai.usage.prompt_tokens": prompt + i,
            "gen_ai.usage.completion_tokens": 1,
            "gen_ai.latency.time_to_first_token": 0.2,
            "gen_ai.latency.e2e": 0.2,
            "gen_ai.latency.time_in_queue": 0.03,
        }
        with tracer.start_as_current_span(f"Req {i:08x}", kind=SpanKind.SERVER, attributes=attrs):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def open_writer_for(store):
    return lambda: open_writer(store.engine)


def rows(store, table) -> list[dict]:
    with store.engine.connect() as c:
        return [dict(r._mapping) for r in c.execute(select(table))]


def test_exports_before_the_first_scrape_wait_for_the_role_it_names(
    store, tmp_path: Path, sglang_prefill: MetricsServer
) -> None:
    """The server's /metrics answer 503 at first: an export waits (nothing is spooled);
    once the scrape answers ``engine_type="prefill"`` the export is mapped as prefill legs,
    stored apart from users' requests."""
    scraper = Scraper(sglang_prefill.url, "sglang-prefill-0", interval_s=0.1, timeout_s=5)
    config = sidecar_config("sglang-prefill-0", tmp_path / "s", role_wait_s=600.0)
    with running_sidecar(open_writer(store.engine), config, [scraper]) as app:
        spans = sglang_spans(3)
        sender = threading.Thread(target=export_spans, args=(app, spans))
        sender.start()
        until(
            lambda: app.metrics.value(
                "infersight_collector_scrape_errors_total", reason="http_status"
            ),
            "a failed scrape",
        )
        until(
            lambda: httpx.get(f"{base_url(app)}/healthz").json()["role"]["source"] == "pending",
            "event",
        )
        time.sleep(0.5)  # the export has had time to be spooled, were it not held
        assert app.spool.stats()[0] == 0
        assert sender.is_alive()  # not acknowledged yet
        sglang_prefill.ready.set()
        sender.join(timeout=120)
        assert not sender.is_alive()
        # The spool itself never drains here: the scraper spools a server sample every 0.1 s.
        until(lambda: len(rows(store, request_parts)) == 3, "the prefill legs stored")
        health = httpx.get(f"{base_url(app)}/healthz").json()["role"]
    assert health == {
        "role": "prefill",
        "source": "/metrics",
        "scraped": "prefill",
        "evidence": "engine_type=prefill",
    }
    assert rows(store, requests) == []  # prefill legs are no users' requests
    parts = rows(store, request_parts)
    assert {(p["role"], p["instance"], p["output_tokens"]) for p in parts} == {
        ("prefill", "sglang-prefill-0", 1)
    }
    assert sorted(p["input_tokens"] for p in parts) == [900, 901, 902]


def test_the_role_learned_applies_to_exports_from_then_on_in_decoder_processes(
    store, tmp_path: Path
) -> None:
    """Without a wait, exports before the role is known are unified; the server then names
    itself prefill and later exports are prefill legs (decoded in child processes, which get
    the role with each export)."""
    with MetricsServer(sglang_role_body("prefill")) as server:
        scraper = Scraper(server.url, "sglang-0", interval_s=0.1, timeout_s=5)
        config = sidecar_config("sglang-0", tmp_path / "s", decode_processes=True)
        with running_sidecar(open_writer(store.engine), config, [scraper]) as app:
            export_spans(app, sglang_spans(2, prompt=100))
            until(lambda: len(rows(store, requests)) == 2, "event")
            server.ready.set()
            until(lambda: app.roles.current is Role.PREFILL, "event")
            export_spans(app, sglang_spans(2, prompt=500))
            until(lambda: len(rows(store, request_parts)) == 2, "event")
    assert sorted(r["input_tokens"] for r in rows(store, requests)) == [100, 101]
    assert sorted(p["input_tokens"] for p in rows(store, request_parts)) == [500, 501]


def test_a_declared_role_wins_and_the_contradiction_shows(store, tmp_path: Path, caplog) -> None:
    """``--role decode`` on a pod whose server says prefill: decode is kept, the
    contradiction is logged once and shown in /healthz."""
    caplog.set_level("WARNING", logger="infersight.collector.roles")
    with MetricsServer(sglang_role_body("prefill")) as server:
        server.ready.set()
        scraper = Scraper(server.url, "sglang-0", interval_s=0.05, timeout_s=5)
        config = sidecar_config("sglang-0", tmp_path / "s", role=Role.DECODE)
        with running_sidecar(open_writer_for(store), config, [scraper]) as app:
            until(lambda: app.metrics.value("infersight_collector_scrapes_total") >= 3, "event")
            health = httpx.get(f"{base_url(app)}/healthz").json()["role"]
            assert app.ingestor.context.role is Role.DECODE
            assert app.spool.stats()[0] >= 0
    assert health["role"] == "decode"
    assert health["source"] == "--role"
    assert health["conflict"] == (
        "--role decode but the server's /metrics say prefill (engine_type=prefill); --role is kept"
    )
    said = [r for r in caplog.records if "--role decode but" in r.getMessage()]
    assert len(said) == 1


def test_a_dynamo_decode_worker_gets_the_decode_window(store, tmp_path: Path) -> None:
    """A decode instance waits longer for its P/D proxy's spans: the window a decode role
    has applies once the server names it, when no window was given."""
    with MetricsServer(DYNAMO_DECODE_WORKER) as server:
        server.ready.set()
        scraper = Scraper(server.url, "dyn-decode-0", interval_s=0.05, timeout_s=5)
        config = sidecar_config(
            "dyn-decode-0", tmp_path / "s", window_s=2.0, decode_window_s=6.0, role_wait_s=600.0
        )
        with running_sidecar(open_writer_for(store), config, [scraper]) as app:
            until(lambda: app.roles.current is Role.DECODE, "event")
            assert app.ingestor.reassembly.window_s == 6.0
            assert app.ingestor.context.role is Role.DECODE
            health = httpx.get(f"{base_url(app)}/healthz").json()["role"]
    assert health == {
        "role": "decode",
        "source": "/metrics",
        "scraped": "decode",
        "evidence": "worker_type=decode",
    }


def test_a_dynamo_frontend_is_not_given_a_role(store, tmp_path: Path) -> None:
    with MetricsServer(DYNAMO_FRONTEND) as server:
        server.ready.set()
        scraper = Scraper(server.url, "dyn-frontend", interval_s=0.05, timeout_s=5)
        config = sidecar_config("dyn-frontend", tmp_path / "s", role_wait_s=600.0)
        with running_sidecar(open_writer_for(store), config, [scraper]) as app:
            until(lambda: app.metrics.value("infersight_collector_scrapes_total") >= 1, "event")
            until(lambda: app.roles.source == "default", "event")
            assert app.roles.current is Role.UNIFIED
