"""Text Generation Inference (TGI) router spans: ``generate`` / ``generate_stream`` /
``chat_completions`` spans recorded from Rust, whose timings are ``Duration`` debug strings
(``total_time = "1.234ms"``, ``validation_time``, ``queue_time``, ``inference_time``,
``time_per_token``) and whose token counts are strings (``prompt_tokens``,
``generated_tokens``).

TGI reports no time to first token: it stays ``None``, never zero.
"""

from __future__ import annotations

from typing import Final

from infersight.collector.mapping.base import Mapped, MappingContext, Timings, build_row, tokens
from infersight.collector.mapping.spans import SpanView, parse_duration
from infersight.core.records import Engine

_TIMING_ATTRS: Final = ("total_time", "inference_time")


def claims(span: SpanView) -> bool:
    get = span.attributes.get  # unrolled: this runs for every span received
    return isinstance(get(_TIMING_ATTRS[0]), str) and isinstance(get(_TIMING_ATTRS[1]), str)


def timings(span: SpanView) -> Timings:
    return Timings(
        ttft_s=None,
        tpot_s=parse_duration(span.attr("time_per_token")),
        e2e_s=parse_duration(span.attr("total_time")),
        queue_s=parse_duration(span.attr("queue_time")),
        preprocess_s=parse_duration(span.attr("validation_time")),
        input_tokens=tokens(span, "prompt_tokens"),
        output_tokens=tokens(span, "generated_tokens"),
    )


def map_span(span: SpanView, ctx: MappingContext) -> Mapped:
    return build_row(span, Engine.TGI, timings(span), ctx)
