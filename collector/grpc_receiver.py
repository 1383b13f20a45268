"""The OTLP/gRPC receiver (``TraceService/Export``) on its own port.

gRPC status equivalents of the HTTP answers: INVALID_ARGUMENT (undecodable, too many spans
is RESOURCE_EXHAUSTED), UNAVAILABLE when the spool refuses, UNAUTHENTICATED for a bad token.
The size cap is gRPC's receive limit, which applies to the decompressed message.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from collector.auth import authorized
from collector.ingest import Ingestor
from collector.otlp import parse_protobuf
from core.errors import InfersightError, TooLarge, Unavailable

ACK_TIMEOUT_S = 30.0


SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class _TraceService:
    """``export`` takes the raw request bytes (no deserializer is registered) so that an
    undecodable message is answered INVALID_ARGUMENT, as OTLP asks, rather than the
    INTERNAL that a failing generated deserializer would produce."""

    def __init__(self, ingestor: Ingestor, token: str | None) -> None:
        self.ingestor = ingestor
        self.token = token

    def export(self, body: bytes, context: Any) -> ExportTraceServiceResponse:
        metrics = self.ingestor.metrics
        metadata = dict(context.invocation_metadata())
        if not authorized(metadata.get("authorization"), self.token):
            metrics.exports.labels("grpc", "unauthorized").inc()
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        try:
            ingested = self.ingestor.ingest(parse_protobuf(body))
            ingested.durable.result(timeout=ACK_TIMEOUT_S)
        except TooLarge as exc:
            metrics.exports.labels("grpc", "too_large").inc()
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, exc.message)
        except Unavailable as exc:
            metrics.exports.labels("grpc", "spool_full").inc()
            context.abort(grpc.StatusCode.UNAVAILABLE, exc.message)
        except InfersightError as exc:
            metrics.exports.labels("grpc", "undecodable").inc()
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.message)
        self.ingestor.acknowledged(ingested)
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


class GrpcServer:
    def __init__(
        self, ingestor: Ingestor, host: str, port: int, token: str | None = None, workers: int = 4
    ) -> None:
        cap = ingestor.limits.max_body_bytes
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otlp-grpc"),
            options=[("grpc.max_receive_message_length", cap)],
        )
        service = _TraceService(ingestor, token)
        export = grpc.unary_unary_rpc_method_handler(
            service.export, response_serializer=ExportTraceServiceResponse.SerializeToString
        )
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {"Export": export}),)
        )
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.port = self._server.add_insecure_port(address)
        self.host = host

    def start(self) -> GrpcServer:
        self._server.start()
        return self

    def stop(self, grace: float = 2.0) -> None:
        self._server.stop(grace).wait()
