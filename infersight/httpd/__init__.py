"""The hardened uvicorn both infersight HTTP servers run (the API and the sidecar's receiver).

uvicorn bounds the time an idle keep-alive connection stays open, but not the time a client
takes to send a request's headers: a connection that sends nothing, or a header byte every
few seconds (slowloris), stays open for ever, and a thousand of them hold a thousand sockets.
``guarded_protocol`` wraps uvicorn's HTTP protocol with three bounds:

* a **header deadline**: from the moment a connection opens, or a response completes, the
  client has ``header_timeout_s`` to complete the next request's headers; more data does not
  extend it. When it passes with no request in progress, the connection is closed.
* a **header size** cap: more than ``max_header_bytes`` without complete headers closes it.
* a **connection cap**: a connection beyond ``max_connections`` is closed as it opens.

Nothing of infersight is imported here; ``api`` and ``collector`` both use it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any, Final

log = logging.getLogger(__name__)

#: The C parser when it is installed, as uvicorn's ``auto`` would choose.
HTTP_IMPL: Final = "httptools" if find_spec("httptools") else "h11"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    header_timeout_s: float = 10.0
    keep_alive_s: int = 5
    max_connections: int = 256
    max_header_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if not self.header_timeout_s > 0 or self.keep_alive_s < 1:
            raise ValueError("connection timeouts must be positive")
        if self.max_connections < 1 or self.max_header_bytes < 1024:
            raise ValueError("connection limits must be positive")

    def uvicorn_options(self, http: str = HTTP_IMPL) -> dict[str, Any]:
        """Keyword arguments for ``uvicorn.Config`` that apply these limits."""
        return {
            "http": guarded_protocol(self, http),
            "timeout_keep_alive": self.keep_alive_s,
            # uvicorn answers 503 once this many requests are in flight; connections beyond
            # the cap never get that far (they are closed as they open).
            "limit_concurrency": self.max_connections + 1,
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

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                log.debug("connection refused: %d open", len(self.connections) - 1)
                transport.close()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            if self._deadline is not None:
                self._header_bytes += len(data)
            super().data_received(data)
            if self.cycle is not before:
                self._disarm()  # a request's headers are complete
            elif self._deadline is not None and self._header_bytes > limits.max_header_bytes:
                self._close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self._idle():
                self._arm()

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
