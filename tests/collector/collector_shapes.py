"""Span shapes of the engines, composed from their documented attribute names, for tests."""

from __future__ import annotations

import os
from typing import Any

from infersight.collector.mapping.spans import KIND_SERVER, SpanView

START_NS = 1_764_000_000_000_000_000  # 2025-11-24


def new_ids(trace_bytes: int = 16) -> tuple[str, str]:
    trace = os.urandom(trace_bytes).rjust(16, b"\0")
    return trace.hex(), os.urandom(8).hex()


def span(
    name: str,
    attrs: dict[str, Any],
    *,
    duration_s: float = 1.0,
    trace_id: str | None = None,
    span_id: str | None = None,
    parent: str = "",
    service: str = "svc",
    kind: int = KIND_SERVER,
    status: int = 0,
    start_ns: int = START_NS,
) -> SpanView:
    tid, sid = new_ids()
    return SpanView(
        trace_id=trace_id if trace_id is not None else tid,
        span_id=span_id if span_id is not None else sid,
        parent_span_id=parent,
        name=name,
        kind=kind,
        start_ns=start_ns,
        end_ns=start_ns + int(duration_s * 1e9),
        attributes=attrs,
        resource={"service.name": service},
        status_code=status,
    )


#: vLLM V1 ``llm_request`` (OutputProcessor.do_tracing): no model name.
VLLM_V1 = {
    "gen_ai.request.id": "cmpl-1",
    "gen_ai.request.top_p": 1.0,
    "gen_ai.request.max_tokens": 256,
    "gen_ai.request.temperature": 0.7,
    "gen_ai.request.n": 1,
    "gen_ai.usage.prompt_tokens": 120,
    "gen_ai.usage.completion_tokens": 41,
    "gen_ai.latency.time_in_queue": 0.05,
    "gen_ai.latency.time_to_first_token": 0.25,
    "gen_ai.latency.e2e": 2.25,
    "gen_ai.latency.time_in_model_prefill": 0.2,
    "gen_ai.latency.time_in_model_decode": 2.0,
    "gen_ai.latency.time_in_model_inference": 2.2,
}

#: vLLM V0 ``llm_request`` (LLMEngine.do_tracing): model name, scheduler / forward times.
VLLM_V0 = {
    "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
    "gen_ai.request.id": "cmpl-0",
    "gen_ai.request.temperature": 0.0,
    "gen_ai.request.top_p": 1.0,
    "gen_ai.request.max_tokens": 64,
    "gen_ai.request.best_of": 1,
    "gen_ai.request.n": 1,
    "gen_ai.usage.num_sequences": 1,
    "gen_ai.usage.prompt_tokens": 10,
    "gen_ai.usage.completion_tokens": 64,
    "gen_ai.latency.time_in_queue": 0.01,
    "gen_ai.latency.time_to_first_token": 0.03,
    "gen_ai.latency.e2e": 0.66,
    "gen_ai.latency.time_in_scheduler": 0.002,
    "gen_ai.latency.time_in_model_forward": 0.5,
    "gen_ai.latency.time_in_model_execute": 0.55,
    "gen_ai.response.finish_reasons": '["length"]',
}

#: OTel GenAI semantic conventions, current names.
GENAI_NEW = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "vllm",
    "gen_ai.request.model": "qwen2.5-7b",
    "gen_ai.usage.input_tokens": 300,
    "gen_ai.usage.output_tokens": 20,
    "gen_ai.response.finish_reasons": ("stop",),
}

#: OTel GenAI semantic conventions, older names.
GENAI_OLD = {
    "gen_ai.system": "openai",
    "gen_ai.request.model": "gpt-x",
    "gen_ai.usage.prompt_tokens": 7,
    "gen_ai.usage.completion_tokens": 3,
}

#: TGI router ``generate`` span: Rust Duration debug strings, counts as strings.
TGI = {
    "parameters": "GenerateParameters { .. }",
    "total_time": "1.512s",
    "validation_time": "1.2ms",
    "queue_time": "35.5µs",
    "inference_time": "1.51s",
    "time_per_token": "37.75ms",
    "seed": "None",
    "prompt_tokens": "17",
    "generated_tokens": "40",
}
