"""Reading an HTTP request body under a cap that applies after decompression.

Reading and inflating are separate steps so that the receiver reads the (compressed) body on
its event loop, which is only I/O, and inflates it in a worker thread. The cap is checked
while inflating, a bounded piece at a time, so a gzip bomb is refused with ``TooLarge`` after
inflating at most ``cap + 1`` bytes; it never expands in memory.

Inflation is linear in the body's size. The input is fed to zlib through a ``memoryview`` a
piece of at most ``PIECE_BYTES`` at a time, and the position in the body is advanced by what
zlib consumed, so the rest of the body is never re-copied: when a gzip member ends, zlib
copies what it was given past the member's end into ``unused_data``, and that copy is at most
one piece. The number of concatenated gzip members is capped too: each costs a fresh
decompressor, and a body of a million empty members is nothing any exporter sends.

Past ``RATIO_FLOOR_BYTES`` of output, a body that inflates more than ``max_ratio`` times the
compressed bytes consumed is refused as well: decoding costs in proportion to the inflated
size, and this keeps that cost a bounded multiple of what the client sent. OTLP exports
compress 5-30 times (random ids and timestamps do not compress); 256 leaves a wide margin.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Callable
from typing import Final

from infersight.core.errors import InvalidInput, TooLarge

_WBITS: Final = {
    "gzip": 16 + zlib.MAX_WBITS,
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,
}
#: Most compressed bytes handed to zlib in one call (bounds the copy behind ``unused_data``).
PIECE_BYTES: Final = 64 * 1024
#: Most inflated bytes asked of zlib in one call, so the ratio is checked at least this often
#: (64 KiB of a bomb inflates to 64 MiB).
OUT_PIECE_BYTES: Final = 1 << 20
#: Default cap on concatenated gzip members in one body.
MAX_MEMBERS: Final = 64
#: Default cap on inflated / compressed size, checked once ``RATIO_FLOOR_BYTES`` are out.
MAX_RATIO: Final = 256
RATIO_FLOOR_BYTES: Final = 1 << 20


class UnsupportedEncoding(InvalidInput):
    """A ``Content-Encoding`` the receiver does not speak (HTTP 415)."""


class UnsupportedMediaType(InvalidInput):
    """A ``Content-Type`` other than OTLP's protobuf and JSON (HTTP 415)."""


class BodyTimeout(InvalidInput):
    """The body did not arrive in time (``http_receiver.BODY_TIMEOUT_S``; HTTP 408)."""


def normal_encoding(encoding: str) -> str:
    """The encoding in canonical form, or ``UnsupportedEncoding``."""
    encoding = encoding.strip().lower() or "identity"
    if encoding != "identity" and encoding not in _WBITS:
        raise UnsupportedEncoding("unsupported content encoding", details={"encoding": encoding})
    return encoding


async def read_raw(
    chunks: AsyncIterator[bytes], cap: int, hold: Callable[[int], object] | None = None
) -> bytes | bytearray:
    """The body as sent (still compressed), or ``TooLarge`` once it exceeds ``cap``.

    ``hold`` is called with each chunk's size before the chunk is kept: it may refuse it
    (the receiver's byte budget for bodies in memory, ``collector.admission``)."""
    raw = bytearray()  # returned as it is: a copy into ``bytes`` would double the peak
    async for chunk in chunks:
        if len(raw) + len(chunk) > cap:
            raise TooLarge("body over the cap", details={"cap": cap, "reason": "body_too_large"})
        if hold is not None:
            hold(len(chunk))
        raw += chunk
    return raw


def inflate(
    raw: bytes | bytearray,
    encoding: str,
    cap: int,
    max_members: int = MAX_MEMBERS,
    max_ratio: int = MAX_RATIO,
) -> bytes | bytearray:
    """The decoded body, or ``TooLarge`` / ``InvalidInput`` / ``UnsupportedEncoding``.

    Work is linear in ``len(raw)`` plus the inflated size, which is at most ``cap + 1``.
    """
    encoding = normal_encoding(encoding)
    if encoding == "identity":
        if len(raw) > cap:
            raise TooLarge("body over the cap", details={"cap": cap, "reason": "body_too_large"})
        return raw
    return _Inflation(memoryview(raw), encoding, cap, max_members, max_ratio).run()


class _Inflation:
    def __init__(
        self, view: memoryview, encoding: str, cap: int, max_members: int, max_ratio: int
    ) -> None:
        self.view = view
        self.encoding = encoding
        self.cap = cap
        self.max_members = max_members
        self.max_ratio = max_ratio
        self.out = bytearray()
        self.pos = 0

    def run(self) -> bytes:
        members = 0
        while True:
            members += 1
            if members > self.max_members:
                raise InvalidInput(
                    f"more than {self.max_members} concatenated {self.encoding} members",
                    details={"limit": self.max_members, "reason": "too_many_members"},
                )
            self._member(_WBITS[self.encoding], raw_fallback=self.encoding == "deflate")
            if self.pos >= len(self.view):
                return bytes(self.out)

    def _member(self, wbits: int, raw_fallback: bool) -> None:
        z = zlib.decompressobj(wbits)
        start, end = self.pos, len(self.view)
        while not z.eof:
            if self.pos >= end:
                self.out += z.flush()  # output zlib still holds (a few bytes at most)
                if not z.eof:
                    raise InvalidInput(f"truncated {self.encoding} body")
                break
            stop = min(self.pos + PIECE_BYTES, end)
            room = min(OUT_PIECE_BYTES, self.cap + 1 - len(self.out))
            try:
                piece = z.decompress(self.view[self.pos : stop], room)
            except zlib.error as exc:
                if raw_fallback and self.pos == start and not self.out:
                    # Some clients send raw DEFLATE without the zlib wrapper.
                    self._member(-zlib.MAX_WBITS, raw_fallback=False)
                    return
                raise InvalidInput(
                    f"corrupt {self.encoding} body", details={"error": str(exc)}
                ) from None
            self.out += piece
            if len(self.out) > self.cap:
                raise TooLarge(
                    "body over the cap after decompression",
                    details={"cap": self.cap, "reason": "inflated_too_large"},
                )
            # What zlib did not consume: past the member's end, or beyond ``room``.
            left = len(z.unused_data) if z.eof else len(z.unconsumed_tail)
            self.pos = stop - left
            if len(self.out) > max(RATIO_FLOOR_BYTES, self.max_ratio * self.pos):
                raise TooLarge(
                    f"body inflates more than {self.max_ratio} times its compressed size",
                    details={"limit": self.max_ratio, "reason": "inflation_ratio"},
                )


async def read_capped(chunks: AsyncIterator[bytes], encoding: str, cap: int) -> bytes | bytearray:
    """Read and inflate in one step (the compressed size is capped at ``cap`` as well)."""
    encoding = normal_encoding(encoding)
    return inflate(await read_raw(chunks, cap), encoding, cap)
