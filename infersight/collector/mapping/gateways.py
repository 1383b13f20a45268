"""Spans of gateways in front of engines: who a request is for, never a request of their own.

LiteLLM's proxy traces each call it routes (``litellm/integrations/opentelemetry.py``): a
``Received Proxy Server Request`` span (since v1.81 the call's attributes are set on it), or
a nested ``litellm_request`` span, and a ``raw_gen_ai_request`` span around the provider
call, from its tracer ``litellm``. They carry GenAI attributes (``gen_ai.request.model``,
``gen_ai.usage.*``), so the generic GenAI mapper would take them for an engine's request and
count every call twice, once at the gateway and once at the engine behind it. Here they are
a peer's spans: not a request, kept as a link (their place in the trace), and read for who
the trace's requests are for (``core.attribution``'s ``litellm`` preset, applied by the
ingestor: its ``metadata.user_api_key_*`` attributes).
"""

from __future__ import annotations

from typing import Final

from infersight.collector.mapping.base import Skipped
from infersight.collector.mapping.spans import SpanView

#: LiteLLM's tracer name (its ``OTEL_TRACER_NAME`` default) and its span names.
LITELLM_SCOPE: Final = "litellm"
LITELLM_SPANS: Final = frozenset(
    {"Received Proxy Server Request", "litellm_request", "raw_gen_ai_request"}
)
#: The key metadata LiteLLM's proxy sets on its spans (``metadata.<key>``).
LITELLM_METADATA: Final = "metadata.user_api_key_"
#: The engines' request span name, never a gateway's.
LLM_REQUEST: Final = "llm_request"
#: Why a gateway's span makes no record (``Skipped.reason``).
GATEWAY_SPAN: Final = "gateway_span"


def litellm_claims(span: SpanView) -> bool:
    """A span of LiteLLM's proxy: its tracer, one of its span names, or its key metadata.
    Never an engine's ``llm_request`` span (vLLM's, TensorRT-LLM's): the ingest path reads
    those on its own (``mapping.requests``), knowing no shape ahead of theirs claims one."""
    if span.name == LLM_REQUEST:
        return False
    if span.scope == LITELLM_SCOPE or span.name in LITELLM_SPANS:
        return True
    return any(key.startswith(LITELLM_METADATA) for key in span.attributes)


def litellm_span(span: SpanView) -> Skipped:
    return Skipped(GATEWAY_SPAN, "litellm")
