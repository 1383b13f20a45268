"""Request bodies under a cap measured after decompression."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator

import pytest

from collector.body import UnsupportedEncoding, read_capped
from core.errors import InvalidInput, TooLarge

PAYLOAD = bytes(range(256)) * 64


async def chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def read(data: bytes, encoding: str, cap: int = 1 << 20) -> bytes:
    return asyncio.run(read_capped(chunks(data), encoding, cap))


def raw_deflate(data: bytes) -> bytes:
    z = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return z.compress(data) + z.flush()


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("identity", PAYLOAD),
        ("gzip", gzip.compress(PAYLOAD)),
        ("gzip", gzip.compress(PAYLOAD[:5000]) + gzip.compress(PAYLOAD[5000:])),
        ("deflate", zlib.compress(PAYLOAD)),
        ("deflate", raw_deflate(PAYLOAD)),
    ],
    ids=["identity", "gzip", "two gzip members", "zlib deflate", "raw deflate"],
)
def test_bodies_decode_whatever_the_encoding(encoding: str, body: bytes) -> None:
    assert read(body, encoding) == PAYLOAD


def test_the_cap_applies_to_the_inflated_size() -> None:
    with pytest.raises(TooLarge):
        read(gzip.compress(PAYLOAD), "gzip", cap=len(PAYLOAD) - 1)
    assert read(gzip.compress(PAYLOAD), "gzip", cap=len(PAYLOAD)) == PAYLOAD


def test_a_truncated_gzip_body_is_invalid() -> None:
    body = gzip.compress(PAYLOAD)
    with pytest.raises(InvalidInput):
        read(body[: len(body) // 2], "gzip")


def test_an_unknown_encoding_is_unsupported() -> None:
    with pytest.raises(UnsupportedEncoding):
        read(PAYLOAD, "br")


def test_a_receiver_beyond_loopback_needs_a_token_or_an_explicit_opt_out() -> None:
    from collector.auth import check_bind
    from core.errors import ConfigurationError

    check_bind("127.0.0.1", None, insecure_no_auth=False)
    check_bind("::1", None, insecure_no_auth=False)
    check_bind("0.0.0.0", "a-token-of-16-chars", insecure_no_auth=False)
    check_bind("0.0.0.0", None, insecure_no_auth=True)
    with pytest.raises(ConfigurationError):
        check_bind("0.0.0.0", None, insecure_no_auth=False)
