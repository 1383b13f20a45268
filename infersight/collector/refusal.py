"""Why an OTLP export is refused, and the one answer each refusal gets on either receiver.

Every refusal is an error; ``ExportRefusal.of`` finds its kind (the most specific class first;
any other ``InfersightError`` is an undecodable body), and the kind carries everything the
receivers answer and count: the ``exports`` result label, the HTTP status, the gRPC code and
the seconds a client is asked to wait before retrying.

On HTTP a retry delay is a ``Retry-After`` header. On gRPC it is sent (as ``RetryInfo``
trailers) only with ``RESOURCE_EXHAUSTED``, the one code OTLP exporters retry only when the
server says when; ``UNAVAILABLE`` is retried by its code alone.

The HTTP-only refusals (media type, encoding, body timeout) never arise on gRPC, whose
messages are protobuf, uncompressed by then, and received whole; their gRPC code is the one
of any undecodable message.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

import grpc

from infersight.collector.admission import BUSY_RETRY_AFTER_S, Busy
from infersight.collector.body import BodyTimeout, UnsupportedEncoding, UnsupportedMediaType
from infersight.collector.decoding import DecoderFailed
from infersight.collector.metrics import CollectorMetrics
from infersight.core.errors import InfersightError, TooLarge, Unauthorized, Unavailable

#: Seconds a client is asked to wait after the spool refused its export.
RETRY_AFTER_S: Final = 5

_CODE = grpc.StatusCode


class ExportRefusal(Enum):
    """A way an export is refused: ``result`` (the ``exports`` label), ``http_status``,
    ``grpc_code`` and ``retry_after_s`` (``None``: no retry delay is given)."""

    UNAUTHORIZED = ("unauthorized", 401, _CODE.UNAUTHENTICATED, None)
    UNSUPPORTED_MEDIA_TYPE = ("unsupported_media_type", 415, _CODE.INVALID_ARGUMENT, None)
    UNSUPPORTED_ENCODING = ("unsupported_encoding", 415, _CODE.INVALID_ARGUMENT, None)
    TOO_LARGE = ("too_large", 413, _CODE.RESOURCE_EXHAUSTED, None)
    BUSY = ("busy", 429, _CODE.RESOURCE_EXHAUSTED, BUSY_RETRY_AFTER_S)
    TIMEOUT = ("timeout", 408, _CODE.INVALID_ARGUMENT, None)
    DECODER_FAILED = ("decoder_failed", 503, _CODE.UNAVAILABLE, BUSY_RETRY_AFTER_S)
    SPOOL_FULL = ("spool_full", 503, _CODE.UNAVAILABLE, RETRY_AFTER_S)
    UNDECODABLE = ("undecodable", 400, _CODE.INVALID_ARGUMENT, None)

    def __init__(
        self, result: str, http_status: int, grpc_code: grpc.StatusCode, retry_after_s: int | None
    ) -> None:
        self.result = result
        self.http_status = http_status
        self.grpc_code = grpc_code
        self.retry_after_s = retry_after_s

    @classmethod
    def of(cls, exc: InfersightError) -> ExportRefusal:
        """The refusal ``exc`` stands for."""
        return next((kind for error, kind in _BY_ERROR if isinstance(exc, error)), cls.UNDECODABLE)

    @property
    def grpc_retry_info(self) -> bool:
        """Whether the gRPC answer carries the retry delay (see the module's docstring)."""
        return self.grpc_code is _CODE.RESOURCE_EXHAUSTED and self.retry_after_s is not None

    def http_headers(self) -> dict[str, str] | None:
        """The HTTP answer's extra headers: ``Retry-After`` when a delay is given."""
        if self.retry_after_s is None:
            return None
        return {"Retry-After": str(self.retry_after_s)}

    def count(self, metrics: CollectorMetrics, transport: str, exc: InfersightError) -> None:
        """Count the refused export (``exports``) and why (``bodies_refused``: the error's
        own ``reason`` when it gives one, else the result)."""
        reason = exc.details.get("reason")
        metrics.exports.labels(transport, self.result).inc()
        metrics.bodies_refused.labels(
            transport, reason if isinstance(reason, str) else self.result
        ).inc()


#: The refusal of each error class, most specific first (``Busy`` and ``DecoderFailed`` are
#: ``Unavailable`` too; ``UnsupportedEncoding``, ``UnsupportedMediaType`` and ``BodyTimeout``
#: are ``InvalidInput``, which is otherwise undecodable).
_BY_ERROR: Final[tuple[tuple[type[InfersightError], ExportRefusal], ...]] = (
    (Unauthorized, ExportRefusal.UNAUTHORIZED),
    (UnsupportedMediaType, ExportRefusal.UNSUPPORTED_MEDIA_TYPE),
    (UnsupportedEncoding, ExportRefusal.UNSUPPORTED_ENCODING),
    (TooLarge, ExportRefusal.TOO_LARGE),
    (Busy, ExportRefusal.BUSY),
    (BodyTimeout, ExportRefusal.TIMEOUT),
    (DecoderFailed, ExportRefusal.DECODER_FAILED),
    (Unavailable, ExportRefusal.SPOOL_FULL),
)
