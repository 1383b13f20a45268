"""The hardened uvicorn both infersight HTTP servers run (the API and the sidecar's receiver).

uvicorn bounds the time an idle keep-alive connection stays open, but not the time a client
takes to send a request's headers: a connection that sends nothing, or a header byte every
few seconds (slowloris), stays open for ever, and a thousand of them hold a thousand sockets.
``guarded_protocol`` wraps uvicorn's HTTP protocol with four bounds:

* a **header deadline**: from the moment a connection opens, or a response completes, the
  client has ``header_timeout_s`` to complete the next request's headers; more data does not
  extend it. When it passes with no request in progress, the connection is closed.
* a **header size** cap: more than ``max_header_bytes`` without complete headers closes it.
* a **body deadline**: while the application waits for more of a request's body, the client
  has ``body_idle_s`` (``header_timeout_s`` unless set) to send its next part; when it passes
  with nothing received, the request is answered 408 (unless its response has begun) and the
  connection closed. Time the server spends before reading the body (processing, reading
  paused, "100 Continue" not yet sent) does not count; the body's total time is the
  application's to bound.
* a **connection cap** that idle connections cannot monopolise. When a connection opens at
  ``max_connections``, the server closes an idle one to make room, not the newcomer, in this
  order: a connection open ``fresh_s`` or more that has never completed a request (connected
  and silent, or sending headers slowly); a keep-alive connection idle ``fresh_s`` or more
  since its last response; a connection opened less than ``fresh_s`` ago (its client may not
  have been read yet); and last a keep-alive connection that answered less than ``fresh_s``
  ago (its client is sending). Within each, the one idle longest goes first, so a new
  connection is closed only after every one opened before it. A connection with a request in
  flight is never closed for another, unless the server is waiting for its body: one that has
  sent nothing of it for ``fresh_s`` or more goes first (with the silent ones, from when the
  wait began), one that sent some less than ``fresh_s`` ago goes with the new connections
  (from when it opened or last answered: a client that reopens its stalled requests at once
  does not push out a newer connection). Only
  when every connection is busy is the newcomer held to the **reserve**: ``reserve``
  connections more, on which only the health and metrics paths (``reserved_paths``) are
  served, anything else answered 503 + ``Retry-After`` and closed; beyond those it is closed
  as it opens. So a client holding any number of silent sockets (and reopening them as they
  close) only churns its own: an exporter that sends, and a probe, still get through.

Nothing of infersight is imported here; ``api`` and ``collector`` both use it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any, Final

log = logging.getLogger(__name__)

#: The C parser when it is installed, as uvicorn's ``auto`` would choose.
HTTP_IMPL: Final = "httptools" if find_spec("httptools") else "h11"
#: Paths still served on the reserve's connections: probes and scrapes, which must answer
#: while the server is full.
RESERVED_PATHS: Final = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})
_FULL: Final = json.dumps(
    {"error": {"code": "unavailable", "message": "the server has no connection free"}}
).encode()

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def _full(send: Send) -> None:
    """503 + ``Retry-After``, and the connection closed after it."""
    headers = [
        (b"content-type", b"application/json"),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": _FULL})


_STALLED: Final = json.dumps(
    {"error": {"code": "body_timeout", "message": "the request body did not arrive in time"}}
).encode()
#: Written straight to the transport (the application is still waiting for the body), and
#: the connection closed after it.
_STALLED_RESPONSE: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_STALLED)).encode() + b"\r\n\r\n" + _STALLED
)


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    keep_alive_s: int = 5
    max_connections: int = 256
    max_header_bytes: int = 64 * 1024
    #: Connections beyond the cap, when every connection is busy, for ``reserved_paths`` only.
    reserve: int = 8
    reserved_paths: frozenset[str] = RESERVED_PATHS
    #: Seconds a request's body may make no progress while the application waits for it;
    #: ``None``: ``header_timeout_s``.
    body_idle_s: float | None = None
    #: Idle for less than this, a connection is closed for a newcomer only after the others
    #: (a new one: its request may not have been read yet; a keep-alive one: its client
    #: is sending).
    fresh_s: float = 1.0

    def __post_init__(self) -> None:
        body_ok = self.body_idle_s is None or self.body_idle_s > 0
        if (
            not self.header_timeout_s > 0
            or not body_ok
            or self.keep_alive_s < 1
            or self.fresh_s < 0
        ):
            raise ValueError("connection timeouts must be positive")
        if self.max_connections < 1 or self.max_header_bytes < 1024 or self.reserve < 0:
            raise ValueError("connection limits must be positive")

    @property
    def body_timeout_s(self) -> float:
        """``body_idle_s``, or ``header_timeout_s`` when it is not set."""
        return self.header_timeout_s if self.body_idle_s is None else self.body_idle_s

    def uvicorn_options(self, http: str = HTTP_IMPL) -> dict[str, Any]:
        """Keyword arguments for ``uvicorn.Config`` that apply these limits."""
        return {
            "http": guarded_protocol(self, http),
            "timeout_keep_alive": self.keep_alive_s,
            # A connection has one request in flight at most (pipelined ones wait), so the
            # connection cap and the reserve bound the requests. uvicorn's own limit is off:
            # it counts connections closed but not yet gone, and would answer 503 to a
            # health probe as well.
            "limit_concurrency": None,
            "h11_max_incomplete_event_size": self.max_header_bytes,
        }


def _base(http: str) -> type[asyncio.Protocol]:
    if http == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: PLC0415

        return HttpToolsProtocol
    from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: PLC0415

    return H11Protocol


def guarded_protocol(limits: ConnectionLimits, http: str = HTTP_IMPL) -> type[asyncio.Protocol]:
    """uvicorn's ``http`` protocol class with ``limits``' header deadline and caps."""
    base: Any = _base(http)

    class Guarded(base):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._deadline: asyncio.TimerHandle | None = None
            self._header_bytes = 0
            self._requests = 0  # requests whose headers were complete
            self._idle_since = time.monotonic()
            self._reserved = False  # a reserve connection: reserved paths only
            #: Since when the application waits for more of the request's body (None: not).
            self._body_wait: float | None = None
            self._body_deadline: asyncio.TimerHandle | None = None
            self._body_cycle: Any = None  # the request whose body is awaited
            app: Any = self.app

            async def admitted(scope: Scope, receive: Receive, send: Send) -> None:
                if self._reserved and scope.get("path") not in limits.reserved_paths:
                    await _full(send)
                    return
                await app(scope, self._timed(receive), send)

            self.app: Any = admitted

        def _timed(self, receive: Receive) -> Receive:
            """``receive``, timed while it waits for more of the request's body."""
            cycle: Any = getattr(receive, "__self__", None)  # uvicorn's request cycle
            if cycle is None:
                return receive

            async def timed() -> MutableMapping[str, Any]:
                if not cycle.more_body or cycle.response_complete or cycle.disconnected:
                    return await receive()  # the body is all in: waits for a disconnect
                self._body_cycle = cycle
                self._await_body()
                try:
                    return await receive()
                finally:
                    self._body_wait = self._body_cycle = None
                    self._disarm_body()

            return timed

        def _await_body(self) -> None:
            self._disarm_body()
            self._body_wait = time.monotonic()
            self._body_deadline = self.loop.call_later(limits.body_timeout_s, self._stalled)

        def _disarm_body(self) -> None:
            if self._body_deadline is not None:
                self._body_deadline.cancel()
                self._body_deadline = None

        def _stalled(self) -> None:
            """The body made no progress in time: 408 (if nothing was answered yet), closed."""
            self._body_deadline = None
            cycle = self._body_cycle
            if self._body_wait is None or self._closing():
                return
            log.debug("request body stalled: connection closed")
            if cycle is not None and not cycle.response_started:
                self.transport.write(_STALLED_RESPONSE)
            self._close()

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._idle_since = time.monotonic()
            if not self._admit():
                transport.close()
                return
            self._arm()

        def _admit(self) -> bool:
            """Whether this new connection stays (the module's doc): within the cap; in
            place of an idle connection closed for it; or in the reserve."""
            others = [c for c in self.connections if c is not self and not c._closing()]
            regular = [c for c in others if not c._reserved]
            if len(regular) < limits.max_connections:
                return True
            if self._evict(regular):
                return True
            reserved = [c for c in others if c._reserved]
            if len(reserved) < limits.reserve or self._evict(reserved):
                self._reserved = True
                log.debug("connection in the reserve: %d open", len(others))
                return True
            log.debug("connection refused: %d open, none idle", len(others))
            return False

        @staticmethod
        def _evict(connections: list[Any]) -> bool:
            """Close the idle connection first in line, if any (the module's doc)."""
            idle = [c for c in connections if c._idle() or c._body_wait is not None]
            if not idle:
                return False
            fresh_since = time.monotonic() - limits.fresh_s

            def rank(c: Any) -> tuple[int, float]:
                if not c._idle():  # waiting for its body: stalled first, arriving last
                    if c._body_wait <= fresh_since:
                        return (0, c._body_wait)
                    return (2, c._idle_since)  # as a new one: from when it opened
                young = c._idle_since > fresh_since
                if c._requests == 0:  # silent, slow, or its first request not read yet
                    return (2 if young else 0, c._idle_since)
                return (3 if young else 1, c._idle_since)  # between requests

            victim = min(idle, key=rank)
            log.debug("idle connection closed for a new one (%d requests)", victim._requests)
            victim._close()
            return True

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._disarm_body()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            if self._deadline is not None:
                self._header_bytes += len(data)
            super().data_received(data)
            if self._body_wait is not None:  # progress: the body deadline starts again
                self._await_body()
            if self.cycle is not before:
                self._requests += 1
                self._disarm()  # a request's headers are complete
            elif self._deadline is not None and self._header_bytes > limits.max_header_bytes:
                self._close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._idle_since = time.monotonic()
            if not self.transport.is_closing() and self._idle():
                self._arm()

        def _closing(self) -> bool:
            transport = getattr(self, "transport", None)
            return transport is None or transport.is_closing()

        def _idle(self) -> bool:
            return self.cycle is None or bool(self.cycle.response_complete)

        def _arm(self) -> None:
            self._disarm()
            self._header_bytes = 0
            self._deadline = self.loop.call_later(limits.header_timeout_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self._idle():
                self._close()

        def _close(self) -> None:
            self._disarm()
            self._disarm_body()
            if not self.transport.is_closing():
                self.transport.close()

    Guarded.__name__ = f"Guarded{base.__name__}"
    return Guarded
