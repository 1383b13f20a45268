"""vLLM request spans (V1 and V0): one ``llm_request`` SERVER span per finished request with
``gen_ai.latency.*`` timings and ``gen_ai.usage.prompt_tokens`` / ``completion_tokens``.

V1 reports prefill and decode time; V0 reports scheduler / model-forward time instead, so its
prefill and decode stay unknown. Neither carries the model name (attribution falls back to
the sidecar's configuration).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from infersight.collector.mapping.base import Mapped, MappingContext, Timings, build_row
from infersight.collector.mapping.spans import AttrValue, SpanView, as_float, as_int
from infersight.core.records import Engine

SPAN_NAME: Final = "llm_request"
LATENCY_PREFIX: Final = "gen_ai.latency."
#: The timings vLLM reports, in seconds.
TTFT: Final = "gen_ai.latency.time_to_first_token"
E2E: Final = "gen_ai.latency.e2e"
QUEUE: Final = "gen_ai.latency.time_in_queue"
PREFILL: Final = "gen_ai.latency.time_in_model_prefill"
DECODE: Final = "gen_ai.latency.time_in_model_decode"
#: Token counts: the name vLLM sets, then the one read where it is absent.
PROMPT_TOKENS: Final = ("gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens")
OUTPUT_TOKENS: Final = ("gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens")
CACHED_TOKENS: Final = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cached_tokens")


def claims(span: SpanView) -> bool:
    return span.name == SPAN_NAME or span.has_prefix(LATENCY_PREFIX)


def timings(span: SpanView) -> Timings:
    get = span.attributes.get  # plain lookups, positional fields: this runs for every request
    return Timings(
        as_float(get(TTFT)),
        None,  # TPOT is derived
        as_float(get(E2E)),
        as_float(get(QUEUE)),
        as_float(get(PREFILL)),
        as_float(get(DECODE)),
        None,
        None,
        None,
        as_int(_first(get, *PROMPT_TOKENS)),
        as_int(_first(get, *OUTPUT_TOKENS)),
        as_int(_first(get, *CACHED_TOKENS)),
    )


def _first(get: Callable[[str], AttrValue], name: str, fallback: str) -> AttrValue:
    value = get(name)
    return get(fallback) if value is None else value


def map_span(span: SpanView, ctx: MappingContext) -> Mapped:
    return build_row(span, Engine.VLLM, timings(span), ctx)
