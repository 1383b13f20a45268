"""SGLang request traces: a root span named ``Req <rid prefix>`` (``prefill Req …`` /
``decode Req …`` under disaggregation) whose trace ids are 64-bit, with per-thread spans
``<label> (host:… | pid:…)`` and stage slices (tokenize, request processing, prefill,
decode …) under them. Newer releases also put ``gen_ai.latency.*`` on the root span.

The root becomes the record (end to end = its duration unless reported); the slices become
stage fragments (see ``base.classify_stage``) that are merged within the reassembly window.
"""

from __future__ import annotations

import re
from typing import Final

from infersight.collector.mapping.base import Mapped, MappingContext, Timings, build_row, tokens
from infersight.collector.mapping.spans import SpanView, as_float
from infersight.core.records import Engine

_ROOT_NAME: Final = re.compile(r"^(?:[A-Za-z_]+ )?Req [0-9A-Za-z_-]+$")


def claims(span: SpanView) -> bool:
    name = span.name
    return "Req " in name and bool(_ROOT_NAME.match(name))  # the substring test first: cheaper


def timings(span: SpanView) -> Timings:
    def latency(name: str) -> float | None:
        return as_float(span.attr("gen_ai.latency." + name))

    return Timings(
        ttft_s=latency("time_to_first_token"),
        e2e_s=latency("e2e"),
        queue_s=latency("time_in_queue"),
        prefill_s=latency("time_in_model_prefill"),
        decode_s=latency("time_in_model_decode"),
        input_tokens=tokens(
            span, "gen_ai.usage.prompt_tokens", "gen_ai.usage.input_tokens", "prompt_tokens"
        ),
        output_tokens=tokens(
            span,
            "gen_ai.usage.completion_tokens",
            "gen_ai.usage.output_tokens",
            "completion_tokens",
        ),
        cached_tokens=tokens(span, "gen_ai.usage.cached_tokens", "cached_tokens"),
    )


def map_span(span: SpanView, ctx: MappingContext) -> Mapped:
    return build_row(span, Engine.SGLANG, timings(span), ctx)
