"""Request limits: a cap on body size, checked on the declared length and while reading.

Pure ASGI middleware, so that an oversized upload is refused before a route parses it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infersight.api.errors import send_error
from infersight.core.errors import TooLarge


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _Oversized
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _Oversized:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        error = TooLarge(
            f"request body larger than {self.max_bytes} bytes",
            details={"max_bytes": self.max_bytes},
        )
        await send_error(send, error)


class _Oversized(Exception):
    pass
