"""Issue 32 (defect 6): a client holding the connection cap + 50 silent sockets, reopening
each as it closes, does not shut out the clients that send. A real OpenTelemetry exporter
keeps exporting to the sidecar (a real ``infersight sidecar`` process) and ``/healthz``
keeps answering, and the API (``infersight serve``) keeps answering its queries and probes.
Before, every connection beyond the cap was closed as it opened, and no export got through."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from infersight.api.settings import ApiSettings
from infersight.collector.assembly import Reassembly
from infersight.collector.http_receiver import RECEIVER_LIMITS, HttpServer, create_app
from infersight.collector.ingest import Ingestor
from infersight.collector.mapping import MappingContext
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.otlp import Limits
from infersight.collector.spool import Spool, SpoolConfig
from infersight.httpd import ConnectionLimits
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from tests.api.live import READ_TOKEN, TOKENS, serve
from tests.collector.harness import sidecar_args, spawn_sidecar, vllm_spans
from tests.connection_hog import Hog
from tests.waiting import until

pytestmark = pytest.mark.e2e
EXPORTS = 20
PROBES = 20
EXTRA = 50  # silent sockets beyond the cap
#: A request whose body never comes: in flight until the body deadline.
BUSY = (
    b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
    b"Expect: 100-continue\r\nContent-Length: 100\r\n\r\n"
)


def _get(get: Callable[..., httpx.Response], url: str, **kwargs: Any) -> int | str:
    """The status of a GET, tried again once if its connection fails (as a probe with a
    failure threshold of 2 would): a new connection is closed for another only after every
    connection opened before it, which a hog reopening its sockets as fast as it can may, on
    a loaded host, just achieve before the request is read. The error's name, if both fail."""
    error = ""
    for _ in range(2):
        try:
            return get(url, timeout=60, **kwargs).status_code
        except httpx.TransportError as exc:
            error = type(exc).__name__
    return error


def _hogged(hog: Hog) -> None:
    """Until the server has closed 2 x EXTRA of the hog's sockets: it holds the cap."""
    until(lambda: hog.reopened >= 2 * EXTRA, "the hog's sockets closed by the server")


def test_a_sidecar_full_of_silent_sockets_still_takes_exports_and_answers_probes(tmp_path: Path):
    spool, store = tmp_path / "spool", f"sqlite:///{tmp_path / 'store.db'}"
    engine = create_store_engine(store)
    migrate.upgrade(engine)
    engine.dispose()
    proc, base = spawn_sidecar(
        "from infersight.cli.commands_sidecar import sidecar; sidecar()",
        [*sidecar_args(spool, "hogged"), "--store", store],
    )
    try:
        port = urlsplit(base).port
        assert port is not None
        with Hog("127.0.0.1", port, RECEIVER_LIMITS.max_connections + EXTRA) as hog:
            _hogged(hog)
            exporter = OTLPSpanExporter(endpoint=f"{base}/v1/traces", timeout=60)
            results = []
            try:
                while len(results) < EXPORTS and SpanExportResult.FAILURE not in results:
                    results.append(exporter.export(vllm_spans(10)))  # retried within 60 s
            finally:
                exporter.shutdown()
            print(f"hog: {hog.reopened} sockets closed by the sidecar and reopened")
            probes = [_get(httpx.get, f"{base}/healthz") for _ in range(PROBES)]
            assert hog.reopened > 2 * EXTRA  # the hog kept at it all along
        assert results == [SpanExportResult.SUCCESS] * EXPORTS
        assert probes == [200] * PROBES
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


def test_an_api_full_of_silent_sockets_still_answers_queries_and_probes(store, tmp_path: Path):
    cap = ApiSettings().max_connections
    env = {"INFERSIGHT_API_TOKENS": TOKENS}
    with serve(store.url, tmp_path, **env) as api, Hog("127.0.0.1", api.port, cap + EXTRA) as hog:
        _hogged(hog)
        auth = {"authorization": f"Bearer {READ_TOKEN}"}
        answers, probes, kept = [], [], []
        for _ in range(PROBES):  # a fresh connection for each, as a probe and a script make
            answers.append(_get(httpx.get, f"{api.url}/api/v1/slos", headers=auth))
            probes.append(_get(httpx.get, f"{api.url}/healthz"))
        with httpx.Client(base_url=api.url, headers=auth, timeout=60) as client:
            for _ in range(PROBES):  # on one keep-alive connection
                kept.append(_get(client.get, "/api/v1/slos"))
        assert hog.reopened > 2 * EXTRA
        print(f"hog: {hog.reopened} sockets closed by the API and reopened")
    assert (answers, probes, kept) == ([200] * PROBES,) * 3


def test_when_every_connection_is_busy_the_reserve_serves_probes_only(tmp_path: Path):
    """Connections with a request in flight (headers in, body awaited) are never closed for
    another; a newcomer then gets one of the reserve's connections, where /healthz and
    /metrics answer and anything else is 503 + Retry-After. Idle keep-alive connections are
    closed before any of that."""
    spool = Spool(SpoolConfig(tmp_path / "spool"))
    ingestor = Ingestor(spool, MappingContext("n"), CollectorMetrics(), Limits(), Reassembly(0.0))
    # fresh_s=0: the keep-alive connection counts as idle at once (the test's requests
    # follow each other closer than any fresh_s).
    limits = ConnectionLimits(max_connections=4, reserve=2, fresh_s=0)
    server = HttpServer(create_app(ingestor), "127.0.0.1", 0, limits=limits).start()
    base = f"http://127.0.0.1:{server.port}"
    busy: list[socket.socket] = []
    try:
        with httpx.Client(base_url=base, timeout=60) as kept:
            assert kept.get("/healthz").status_code == 200  # now idle, kept alive
            for _ in range(limits.max_connections):  # each holds a request in flight
                sock = socket.create_connection(("127.0.0.1", server.port))
                busy.append(sock)
                sock.sendall(BUSY)
                # uvicorn answers "100 Continue" once the route reads the body: in flight
                assert sock.recv(1024).startswith(b"HTTP/1.1 100")
            assert kept.get("/healthz").status_code == 200  # reconnected: the idle one went
        for path in ("/healthz", "/metrics"):
            assert httpx.get(base + path, timeout=60).status_code == 200
        refused = httpx.post(base + "/v1/traces", content=b"", timeout=60)
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["connection"] == "close"
        for sock in busy:  # none of them was closed: their reply is still to come
            sock.setblocking(False)
            with pytest.raises(BlockingIOError):
                sock.recv(1)
    finally:
        for sock in busy:
            sock.close()
        server.stop()
        spool.close()
