"""Spans that follow the OpenTelemetry GenAI semantic conventions, from any server.

Token counts come under the current names (``gen_ai.usage.input_tokens`` /
``output_tokens``) or the older ones (``prompt_tokens`` / ``completion_tokens``); the engine
is read from ``gen_ai.provider.name`` or the older ``gen_ai.system``. CLIENT spans are the
caller's view of a request the server reports itself: they become client records
(``collector.mapping.client``, dispatched first), never server records.
"""

from __future__ import annotations

from typing import Final

from infersight.collector.mapping.base import (
    Mapped,
    MappingContext,
    Skipped,
    Timings,
    build_row,
    tokens,
)
from infersight.collector.mapping.spans import SpanView, as_float, as_str
from infersight.core.records import Engine

KIND_CLIENT: Final = 3
_MARKERS: Final = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
)
_ENGINE_WORDS: Final = (
    ("vllm", Engine.VLLM),
    ("sglang", Engine.SGLANG),
    ("text-generation-inference", Engine.TGI),
    ("tgi", Engine.TGI),
    ("tensorrt", Engine.TRTLLM),
    ("trtllm", Engine.TRTLLM),
    ("trt-llm", Engine.TRTLLM),
    ("triton", Engine.TRTLLM),
)


def claims(span: SpanView) -> bool:
    return any(name in span.attributes for name in _MARKERS)


def engine_of(span: SpanView) -> Engine:
    provider = as_str(span.attr("gen_ai.provider.name", "gen_ai.system")).lower()
    hint = provider or span.service.lower()
    for word, engine in _ENGINE_WORDS:
        if word in hint:
            return engine
    return Engine.GENERIC


def timings(span: SpanView) -> Timings:
    return Timings(
        ttft_s=as_float(
            span.attr("gen_ai.server.time_to_first_token", "gen_ai.response.time_to_first_token")
        ),
        tpot_s=as_float(span.attr("gen_ai.server.time_per_output_token")),
        input_tokens=tokens(span, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
        output_tokens=tokens(span, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
        cached_tokens=tokens(span, "gen_ai.usage.cache_read.input_tokens"),
    )


def map_span(span: SpanView, ctx: MappingContext) -> Mapped:
    engine = engine_of(span)
    if span.kind == KIND_CLIENT:
        return Skipped("client_span", engine.value)
    return build_row(span, engine, timings(span), ctx)
