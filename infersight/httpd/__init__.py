"""The hardened uvicorn both infersight HTTP servers run (the API and the sidecar's receiver).

uvicorn bounds the time an idle keep-alive connection stays open, but not the time a client
takes to send a request's headers: a connection that sends nothing, or a header byte every
few seconds (slowloris), stays open for ever, and a thousand of them hold a thousand sockets.
``guarded_protocol`` wraps uvicorn's HTTP protocol with three bounds:

* a **header deadline**: from the moment a connection opens, or a response completes, the
  client has ``header_timeout_s`` to complete the next request's headers; more data does not
  extend it. When it passes with no request in progress, the connection is closed.
* a **header size** cap: more than ``max_header_bytes`` without complete headers closes it.
* a **connection cap** that idle connections cannot monopolise. When a connection opens at
  ``max_connections``, the server closes an idle one to make room, not the newcomer, in this
  order: a connection open ``fresh_s`` or more that has never completed a request (connected
  and silent, or sending headers slowly); a keep-alive connection idle ``fresh_s`` or more
  since its last response; a connection opened less than ``fresh_s`` ago (its client may not
  have been read yet); and last a keep-alive connection that answered less than ``fresh_s``
  ago (its client is sending). Within each, the one idle longest goes first, so a new
  connection is closed only after every one opened before it. A connection with a request in
  flight is never closed for another. Only
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


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    keep_alive_s: int = 5
    max_connections: int = 256
    max_header_bytes: int = 64 * 1024
    #: Connections beyond the cap, when every connection is busy, for ``reserved_paths`` only.
    reserve: int = 8
    reserved_paths: frozenset[str] = RESERVED_PATHS
    #: Idle for less than this, a connection is closed for a newcomer only after the others
    #: (a new one: its request may not have been read yet; a keep-alive one: its client
    #: is sending).
    fresh_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.header_timeout_s > 0 or self.keep_alive_s < 1 or self.fresh_s < 0:
            raise ValueError("connection timeouts must be positive")
        if self.max_connections < 1 or self.max_header_bytes < 1024 or self.reserve < 0:
            raise ValueError("connection limits must be positive")

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
            app: Any = self.app

            async def admitted(scope: Scope, receive: Receive, send: Send) -> None:
                if self._reserved and scope.get("path") not in limits.reserved_paths:
                    await _full(send)
                    return
                await app(scope, receive, send)

            self.app: Any = admitted

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
            idle = [c for c in connections if c._idle()]
            if not idle:
                return False
            fresh_since = time.monotonic() - limits.fresh_s

            def rank(c: Any) -> tuple[int, float]:
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
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            if self._deadline is not None:
                self._header_bytes += len(data)
            super().data_received(data)
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
            if not self.transport.is_closing():
                self.transport.close()

    Guarded.__name__ = f"Guarded{base.__name__}"
    return Guarded
