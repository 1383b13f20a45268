"""Issue 32 (defect 6): a client holding the connection cap + 50 silent sockets, reopening
each as it closes, does not shut out the clients that send; nor does one whose sockets each
send the headers of a POST and never its body (before, those counted as requests in flight,
never closed for another: held for the sidecar's 30 s body timeout, and for ever by the API).
A real OpenTelemetry exporter keeps exporting to the sidecar (a real ``infersight sidecar``
process) and ``/healthz`` keeps answering, and the API (``infersight serve``) keeps answering
its queries and probes.
Before, every connection beyond the cap was closed as it opened, and no export got through.
Nor do clients that send their bodies a few bytes a second hold the receiver's admission
places (before, a body took its place before it was read: eight such clients and every export
was 429)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from infersight.api.settings import ApiSettings
from infersight.collector.admission import Admission, AdmissionConfig
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
from tests.collector.harness import Receiver, encoded, sidecar_args, spawn_sidecar, vllm_spans
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


def _headers_only(path: str, port: int) -> bytes:
    """The headers of a POST to ``path`` whose 100-byte body never comes."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    ).encode()


#: What each of the hog's sockets sends: nothing, or a POST's headers and no body.
HOGS = pytest.mark.parametrize("headers_only", [False, True], ids=["silent", "headers-only"])


def _hogged(hog: Hog) -> None:
    """Until the server has closed 2 x EXTRA of the hog's sockets: it holds the cap."""
    until(lambda: hog.reopened >= 2 * EXTRA, "the hog's sockets closed by the server")


@HOGS
def test_a_sidecar_full_of_silent_sockets_still_takes_exports_and_answers_probes(
    tmp_path: Path, headers_only: bool
):
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
        request = _headers_only("/v1/traces", port) if headers_only else b""
        count = RECEIVER_LIMITS.max_connections + EXTRA
        with Hog("127.0.0.1", port, count, request) as hog:
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


@HOGS
def test_an_api_full_of_silent_sockets_still_answers_queries_and_probes(
    store, tmp_path: Path, headers_only: bool
):
    cap = ApiSettings().max_connections
    env = {"INFERSIGHT_API_TOKENS": TOKENS}
    with serve(store.url, tmp_path, **env) as api:
        request = _headers_only("/api/v1/x", api.port) if headers_only else b""
        with Hog("127.0.0.1", api.port, cap + EXTRA, request) as hog:
            answers, probes, kept = _query(api.url, hog)
    assert (answers, probes, kept) == ([200] * PROBES,) * 3


def _query(url: str, hog: Hog) -> tuple[list[int | str], ...]:
    """The API's answers to a query and a probe on fresh connections, and to a query on one
    kept alive, PROBES of each, while ``hog`` holds the cap."""
    _hogged(hog)
    auth = {"authorization": f"Bearer {READ_TOKEN}"}
    answers: list[int | str] = []
    probes: list[int | str] = []
    kept: list[int | str] = []
    for _ in range(PROBES):  # a fresh connection for each, as a probe and a script make
        answers.append(_get(httpx.get, f"{url}/api/v1/slos", headers=auth))
        probes.append(_get(httpx.get, f"{url}/healthz"))
    with httpx.Client(base_url=url, headers=auth, timeout=60) as client:
        for _ in range(PROBES):  # on one keep-alive connection
            kept.append(_get(client.get, "/api/v1/slos"))
    assert hog.reopened > 2 * EXTRA
    print(f"hog: {hog.reopened} sockets closed by the API and reopened")
    return answers, probes, kept


class _Busy:
    """The receiver's app, plus a ``/busy`` route whose answer begins at once and ends only
    when ``release`` is set: a request really being served, for as long as the test needs
    (no body deadline or timeout of the server can end it first)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.release = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/busy":
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        while not self.release.is_set():
            await asyncio.sleep(0.05)
        await send({"type": "http.response.body", "body": b"done"})


def _head(sock: socket.socket) -> bytes:
    """The status line and headers of the answer on ``sock`` (empty: closed unanswered)."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    return head


@contextlib.contextmanager
def _receiver(tmp_path: Path, limits: ConnectionLimits) -> Iterator[tuple[HttpServer, _Busy]]:
    spool = Spool(SpoolConfig(tmp_path / "spool"))
    ingestor = Ingestor(spool, MappingContext("n"), CollectorMetrics(), Limits(), Reassembly(0.0))
    app = _Busy(create_app(ingestor))
    server = HttpServer(app, "127.0.0.1", 0, limits=limits).start()  # type: ignore[arg-type]
    try:
        yield server, app
    finally:
        app.release.set()
        server.stop()
        spool.close()


