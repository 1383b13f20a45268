"""The OTLP/gRPC receiver (``TraceService/Export``) on its own port.

gRPC status equivalents of the HTTP answers (``collector.refusal`` maps each refusal):
INVALID_ARGUMENT (undecodable; over an entry limit is RESOURCE_EXHAUSTED), UNAVAILABLE when the
spool refuses, UNAUTHENTICATED for a bad token, and RESOURCE_EXHAUSTED with a
``google.rpc.RetryInfo`` (which OTLP exporters read as "retry after this delay") when too many
exports are in flight. The size cap is gRPC's receive
limit, which applies to the decompressed message. Decoding runs in the shared admission's
decode slots (``collector.admission``), and gRPC itself refuses calls beyond the admission's
places, so messages waiting in gRPC's own queue stay bounded too. Connections are bounded as on
the HTTP side (``GrpcLimits``): their number, the streams on each, the handshake time, and
their idle time and age. gRPC itself listens on a loopback port: the public port is
``collector.grpc_front``'s accept loop, which keeps silent sockets apart from the connection
cap and relays the rest (the connection policy is its doc).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from infersight.collector.admission import Admission
from infersight.collector.auth import authorized
from infersight.collector.grpc_front import GrpcFront
from infersight.collector.ingest import Ingested, Ingestor
from infersight.collector.otlp import PROTOBUF
from infersight.collector.peers import peer_host
from infersight.collector.refusal import ExportRefusal
from infersight.core.errors import InfersightError, InvalidInput, Unauthorized

ACK_TIMEOUT_S = 30.0


SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class _TraceService:
    """``export`` takes the raw request bytes (no deserializer is registered) so that an
    undecodable message is answered INVALID_ARGUMENT, as OTLP asks, rather than the
    INTERNAL that a failing generated deserializer would produce."""

    def __init__(
        self,
        ingestor: Ingestor,
        token: str | None,
        admission: Admission,
        peer_of: Callable[[str], str] = lambda peer: peer,
    ) -> None:
        self.ingestor = ingestor
        self.token = token
        self.admission = admission
        self.peer_of = peer_of  # the client's address behind the front (grpc_front)

    def _decode_and_ingest(self, body: bytes) -> Ingested:
        return self.ingestor.ingest_body(body, "identity", PROTOBUF)

    def _refuse(self, context: Any, exc: InfersightError) -> None:
        """Count the refusal and abort the call with its code (``context.abort`` raises)."""
        refusal = ExportRefusal.of(exc)
        refusal.count(self.ingestor.metrics, "grpc", exc)
        if refusal.grpc_retry_info:
            context.set_trailing_metadata(_retry_info(refusal, exc.message))
        context.abort(refusal.grpc_code, exc.message)

    def export(self, body: bytes, context: Any) -> ExportTraceServiceResponse:
        metrics = self.ingestor.metrics
        try:
            metadata = dict(context.invocation_metadata())
            if not authorized(metadata.get("authorization"), self.token):
                raise Unauthorized("missing or wrong bearer token")
            with self.admission.admit(len(body)):
                ingested = self.admission.run(self._decode_and_ingest, body)
            ingested.durable.result(timeout=ACK_TIMEOUT_S)
        except InfersightError as exc:
            self._refuse(context, exc)
        self.ingestor.acknowledged(ingested, "grpc", peer_host(self.peer_of(context.peer() or "")))
        response = ExportTraceServiceResponse()
        if ingested.rejected:
            metrics.exports.labels("grpc", "partial").inc()
            response.partial_success.CopyFrom(
                ExportTracePartialSuccess(
                    rejected_spans=ingested.rejected, error_message=ingested.message
                )
            )
        else:
            metrics.exports.labels("grpc", "ok").inc()
        return response


def _retry_info(refusal: ExportRefusal, message: str) -> tuple[tuple[str, bytes], ...]:
    """The retry delay as trailers: a ``google.rpc.Status`` carrying ``RetryInfo`` (gRPC's
    status details, read by the OpenTelemetry Collector's exporters) and the bare
    ``RetryInfo`` under the key the OpenTelemetry Python exporter reads."""
    info = error_details_pb2.RetryInfo(retry_delay=Duration(seconds=refusal.retry_after_s))
    detail = AnyMessage()
    detail.Pack(info)
    code, _ = refusal.grpc_code.value
    status = status_pb2.Status(code=code, message=message, details=[detail])
    return (
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", info.SerializeToString()),
    )


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    """Connection bounds of the gRPC receiver, the counterpart of the HTTP receiver's
    (``collector.http_receiver.RECEIVER_LIMITS``): an exporter holds one connection, so 128
    is generous."""

    #: Connections relayed to gRPC at most (``collector.grpc_front``: at the cap the idle
    #: longest is closed for a newcomer, never one in a call).
    max_connections: int = 128
    #: Connections that have not sent the HTTP/2 preface yet, held apart from the cap (the
    #: oldest is closed for a newcomer): silent sockets cannot take the relayed places.
    pending_connections: int = 256
    #: Concurrent streams (calls) on one connection (HTTP/2 ``MAX_CONCURRENT_STREAMS``).
    max_streams_per_connection: int = 16
    #: Time a new connection has to send the HTTP/2 preface (``grpc_front``) and complete
    #: the handshake (gRPC's default: 120 s), so connections that send nothing do not stay.
    handshake_timeout_s: float = 10.0
    #: A connection without calls for this long is closed (GOAWAY; exporters reconnect).
    idle_s: float = 300.0
    #: A connection is closed after this long, calls in progress given ``age_grace_s`` more
    #: (the counterpart of the HTTP body deadline for a call sent slowly).
    max_age_s: float = 1800.0
    age_grace_s: float = 30.0
    #: At the cap, a connection without a byte either way for this long may be closed for a
    #: newcomer that sent the preface (never one in a call: ``grpc_front.CALL_S``).
    evict_idle_after_s: float = 1.0

    def __post_init__(self) -> None:
        if min(self.max_connections, self.max_streams_per_connection) < 1 or (
            self.pending_connections < 1
        ):
            raise InvalidInput("gRPC connection limits must be positive")
        if min(self.handshake_timeout_s, self.idle_s, self.max_age_s, self.age_grace_s) <= 0:
            raise InvalidInput("gRPC connection timeouts must be positive")
        if self.evict_idle_after_s < 0:
            raise InvalidInput("evict_idle_after_s must not be negative")

    def options(self) -> list[tuple[str, int]]:
        return [
            # The front relays at most max_connections; gRPC's own cap is only a backstop.
            ("grpc.max_allowed_incoming_connections", self.max_connections + 8),
            ("grpc.max_concurrent_streams", self.max_streams_per_connection),
            ("grpc.server_handshake_timeout_ms", int(self.handshake_timeout_s * 1000)),
            ("grpc.max_connection_idle_ms", int(self.idle_s * 1000)),
            ("grpc.max_connection_age_ms", int(self.max_age_s * 1000)),
            ("grpc.max_connection_age_grace_ms", int(self.age_grace_s * 1000)),
        ]


def _bind_error(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound, as the operating system says it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return "gRPC could not bind it"


class GrpcServer:
    def __init__(
        self,
        ingestor: Ingestor,
        host: str,
        port: int,
        token: str | None = None,
        workers: int = 4,
        admission: Admission | None = None,
        limits: GrpcLimits | None = None,
    ) -> None:
        cap = ingestor.limits.max_body_bytes
        limits = limits or GrpcLimits()
        admission = admission or Admission()
        places = admission.config.slots + admission.config.waiting
        options = [("grpc.max_receive_message_length", cap), *limits.options()]
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otlp-grpc"),
            options=options,
            # Calls beyond these are refused by gRPC before their messages queue up.
            maximum_concurrent_rpcs=max(workers, places) + 1,
        )
        service = _TraceService(ingestor, token, admission, self._peer_of)
        export = grpc.unary_unary_rpc_method_handler(
            service.export, response_serializer=ExportTraceServiceResponse.SerializeToString
        )
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Export": export}),)
        )
        # gRPC listens on loopback only; the front takes the public address (module doc).
        upstream = self._server.add_insecure_port("127.0.0.1:0")
        try:
            self._front = GrpcFront(
                host,
                port,
                upstream,
                max_connections=limits.max_connections,
                pending=limits.pending_connections,
                preface_s=limits.handshake_timeout_s,
                idle_evict_s=limits.evict_idle_after_s,
            )
        except OSError as exc:
            # asyncio words its bind error itself ("error while attempting to bind on …"):
            # the operating system's own words for the errno, as the HTTP receiver says them.
            why = os.strerror(exc.errno) if exc.errno else _bind_error(host, port)
            raise InvalidInput(f"cannot listen on {host}:{port}: {why}") from None
        self.port = self._front.port
        self.host = host
        #: gRPC's own loopback port behind the front (for the overhead benchmark).
        self.upstream_port = upstream

    def _peer_of(self, grpc_peer: str) -> str:
        return self._front.peer_of(grpc_peer)

    def front_evictions(self) -> int:
        """Connections the front closed for a newcomer so far."""
        return self._front.evicted

    def front_streams_open(self) -> int:
        """Calls in progress on the connections the front relays, as it reads them."""
        return self._front.open_streams()

    def start(self) -> GrpcServer:
        self._server.start()
        self._front.start()
        return self

    def stop(self, grace: float = 2.0) -> None:
        self._front.stop()
        self._server.stop(grace).wait()
