"""The OTLP/HTTP receiver (``POST /v1/traces``) and the sidecar's ``GET /metrics`` and
``GET /healthz``, as a Starlette app; ``serve_http`` runs it under uvicorn in a thread.

Status codes follow the OTLP specification (``collector.refusal`` maps each refusal): 200
(with ``partial_success`` when some spans were rejected), 400 undecodable, 401 bad token, 408
body not received in time, 413 over the cap after decompression or over an entry limit, 415
unsupported media type or encoding, 429 + ``Retry-After`` when too many exports are in flight
(``collector.admission``), 503 + ``Retry-After`` when the spool refuses. The body is read on
the event loop (I/O only), holding its bytes against the admission's budget but no admission
place until it is all in, so a slow or stalled body keeps no exporter out; it is then inflated,
decoded and mapped by a decode slot (in its decoder process, ``collector.decoding``, when the
ingestor has one), except a small uncompressed protobuf body, whose decoding costs less than
the hand-off. 503 + ``Retry-After`` also answers an export whose decoder process died under it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable
from importlib.util import find_spec
from typing import Any, Final

import uvicorn
from google.rpc import status_pb2
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from infersight.collector import otlp
from infersight.collector.admission import Admission, Receipt
from infersight.collector.auth import authorized
from infersight.collector.body import BodyTimeout, UnsupportedMediaType, normal_encoding, read_raw
from infersight.collector.ingest import Ingested, Ingestor
from infersight.collector.refusal import ExportRefusal
from infersight.core.errors import InfersightError, InvalidInput, TooLarge, Unauthorized
from infersight.httpd import ConnectionLimits

log = logging.getLogger(__name__)

#: Seconds a client has to send the whole body once its headers are in.
BODY_TIMEOUT_S: Final = 30.0
#: Seconds between the HTTP server's housekeeping wake-ups (see ``_QuietServer``).
TICK_S: Final = 1.0
#: Uncompressed protobuf exports up to this size (about a hundred spans) are decoded and
#: mapped on the event loop: a few milliseconds (bounded by the entry limits), less than the
#: thread hand-off costs; all others go to a decode slot so that /healthz and /metrics keep
#: answering while they are processed.
INLINE_MAX_BYTES: Final = 64 * 1024
#: The C HTTP parser when it is installed (the ``collector`` extra). The event loop stays
#: asyncio's: uvloop saves little at OTLP request rates and costs the sidecar about 2 MB RSS.
HTTP_IMPL: Final = "httptools" if find_spec("httptools") else "h11"
LOOP_IMPL: Final = "asyncio"
_MEDIA: Final = (otlp.PROTOBUF, otlp.JSON)
#: Connection bounds of the receiver: a server's exporter holds a connection or two and a
#: scraper one more, so 128 is generous; a client gets 10 s to send a request's headers.
RECEIVER_LIMITS: Final = ConnectionLimits(
    header_timeout_s=10.0, keep_alive_s=5, max_connections=128
)


def _error(
    status: int, message: str, media: str, headers: dict[str, str] | None = None
) -> Response:
    if media == otlp.JSON:
        body = json.dumps({"code": status, "message": message}).encode()
    else:
        media = otlp.PROTOBUF
        body = status_pb2.Status(code=status, message=message).SerializeToString()
    return Response(body, status_code=status, media_type=media, headers=headers)


class _Decoding:
    """Reading a body on the event loop (against the admission's byte budget, with no
    place), then inflating, decoding and mapping it in one of the admission's decode slots."""

    def __init__(self, ingestor: Ingestor, gate: Admission) -> None:
        self.ingestor = ingestor
        self.limits = ingestor.limits
        self.gate = gate

    def decode_and_ingest(self, raw: bytes | bytearray, encoding: str, media: str) -> Ingested:
        return self.ingestor.ingest_body(raw, encoding, media)

    def declared_size(self, request: Request) -> int:
        """The body's declared length (the cap when none is declared); over the cap, it is
        refused before a byte of it is read or held."""
        cap = self.limits.max_body_bytes
        declared = request.headers.get("content-length", "")
        if not declared.isdigit():
            return cap
        if int(declared) > cap:
            raise TooLarge("body over the cap", details={"cap": cap, "reason": "body_too_large"})
        return int(declared)

    async def read(self, request: Request, receipt: Receipt) -> bytes | bytearray:
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S):
                return await read_raw(request.stream(), self.limits.max_body_bytes, receipt.add)
        except TimeoutError:
            raise BodyTimeout(
                "the body did not arrive in time", details={"reason": "body_timeout"}
            ) from None

    async def ingest(self, request: Request, media: str) -> Ingested:
        encoding = normal_encoding(request.headers.get("content-encoding", "identity"))
        gate = self.gate
        # The body is received holding only its bytes, not an admission place: a client
        # that sends its body slowly, or never, keeps no exporter out (issue 32, defect 6).
        receipt = gate.receipt(self.declared_size(request))
        handed_off = False
        try:
            raw = await self.read(request, receipt)
            receipt.admit()
            size = receipt.held
            try:
                inline = size <= INLINE_MAX_BYTES and not self.ingestor.holding()
                if encoding == "identity" and media == otlp.PROTOBUF and inline:
                    return self.ingestor.ingest_here(raw, encoding, media)
                # The place is given back when the decoding ends, not when this request does:
                # a client that hangs up does not stop the work it started.
                work = gate.submit(self.decode_and_ingest, raw, encoding, media)
                work.add_done_callback(lambda _: gate.leave(size))
                handed_off = True
            finally:
                if not handed_off:
                    gate.leave(size)
        finally:
            receipt.release()  # the bytes of a body refused before its admission
        try:
            return await asyncio.wrap_future(work)
        finally:
            # The future holds the error raised in it, whose traceback holds this frame:
            # without this, the cycle (and the body in it) lives until a full collection.
            del work, raw