def test_when_every_connection_is_busy_the_reserve_serves_probes_only(tmp_path: Path):
    """Connections with a request being served are never closed for another; a newcomer
    then gets one of the reserve's connections, where /healthz and /metrics answer and
    anything else is 503 + Retry-After. Idle keep-alive connections are closed before any of
    that."""
    # fresh_s=0: the keep-alive connection counts as idle at once (the test's requests
    # follow each other closer than any fresh_s).
    limits = ConnectionLimits(max_connections=4, reserve=2, fresh_s=0)
    busy: list[socket.socket] = []
    with _receiver(tmp_path, limits) as (server, _):
        base = f"http://127.0.0.1:{server.port}"
        try:
            with httpx.Client(base_url=base, timeout=60) as kept:
                assert kept.get("/healthz").status_code == 200  # now idle, kept alive
                for _ in range(limits.max_connections):  # each holds a request being served
                    sock = socket.create_connection(("127.0.0.1", server.port))
                    busy.append(sock)
                    sock.sendall(b"GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
                    assert _head(sock).startswith(b"HTTP/1.1 200")  # its answer has begun
                assert kept.get("/healthz").status_code == 200  # reconnected: the idle one went
            for path in ("/healthz", "/metrics"):
                assert httpx.get(base + path, timeout=60).status_code == 200
            refused = httpx.post(base + "/v1/traces", content=b"", timeout=60)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.headers["connection"] == "close"
            for sock in busy:  # none of them was closed: the rest of its answer is to come
                sock.setblocking(False)
                with pytest.raises(BlockingIOError):
                    sock.recv(1)
        finally:
            for sock in busy:
                sock.close()


def test_a_request_whose_body_stalls_makes_room_and_is_answered_408(tmp_path: Path):
    """Issue 32: a request whose headers are in but whose body does not come counted as in
    flight, never closed for another, so such requests held the cap. Now the server waiting
    for a body is no request being served: at the cap a stalled one is closed for a newcomer
    before the reserve is used, and one whose body makes no progress for ``body_idle_s`` is
    answered 408 and closed."""
    limits = ConnectionLimits(max_connections=2, reserve=1, fresh_s=0, body_idle_s=600)
    stalled: list[socket.socket] = []
    with _receiver(tmp_path, limits) as (server, _):
        base = f"http://127.0.0.1:{server.port}"
        try:
            for _ in range(limits.max_connections):
                sock = socket.create_connection(("127.0.0.1", server.port))
                stalled.append(sock)
                sock.sendall(_headers_only("/v1/traces", server.port))
            until(lambda: _receiving(server) == 2, "both requests waiting for their body")
            export = httpx.post(
                base + "/v1/traces",
                content=b"",
                headers={"content-type": "application/x-protobuf"},
                timeout=60,
            )
            assert export.status_code == 200  # not the reserve's 503: a stalled one went
            until(lambda: any(map(_closed, stalled)), "a stalled connection closed")
            assert sum(map(_closed, stalled)) == 1  # unanswered; the other is still waiting
        finally:
            for sock in stalled:
                sock.close()
    limits = ConnectionLimits(body_idle_s=0.5)
    with (
        _receiver(tmp_path / "408", limits) as (server, _),
        socket.create_connection(("127.0.0.1", server.port)) as sock,
    ):
        sock.sendall(_headers_only("/v1/traces", server.port) + b"{")  # 1 byte of 100
        answer = b""
        while chunk := sock.recv(4096):  # until the server closes it
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"]["code"] == "body_timeout"  # the server's, not the route's


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` with nothing sent on it."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False


def _receiving(server: HttpServer) -> int:
    """Connections of ``server`` whose request's headers are in and whose application waits
    for its body (or, on a server that does not tell, whose headers are in)."""
    try:
        connections = list(server._server.server_state.connections)
    except RuntimeError:  # changed while copied (the server's thread)
        return 0
    return sum(
        1 for c in connections if c._requests == 1 and getattr(c, "_body_wait", 0.0) is not None
    )


SLOW = 10  # slow-body clients: more than the admission's 1 slot + 7 waiting places


def _headers_in(server: HttpServer) -> int:
    """Connections of ``server`` whose (first) request's headers are in."""
    try:
        connections = list(server._server.server_state.connections)
    except RuntimeError:  # changed while copied (the server's thread)
        return 0
    return sum(1 for c in connections if c._requests == 1)


def _unanswered(server: HttpServer) -> int:
    """Connections of ``server`` with a request in and no answer sent yet."""
    try:
        connections = list(server._server.server_state.connections)
    except RuntimeError:  # changed while copied (the server's thread)
        return 0
    return sum(1 for c in connections if c._requests == 1 and not c._idle())


def test_clients_sending_their_bodies_a_few_bytes_a_second_do_not_block_exporters(
    tmp_path: Path,
):
    """A body is received holding its bytes only, not an admission place: SLOW clients each
    sending a byte every 0.3 s (their bodies still arriving for the whole test, so no body
    deadline ends them) leave the places to exporters, which are answered 200 at once."""
    stop = threading.Event()
    sent: list[int] = []
    with _receiver(tmp_path, RECEIVER_LIMITS) as (server, _):
        head = (
            f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
            "Content-Type: application/x-protobuf\r\nContent-Length: 100000\r\n\r\n"
        ).encode()
        slow = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(SLOW)]

        def trickle() -> None:  # \x0a\x00 repeated: empty ResourceSpans, a valid export
            while not stop.wait(0.3):
                byte = b"\x0a\x00"[len(sent) % 2 : len(sent) % 2 + 1]
                for sock in slow:
                    sock.sendall(byte)
                sent.append(1)

        try:
            for sock in slow:
                sock.sendall(head)
            until(lambda: _headers_in(server) == SLOW, "every slow client's headers in")
            sender = threading.Thread(target=trickle, daemon=True)
            sender.start()
            until(lambda: len(sent) >= 3, "the slow clients' first bytes sent")
            body = encoded(vllm_spans(5))
            answers = [
                httpx.post(
                    f"http://127.0.0.1:{server.port}/v1/traces",
                    content=body,
                    headers={"content-type": "application/x-protobuf"},
                    timeout=60,
                ).status_code
                for _ in range(EXPORTS)
            ]
            assert answers == [200] * EXPORTS
            exporter = OTLPSpanExporter(
                endpoint=f"http://127.0.0.1:{server.port}/v1/traces", timeout=60
            )
            try:
                exported = exporter.export(vllm_spans(3))
            finally:
                exporter.shutdown()
            # The slow ones: still being received, none refused (the exporter's connection is
            # counted until the server's thread has marked its answer sent: wait for that).
            still = until(
                lambda: (n := _unanswered(server)) <= SLOW and n, "the exporter's answer sent"
            )
            assert sender.is_alive()
        finally:
            stop.set()
            for sock in slow:
                sock.close()
    assert exported is SpanExportResult.SUCCESS
    assert still == SLOW


def test_bodies_being_received_are_bounded_by_bytes_and_give_them_back_when_dropped(
    make_receiver: Callable[..., Receiver],
):
    """Bodies being received hold the bytes received so far (not their declared length)
    against the admission's ``max_bytes``: one that would take them past it is refused 429
    + Retry-After, a small one still fits, and a client that hangs up mid-body gives its
    bytes back."""
    admission = Admission(AdmissionConfig(max_bytes=200_000))
    receiver = make_receiver(admission=admission)
    big, small = encoded(vllm_spans(200)), encoded(vllm_spans(2))
    assert len(small) < 200_000 - 150_000 < len(big)  # beside the 150 kB held: fits, not
    protobuf = {"content-type": "application/x-protobuf"}
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-protobuf\r\nContent-Length: 300000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", receiver.http.port)) as sock:
        sock.sendall(head + b"\x0a\x00" * 75_000)  # 150 kB of the 300 kB declared
        until(lambda: admission.bytes == 150_000, "the partial body held")
        assert admission.admitted == 0  # bytes only: no admission place
        shed = httpx.post(receiver.url + "/v1/traces", content=big, headers=protobuf, timeout=60)
        fits = httpx.post(receiver.url + "/v1/traces", content=small, headers=protobuf, timeout=60)
    until(lambda: admission.bytes == 0, "the dropped body's bytes given back")
    after = httpx.post(receiver.url + "/v1/traces", content=big, headers=protobuf, timeout=60)
    assert (shed.status_code, shed.headers["retry-after"]) == (429, "1")
    assert fits.status_code == 200
    assert after.status_code == 200
    assert (admission.admitted, admission.bytes) == (0, 0)
