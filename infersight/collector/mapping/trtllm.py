"""TensorRT-LLM request spans (``trtllm-serve`` / the LLM API with ``otlp_traces_endpoint``).

When a request finishes, TensorRT-LLM makes one ``llm_request`` SERVER span in the caller's
trace, in vLLM's vocabulary: ``gen_ai.latency.time_to_first_token`` / ``e2e`` /
``time_in_queue`` (and ``kv_cache_transfer_time`` when served disaggregated),
``gen_ai.usage.prompt_tokens`` / ``completion_tokens``, ``gen_ai.request.id``. It reports no
prefill or decode time. What tells it from vLLM's span of the same shape is the tracer it
comes from: TensorRT-LLM's is named ``trt.llm`` (the span's instrumentation scope), vLLM's
``vllm.llm_engine``. This mapper is dispatched before vLLM's.
"""

from __future__ import annotations

from typing import Final

from infersight.collector.mapping import vllm
from infersight.collector.mapping.base import Mapped, MappingContext, Timings, build_row
from infersight.collector.mapping.spans import SpanView, as_float
from infersight.core.records import Engine

#: The instrumentation scope of TensorRT-LLM's tracer (``tracing.init_tracer("trt.llm", …)``).
SCOPE: Final = "trt.llm"


def claims(span: SpanView) -> bool:
    return span.scope == SCOPE and vllm.claims(span)


#: The time a disaggregated generation server waited for the request's KV cache.
KV_TRANSFER: Final = "gen_ai.latency.kv_cache_transfer_time"


def timings(span: SpanView) -> Timings:
    """vLLM's attribute names (the ones TensorRT-LLM does not set stay ``None``), and the KV
    cache's transfer time where it was served disaggregated."""
    kv = as_float(span.attributes.get(KV_TRANSFER))
    return vllm.timings(span)._replace(kv_transfer_s=kv)


def map_span(span: SpanView, ctx: MappingContext) -> Mapped:
    return build_row(span, Engine.TRTLLM, timings(span), ctx)