def create_app(
    ingestor: Ingestor,
    token: str | None = None,
    health: Callable[[], dict[str, Any]] | None = None,
    admission: Admission | None = None,
) -> Starlette:
    metrics = ingestor.metrics
    decoding = _Decoding(ingestor, admission or Admission())

    async def traces(request: Request) -> Response:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        reply_media = media if media in _MEDIA else otlp.PROTOBUF
        try:
            if not authorized(request.headers.get("authorization"), token):
                raise Unauthorized("missing or wrong bearer token")
            if media not in _MEDIA:
                raise UnsupportedMediaType(f"unsupported content type {media!r}")
            ingested = await decoding.ingest(request, media)
            await asyncio.wrap_future(ingested.durable)
        except ClientDisconnect:
            # The client hung up before its body was in: nothing was taken, no one to answer
            # (and no traceback in the log for each one that does so).
            return Response(status_code=400)
        except InfersightError as exc:
            refusal = ExportRefusal.of(exc)
            refusal.count(metrics, "http", exc)
            return _error(refusal.http_status, exc.message, reply_media, refusal.http_headers())
        client = request.client.host if request.client is not None else ""
        ingestor.acknowledged(ingested, "http", client)
        metrics.exports.labels("http", "partial" if ingested.rejected else "ok").inc()
        body = otlp.response_body(ingested.rejected, ingested.message, reply_media)
        return Response(body, status_code=200, media_type=reply_media)

    async def prometheus(_: Request) -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4")

    async def healthz(request: Request) -> Response:
        records, size = ingestor.spool.stats()
        state: dict[str, Any] = {"status": "ok", "spool_records": records, "spool_bytes": size}
        if health is not None:
            state.update(health())
        # 200 while degraded (alive, accepting into the spool): see ``collector.sidecar``.
        strict = request.query_params.get("strict", "") not in ("", "0", "false")
        status = 503 if strict and state["status"] != "ok" else 200
        return Response(json.dumps(state), status_code=status, media_type="application/json")

    return Starlette(
        routes=[
            Route("/v1/traces", traces, methods=["POST"]),
            Route("/metrics", prometheus, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


class _QuietServer(uvicorn.Server):
    """uvicorn with a housekeeping tick of ``TICK_S`` instead of 0.1 s.

    uvicorn wakes its event loop ten times a second to refresh the ``Date`` header (once a
    second) and to notice ``should_exit``; on an idle sidecar that was 0.2 % of a core, a
    tenth of its CPU budget. Here the loop wakes once a second (the header is refreshed on
    every tick, so it is as fresh as before) and ``exit`` wakes it at once.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864_000  # a multiple of 10: on_tick refreshes the header
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            should_exit = await self.on_tick(counter)

    def exit(self) -> None:
        """Ask the server to stop, from any thread; it stops at once, not at the next tick."""
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(wake.set)


class HttpServer:
    """uvicorn in a background thread on an already-bound socket (port 0 works)."""

    def __init__(
        self, app: Starlette, host: str, port: int, limits: ConnectionLimits = RECEIVER_LIMITS
    ) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
        except OSError as exc:  # in use, or not an address of this host: the operator's to fix
            self._socket.close()
            raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            ws="none",
            loop=LOOP_IMPL,
            access_log=False,
            # header deadline (slowloris), idle keep-alive, connection and header size caps
            **limits.uvicorn_options(HTTP_IMPL),
        )
        self._server = _QuietServer(config)
        self._thread = threading.Thread(target=self._run, name="otlp-http", daemon=True)

    def _run(self) -> None:
        self._server.run(sockets=[self._socket])

    def start(self, timeout: float = 10.0) -> HttpServer:
        self._thread.start()
        waited = 0.0
        while not self._server.started:
            if not self._thread.is_alive() or waited > timeout:
                raise InvalidInput("the HTTP receiver did not start")
            threading.Event().wait(0.01)
            waited += 0.01
        return self

    def stop(self) -> None:
        self._server.exit()
        self._thread.join(timeout=10)
        self._socket.close()
