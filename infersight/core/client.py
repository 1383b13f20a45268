"""The client's view of one inference request: what the caller measured around its call.

A server record (``core.records.RequestRecord``) is the engine's account of a request; a
``ClientRecord`` is the caller's, from the CLIENT span an OpenTelemetry GenAI client
instrumentation wraps around the call (OpenLLMetry's ``opentelemetry-instrumentation-openai``,
OpenLIT, OpenInference). Its end to end time is the span's duration and its time to first token
the first streamed chunk as the client saw it. Both include what the engine cannot see (the
network, a gateway, the client's own queueing), so they are kept apart from the engine's
values, never merged into them: OpenLIT names its client-measured TTFT
``gen_ai.server.time_to_first_token``, and reading it as the server's would hide exactly the
gap this record exists to show (``core.gap``).

``(trace_id, span_id)`` is the natural key, as for server records: a replayed span is one call.
Model names are kept as the client sent them; they are compared with the server's through
``core.model_names`` when read, so that a changed alias table applies to what is stored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final, TypeVar

from infersight.core.errors import InvalidRecord
from infersight.core.records import (
    MAX_LABEL_LEN,
    Status,
    check_count,
    check_duration,
    check_ids,
    check_label,
    check_timestamp,
)

_E = TypeVar("_E", bound=StrEnum)


class TtftSource(StrEnum):
    """Where a client record's time to first token came from."""

    #: No TTFT: a call that did not stream, or an instrumentation that does not record it.
    NONE = ""
    #: A span attribute the instrumentation measured (OpenLIT's).
    ATTRIBUTE = "attribute"
    #: The first streamed-chunk event on the span, minus the span's start.
    EVENT = "event"


@dataclass(frozen=True, slots=True)
class ClientRecord:
    """One call as its client measured it; ``None`` for what the span did not carry."""

    trace_id: str
    span_id: str
    start: datetime
    #: The client's ``service.name``.
    service: str = ""
    #: Which instrumentation made the span: ``openllmetry``, ``openlit``, ``openinference``
    #: or ``genai`` (any other following the GenAI conventions).
    source: str = ""
    #: The provider the client called (``gen_ai.provider.name`` / ``gen_ai.system``).
    provider: str = ""
    model: str = ""
    tenant: str = ""
    operation: str = ""
    e2e_s: float | None = None
    ttft_s: float | None = None
    ttft_source: TtftSource = TtftSource.NONE
    input_tokens: int | None = None
    output_tokens: int | None = None
    status: Status = Status.OK
    error_type: str = ""

    def __post_init__(self) -> None:
        check_ids(self.trace_id, self.span_id)
        check_timestamp("start", self.start)
        for name in ("service", "source", "provider", "model", "tenant", "operation"):
            check_label(name, getattr(self, name))
        check_label("error_type", self.error_type)
        check_duration("e2e_s", self.e2e_s)
        check_duration("ttft_s", self.ttft_s)
        check_count("input_tokens", self.input_tokens)
        check_count("output_tokens", self.output_tokens)
        if not isinstance(self.status, Status):
            object.__setattr__(self, "status", _enum(Status, "status", self.status))
        if not isinstance(self.ttft_source, TtftSource):
            object.__setattr__(
                self, "ttft_source", _enum(TtftSource, "ttft_source", self.ttft_source)
            )
        if (self.ttft_s is None) != (self.ttft_source is TtftSource.NONE):
            raise InvalidRecord("ttft_source is given exactly when ttft_s is")

    @property
    def end(self) -> datetime | None:
        if self.e2e_s is None:
            return None
        return self.start + timedelta(seconds=self.e2e_s)


def _enum(kind: type[_E], name: str, value: object) -> _E:
    try:
        return kind(str(value))
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise InvalidRecord(
            f"{name} must be one of {allowed}", details={name: str(value)[:64]}
        ) from None


#: Column order used by the spool and the writer.
CLIENT_FIELDS: Final = tuple(f.name for f in fields(ClientRecord))

__all__ = ["CLIENT_FIELDS", "MAX_LABEL_LEN", "ClientRecord", "TtftSource"]
