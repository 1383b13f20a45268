"""Request bodies under a cap measured after decompression."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator

import pytest

from infersight.collector.body import UnsupportedEncoding, read_capped
from infersight.core.errors import InvalidInput, TooLarge

PAYLOAD = bytes(range(256)) * 64


async def chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def read(data: bytes, encoding: str, cap: int = 1 << 20) -> bytes:
    return bytes(asyncio.run(read_capped(chunks(data), encoding, cap)))


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
    from infersight.collector.auth import check_bind
    from infersight.core.errors import ConfigurationError

    check_bind("127.0.0.1", None, insecure_no_auth=False)
    check_bind("::1", None, insecure_no_auth=False)
    check_bind("0.0.0.0", "a-token-of-16-chars", insecure_no_auth=False)
    check_bind("0.0.0.0", None, insecure_no_auth=True)
    with pytest.raises(ConfigurationError):
        check_bind("0.0.0.0", None, insecure_no_auth=False)


def test_a_body_of_the_most_members_allowed_decodes_and_one_more_is_refused() -> None:
    from infersight.collector.body import MAX_MEMBERS, inflate

    parts = [PAYLOAD[i::MAX_MEMBERS] for i in range(MAX_MEMBERS)]
    body = b"".join(gzip.compress(part) for part in parts)
    assert inflate(body, "gzip", 1 << 20) == b"".join(parts)
    with pytest.raises(InvalidInput, match="members") as caught:
        inflate(body + gzip.compress(b""), "gzip", 1 << 20)
    assert caught.value.details["reason"] == "too_many_members"


def test_members_split_across_pieces_decode_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from infersight.collector import body as body_module

    members = b"".join(gzip.compress(PAYLOAD[i : i + 3000]) for i in range(0, len(PAYLOAD), 3000))
    monkeypatch.setattr(body_module, "PIECE_BYTES", 7)  # pieces end inside every member
    assert body_module.inflate(members, "gzip", 1 << 20) == PAYLOAD


def test_a_body_inflating_far_beyond_its_compressed_size_is_refused() -> None:
    from infersight.collector.body import inflate

    dense = gzip.compress(b"\x0a\x00" * (2 << 20))  # 4 MiB from about 4 KB
    with pytest.raises(TooLarge) as caught:
        inflate(dense, "gzip", 20 << 20)
    assert caught.value.details["reason"] == "inflation_ratio"
    small = gzip.compress(bytes(1 << 19))  # half a MiB of zeros: under the ratio's floor
    assert inflate(small, "gzip", 20 << 20) == bytes(1 << 19)


@pytest.mark.parametrize(
    ("body", "containers"),
    [
        (b'{"a":"{{{{"}', 1),
        (b'{"a":"\\\\"}{{{', 4),  # an escaped backslash ends the string
        (b'["\\"[[["]', 1),  # an escaped quote does not
        (b'["\\\\",[[]]', 3),
    ],
)
def test_json_brackets_inside_strings_do_not_count(body: bytes, containers: int) -> None:
    from infersight.collector.prescan import check_json

    check_json(body, containers)
    with pytest.raises(TooLarge):
        check_json(body, containers - 1)


def test_a_run_of_escaped_quotes_is_counted_in_one_pass() -> None:
    from infersight.collector.prescan import check_json

    # A pattern that retries from every quote would take minutes here.
    body = b"[" * 1001 + b'"' + b'\\"' * 1_000_000
    with pytest.raises(TooLarge):
        check_json(body, 1000)
