"""Reading an HTTP request body under a cap that applies after decompression.

The cap is checked while inflating, a bounded piece at a time, so a gzip bomb is refused
with ``TooLarge`` after inflating at most ``cap + 1`` bytes; it never expands in memory.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator
from typing import Final

from core.errors import InvalidInput, TooLarge

_WBITS: Final = {
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,
}


class UnsupportedEncoding(InvalidInput):
    """A ``Content-Encoding`` the receiver does not speak (HTTP 415)."""


class _Inflater:
    def __init__(self, encoding: str, cap: int) -> None:
        self.encoding = encoding
        self.cap = cap
        self.out = bytearray()
        self._z = zlib.decompressobj(_WBITS[encoding])
        self._started = False

    def feed(self, chunk: bytes) -> None:
        data = chunk
        while data:
            try:
                piece = self._z.decompress(data, self.cap + 1 - len(self.out))
            except zlib.error as exc:
                if self.encoding == "deflate" and not self._started:
                    # Some clients send raw DEFLATE without the zlib wrapper.
                    self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                    self._started = True
                    continue
                raise InvalidInput(
                    f"corrupt {self.encoding} body", details={"error": str(exc)}
                ) from None
            self._started = True
            self.out += piece
            if len(self.out) > self.cap:
                raise TooLarge("body over the cap after decompression", details={"cap": self.cap})
            data = self._z.unconsumed_tail
            if self._z.eof:
                # A gzip body may be several concatenated members: inflate them all.
                data = self._z.unused_data
                if data:
                    self._z = zlib.decompressobj(_WBITS[self.encoding])

    def finish(self) -> bytes:
        if not self._z.eof:
            raise InvalidInput(f"truncated {self.encoding} body")
        return bytes(self.out)


async def read_capped(chunks: AsyncIterator[bytes], encoding: str, cap: int) -> bytes:
    """The decoded body, or ``TooLarge`` / ``InvalidInput`` / ``UnsupportedEncoding``."""
    encoding = encoding.strip().lower() or "identity"
    if encoding == "identity":
        raw = bytearray()
        async for chunk in chunks:
            raw += chunk
            if len(raw) > cap:
                raise TooLarge("body over the cap", details={"cap": cap})
        return bytes(raw)
    if encoding not in _WBITS:
        raise UnsupportedEncoding("unsupported content encoding", details={"encoding": encoding})
    inflater = _Inflater(encoding, cap)
    received = 0
    async for chunk in chunks:
        received += len(chunk)
        if received > cap:
            raise TooLarge("compressed body over the cap", details={"cap": cap})
        inflater.feed(chunk)
    return inflater.finish()
