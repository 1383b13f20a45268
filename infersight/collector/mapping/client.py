"""Client spans of the OpenTelemetry GenAI client instrumentations → ``ClientRecord``.

What a caller's instrumentation wraps around one call to a model: OpenLLMetry's
``opentelemetry-instrumentation-openai`` (``openai.chat``, kind CLIENT, ``gen_ai.*`` attributes
and one ``gen_ai.content.completion.chunk`` event per streamed chunk), OpenLIT (kind CLIENT, the
TTFT it measured at the client under ``gen_ai.server.time_to_first_token``), OpenInference
(``openinference.span.kind`` ``LLM``, of whatever span kind; ``llm.model_name``,
``llm.token_count.prompt`` / ``completion`` and a ``First Token Stream Event``).

These are the client's numbers: they become a client record, never a server record, and no
value is merged into one (``core.client``). The span is also kept as a trace link by the
ingestor, so that stage spans below it are still told apart from the server's own.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from infersight.collector.mapping.base import TENANT_ATTRS, Skipped, outcome_fields
from infersight.collector.mapping.spans import KIND_CLIENT, SpanView, as_float, as_int, as_str
from infersight.core.client import ClientRecord, TtftSource
from infersight.core.errors import InvalidRecord
from infersight.core.records import MAX_LABEL_LEN

#: Attributes that make a CLIENT span a GenAI call (the GenAI conventions, current and older).
GENAI_MARKERS: Final = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
)
OPENINFERENCE_KIND: Final = "openinference.span.kind"
MODEL_ATTRS: Final = (
    "gen_ai.response.model",
    "gen_ai.request.model",
    "llm.response.model_name",
    "llm.model_name",
    "llm.request.model_name",
)
PROVIDER_ATTRS: Final = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
INPUT_ATTRS: Final = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
)
OUTPUT_ATTRS: Final = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)
#: Every attribute a client token count is read from (``collector.validation``).
TOKEN_ATTRS: Final = INPUT_ATTRS + OUTPUT_ATTRS
#: A TTFT the client measured itself (OpenLIT's name says "server", the value is not).
TTFT_ATTRS: Final = ("gen_ai.server.time_to_first_token", "gen_ai.response.time_to_first_token")
OPERATION_ATTRS: Final = ("gen_ai.operation.name", "llm.request.type")
#: The instrumentation scopes of OpenLLMetry's ``opentelemetry-instrumentation-openai`` (for
#: the ``openai`` client's 0.x and 1.x APIs); the OpenTelemetry contrib's own is ``openai_v2``.
OPENLLMETRY: Final = frozenset(
    {"opentelemetry.instrumentation.openai.v0", "opentelemetry.instrumentation.openai.v1"}
)


def claims(span: SpanView) -> bool:
    """A GenAI CLIENT span, or an OpenInference LLM span."""
    attributes = span.attributes
    kind = attributes.get(OPENINFERENCE_KIND)
    if kind is not None and as_str(kind).upper() == "LLM":
        return True
    return span.kind == KIND_CLIENT and any(name in attributes for name in GENAI_MARKERS)


def source_of(span: SpanView) -> str:
    """Which instrumentation made the span, from its attributes, scope and SDK."""
    if OPENINFERENCE_KIND in span.attributes:
        return "openinference"
    sdk = as_str(span.resource.get("telemetry.sdk.name")).lower()
    if sdk == "openlit" or span.scope.lower().startswith("openlit"):
        return "openlit"
    scope = span.scope.lower()
    if "llm.request.type" in span.attributes or "traceloop" in scope or scope in OPENLLMETRY:
        return "openllmetry"
    return "genai"


def _ttft(span: SpanView) -> tuple[float | None, TtftSource]:
    measured = as_float(span.attr(*TTFT_ATTRS))
    if measured is not None:
        return measured, TtftSource.ATTRIBUTE
    if span.first_chunk_ns and span.start_ns and span.first_chunk_ns >= span.start_ns:
        return (span.first_chunk_ns - span.start_ns) / 1e9, TtftSource.EVENT
    return None, TtftSource.NONE


def map_span(span: SpanView) -> ClientRecord | Skipped:
    """The client record, or ``Skipped(rejected=True)`` with the reason it is unusable."""
    if not span.trace_id or not span.span_id:
        return Skipped("invalid_id", "client", rejected=True)
    if span.start_ns <= 0:
        return Skipped("invalid_time", "client", rejected=True)
    status, error_type, _ = outcome_fields(span)
    ttft, ttft_source = _ttft(span)
    try:
        return ClientRecord(
            trace_id=span.trace_id,
            span_id=span.span_id,
            start=datetime.fromtimestamp(span.start_ns / 1e9, tz=UTC),
            service=span.service[:MAX_LABEL_LEN],
            source=source_of(span),
            provider=span.label(PROVIDER_ATTRS),
            model=span.label(MODEL_ATTRS),
            tenant=span.label(TENANT_ATTRS),
            operation=span.label(OPERATION_ATTRS),
            e2e_s=span.duration_s,
            ttft_s=ttft,
            ttft_source=ttft_source,
            input_tokens=as_int(span.attr(*INPUT_ATTRS)),
            output_tokens=as_int(span.attr(*OUTPUT_ATTRS)),
            status=status,
            error_type=error_type,
        )
    except (InvalidRecord, ValueError, OverflowError, OSError) as exc:
        return Skipped("invalid_value", "client", rejected=True, detail=str(exc)[:200])
