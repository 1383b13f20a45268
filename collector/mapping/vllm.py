"""vLLM request spans (V1 and V0): one ``llm_request`` SERVER span per finished request with
``gen_ai.latency.*`` timings and ``gen_ai.usage.prompt_tokens`` / ``completion_tokens``.

V1 reports prefill and decode time; V0 reports scheduler / model-forward time instead, so its
prefill and decode stay unknown. Neither carries the model name (attribution falls back to
the sidecar's configuration).
"""

from __future__ import annotations

from typing import Final

from collector.mapping.base import MappingContext, Outcome, Timings, build_record, tokens
from collector.mapping.spans import SpanView, as_float
from core.records import Engine

SPAN_NAME: Final = "llm_request"
LATENCY_PREFIX: Final = "gen_ai.latency."


def claims(span: SpanView) -> bool:
    return span.name == SPAN_NAME or span.has_prefix(LATENCY_PREFIX)


def timings(span: SpanView) -> Timings:
    get = span.attributes.get  # plain lookups: this runs for every request span
    return Timings(
        ttft_s=as_float(get("gen_ai.latency.time_to_first_token")),
        e2e_s=as_float(get("gen_ai.latency.e2e")),
        queue_s=as_float(get("gen_ai.latency.time_in_queue")),
        prefill_s=as_float(get("gen_ai.latency.time_in_model_prefill")),
        decode_s=as_float(get("gen_ai.latency.time_in_model_decode")),
        input_tokens=tokens(span, "gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens"),
        output_tokens=tokens(span, "gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens"),
        cached_tokens=tokens(
            span, "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cached_tokens"
        ),
    )


def map_span(span: SpanView, ctx: MappingContext) -> Outcome:
    return build_record(span, Engine.VLLM, timings(span), ctx)
