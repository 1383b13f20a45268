"""Connection bounds of the gRPC receiver (``GrpcLimits``): a cap on connections, a
handshake deadline, and a stream cap per connection advertised in HTTP/2 SETTINGS."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable

import pytest

from infersight.collector.grpc_receiver import GrpcLimits
from infersight.core.errors import InvalidInput
from tests.collector.harness import Receiver, encoded, vllm_spans
from tests.collector.test_collector_hostile import grpc_export

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS = 0x4
#: A client's connection preface, its (empty) SETTINGS and the ACK of the server's SETTINGS:
#: the HTTP/2 handshake complete.
HANDSHAKE = PREFACE + bytes(3) + bytes([SETTINGS, 0]) + bytes(4) + bytes(3) + bytes([SETTINGS, 1])
HANDSHAKE += bytes(4)
MAX_CONCURRENT_STREAMS = 0x3


#: How long a test waits for the server to close a connection: far beyond the limits the
#: tests set (immediate, 0.5 s), even on a loaded host, and still below what closes one
#: without them (gRPC's own 120 s handshake deadline).
CLOSE_WAIT_S = 60.0


def connect(receiver: Receiver) -> socket.socket:
    return socket.create_connection(("127.0.0.1", receiver.grpc.port), timeout=CLOSE_WAIT_S)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes the connection (read until EOF or a reset)."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_connections_beyond_the_cap_are_closed_as_they_open(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(grpc_limits=GrpcLimits(max_connections=2))
    held = [connect(receiver), connect(receiver)]
    for sock in held:
        sock.sendall(PREFACE + struct.pack(">I", 0)[1:] + bytes([SETTINGS, 0]) + bytes(4))
    extra = connect(receiver)
    # It completes its handshake too, so only the cap can close it within CLOSE_WAIT_S (the
    # handshake deadline, 10 s, would close a silent one anyway).
    with contextlib.suppress(OSError):  # already closed
        extra.sendall(HANDSHAKE)
    try:
        assert closed_by_server(extra)
    finally:
        extra.close()
        for sock in held:
            sock.close()
    # Once they are gone, exports are served again (the quota is given back as they close).
    for _ in range(100):
        if grpc_export(receiver, encoded(vllm_spans(1))) is None:
            break
    else:
        pytest.fail("the gRPC receiver did not serve after its connections closed")


def test_a_connection_that_never_completes_its_handshake_is_closed(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(grpc_limits=GrpcLimits(handshake_timeout_s=0.5))
    silent = connect(receiver)  # gRPC's default deadline is 120 s: recv would time out
    try:
        assert closed_by_server(silent)
    finally:
        silent.close()
    assert grpc_export(receiver, encoded(vllm_spans(1))) is None


def test_the_stream_cap_per_connection_is_advertised(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(grpc_limits=GrpcLimits(max_streams_per_connection=5))
    with connect(receiver) as sock:
        sock.sendall(PREFACE + struct.pack(">I", 0)[1:] + bytes([SETTINGS, 0]) + bytes(4))
        header = b""
        while len(header) < 9:
            header += sock.recv(9 - len(header))
        length, kind = int.from_bytes(header[:3], "big"), header[3]
        assert kind == SETTINGS
        payload = b""
        while len(payload) < length:
            payload += sock.recv(length - len(payload))
    settings = dict(struct.iter_unpack(">HI", payload))
    assert settings[MAX_CONCURRENT_STREAMS] == 5


def test_limits_are_checked() -> None:
    with pytest.raises(InvalidInput, match="positive"):
        GrpcLimits(max_connections=0)
    with pytest.raises(InvalidInput, match="positive"):
        GrpcLimits(handshake_timeout_s=0)
