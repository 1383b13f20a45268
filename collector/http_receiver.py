"""The OTLP/HTTP receiver (``POST /v1/traces``) and the sidecar's ``GET /metrics`` and
``GET /healthz``, as a Starlette app; ``serve_http`` runs it under uvicorn in a thread.

Status codes follow the OTLP specification: 200 (with ``partial_success`` when some spans
were rejected), 400 undecodable, 401 bad token, 413 over the cap after decompression,
415 unsupported media type or encoding, 503 + ``Retry-After`` when the spool refuses.
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
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from collector import otlp
from collector.auth import authorized
from collector.body import UnsupportedEncoding, read_capped
from collector.ingest import Ingested, Ingestor
from core.errors import InfersightError, InvalidInput, TooLarge, Unauthorized, Unavailable
from httpd import ConnectionLimits

log = logging.getLogger(__name__)

RETRY_AFTER_S: Final = 5
#: Seconds between the HTTP server's housekeeping wake-ups (see ``_QuietServer``).
TICK_S: Final = 1.0
#: Exports up to this size (about a hundred spans) are decoded and mapped on the event loop:
#: a few milliseconds, less than the thread hand-off costs; larger ones go to a worker thread
#: so that /healthz and /metrics keep answering while they are processed.
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


def _refusal(exc: InfersightError) -> tuple[int, str, dict[str, str] | None]:
    if isinstance(exc, UnsupportedEncoding):
        return 415, "unsupported_encoding", None
    if isinstance(exc, TooLarge):
        return 413, "too_large", None
    if isinstance(exc, Unavailable):
        return 503, "spool_full", {"Retry-After": str(RETRY_AFTER_S)}
    if isinstance(exc, Unauthorized):
        return 401, "unauthorized", None
    return 400, "undecodable", None


def create_app(
    ingestor: Ingestor,
    token: str | None = None,
    health: Callable[[], dict[str, Any]] | None = None,
) -> Starlette:
    metrics = ingestor.metrics
    cap = ingestor.limits.max_body_bytes

    def _decode_and_ingest(body: bytes, media: str) -> Ingested:
        return ingestor.ingest(otlp.parse(body, media))

    async def traces(request: Request) -> Response:
        media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        reply_media = media if media in _MEDIA else otlp.PROTOBUF
        try:
            if not authorized(request.headers.get("authorization"), token):
                raise Unauthorized("missing or wrong bearer token")
            if media not in _MEDIA:
                metrics.exports.labels("http", "unsupported_media_type").inc()
                return _error(415, f"unsupported content type {media!r}", reply_media)
            encoding = request.headers.get("content-encoding", "identity")
            body = await read_capped(request.stream(), encoding, cap)
            if len(body) <= INLINE_MAX_BYTES:
                ingested = _decode_and_ingest(body, media)
            else:
                ingested = await run_in_threadpool(_decode_and_ingest, body, media)
            await asyncio.wrap_future(ingested.durable)
        except InfersightError as exc:
            status, result, headers = _refusal(exc)
            metrics.exports.labels("http", result).inc()
            return _error(status, exc.message, reply_media, headers)
        ingestor.acknowledged(ingested)
        metrics.exports.labels("http", "partial" if ingested.rejected else "ok").inc()
        body = otlp.response_body(ingested.rejected, ingested.message, reply_media)
        return Response(body, status_code=200, media_type=reply_media)

    async def prometheus(_: Request) -> Response:
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4")

    async def healthz(_: Request) -> Response:
        records, size = ingestor.spool.stats()
        state: dict[str, Any] = {"status": "ok", "spool_records": records, "spool_bytes": size}
        if health is not None:
            state.update(health())
        return Response(json.dumps(state), media_type="application/json")

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
        self._socket.bind((host, port))
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
