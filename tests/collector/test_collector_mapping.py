"""Span → record mapping, one table per engine, built from each engine's documented shape."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import NamedTuple

import pytest

from infersight.collector.assembly import merge_stages
from infersight.collector.mapping import MappingContext, Skipped, StageFragment, map_span
from infersight.collector.mapping.base import Timings, _is_measured_part, build_record
from infersight.collector.mapping.spans import STATUS_ERROR, parse_duration
from infersight.core.client import ClientRecord, TtftSource
from infersight.core.records import Engine, RequestRecord, Status
from tests.collector import collector_shapes as shapes
from tests.collector.collector_shapes import span

CTX = MappingContext(instance="node-1")


def as_record(outcome: object) -> RequestRecord:
    assert isinstance(outcome, RequestRecord), outcome
    return outcome


def test_a_vllm_v1_span_maps_every_latency_and_derives_tpot_from_decode_time() -> None:
    attrs = shapes.VLLM_V1
    record = as_record(map_span(span("llm_request", attrs, duration_s=2.3), CTX))
    assert record.engine is Engine.VLLM
    assert record.ttft_s == attrs["gen_ai.latency.time_to_first_token"]
    assert record.e2e_s == attrs["gen_ai.latency.e2e"]
    assert record.queue_s == attrs["gen_ai.latency.time_in_queue"]
    assert record.prefill_s == attrs["gen_ai.latency.time_in_model_prefill"]
    assert record.decode_s == attrs["gen_ai.latency.time_in_model_decode"]
    expected_tpot = attrs["gen_ai.latency.time_in_model_decode"] / (
        attrs["gen_ai.usage.completion_tokens"] - 1
    )
    assert record.tpot_s == pytest.approx(expected_tpot)
    assert record.input_tokens == attrs["gen_ai.usage.prompt_tokens"]
    assert record.output_tokens == attrs["gen_ai.usage.completion_tokens"]
    assert record.model == ""  # V1 carries no model name and nothing else is configured
    assert record.instance == "node-1"
    assert record.status is Status.OK


def test_a_vllm_v0_span_keeps_prefill_and_decode_unknown_and_decodes_json_finish_reasons() -> None:
    attrs = shapes.VLLM_V0
    record = as_record(map_span(span("llm_request", attrs), CTX))
    assert record.engine is Engine.VLLM
    assert record.model == attrs["gen_ai.response.model"]
    assert record.prefill_s is None
    assert record.decode_s is None
    assert record.finish_reason == "length"
    ttft, e2e = attrs["gen_ai.latency.time_to_first_token"], attrs["gen_ai.latency.e2e"]
    assert record.tpot_s == pytest.approx(
        (e2e - ttft) / (attrs["gen_ai.usage.completion_tokens"] - 1)
    )


@pytest.mark.parametrize(
    ("attrs", "engine", "tokens_in", "tokens_out"),
    [
        (shapes.GENAI_NEW, Engine.VLLM, "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
        (
            shapes.GENAI_OLD,
            Engine.GENERIC,
            "gen_ai.usage.prompt_tokens",
            "gen_ai.usage.completion_tokens",
        ),
    ],
    ids=["current names with gen_ai.provider.name", "older names with gen_ai.system"],
)
def test_genai_semantic_convention_spans_map_tokens_and_engine(
    attrs: dict[str, object], engine: Engine, tokens_in: str, tokens_out: str
) -> None:
    record = as_record(map_span(span("chat qwen", attrs, duration_s=0.8), CTX))
    assert record.engine is engine
    assert record.input_tokens == attrs[tokens_in]
    assert record.output_tokens == attrs[tokens_out]
    assert record.model == attrs["gen_ai.request.model"]
    assert record.e2e_s == pytest.approx(0.8)
    assert record.ttft_s is None


def as_client(outcome: object) -> ClientRecord:
    assert isinstance(outcome, ClientRecord), outcome
    return outcome


def test_a_genai_client_span_is_the_callers_view_a_client_record_never_a_server_one() -> None:
    view = span("chat", shapes.GENAI_OLD, kind=3, duration_s=0.8, service="chat-app")
    record = as_client(map_span(view, CTX))
    assert record.e2e_s == pytest.approx(0.8)
    assert record.model == "gpt-x"
    assert record.provider == "openai"
    assert (record.input_tokens, record.output_tokens) == (7, 3)
    assert record.ttft_s is None
    assert record.ttft_source is TtftSource.NONE
    assert record.service == "chat-app"
    assert record.source == "genai"


def test_openlits_client_ttft_is_the_clients_own_and_tenant_follows_the_server_rules() -> None:
    attrs = {
        "gen_ai.system": "openai",
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "Llama-3.1-8B-Instruct",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 40,
        "gen_ai.server.time_to_first_token": 0.31,
        "infersight.tenant": "acme",
    }
    view = span("chat Llama-3.1-8B-Instruct", attrs, kind=3, duration_s=1.5)
    view = view._replace(resource={**view.resource, "telemetry.sdk.name": "openlit"})
    record = as_client(map_span(view, CTX))
    assert record.ttft_s == pytest.approx(0.31)
    assert record.ttft_source is TtftSource.ATTRIBUTE
    assert record.source == "openlit"
    assert record.tenant == "acme"
    assert record.operation == "chat"


def test_an_openinference_llm_span_of_any_kind_is_a_client_record_with_its_first_chunk() -> None:
    attrs = {
        "openinference.span.kind": "LLM",
        "llm.system": "openai",
        "llm.model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "llm.token_count.prompt": 30,
        "llm.token_count.completion": 9,
    }
    view = span("ChatCompletion", attrs, kind=1, duration_s=2.0)
    view = view._replace(first_chunk_ns=view.start_ns + 250_000_000)
    record = as_client(map_span(view, CTX))
    assert record.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert (record.input_tokens, record.output_tokens) == (30, 9)
    assert record.ttft_s == pytest.approx(0.25)
    assert record.ttft_source is TtftSource.EVENT
    assert record.source == "openinference"


def test_a_client_span_whose_first_chunk_comes_after_its_end_is_refused() -> None:
    from infersight.collector.validation import check

    view = span("openai.chat", shapes.GENAI_OLD, kind=3, duration_s=0.5)
    view = view._replace(first_chunk_ns=view.start_ns + 900_000_000)
    outcome = check(map_span(view, CTX), view, view.start_ns / 1e9, None)
    assert isinstance(outcome, Skipped)
    assert outcome.rejected
    assert outcome.reason == "ttft_exceeds_e2e"


def test_a_client_span_without_genai_attributes_is_not_a_call() -> None:
    outcome = map_span(span("GET /health", {"http.request.method": "GET"}, kind=3), CTX)
    assert isinstance(outcome, Skipped)
    assert not outcome.rejected


def test_a_tgi_span_parses_rust_durations_and_leaves_ttft_unknown() -> None:
    attrs = shapes.TGI
    record = as_record(
        map_span(span("generate", attrs, service="text-generation-inference.router"), CTX)
    )
    assert record.engine is Engine.TGI
    assert record.ttft_s is None
    assert record.e2e_s == pytest.approx(1.512)
    assert record.preprocess_s == pytest.approx(1.2e-3)
    assert record.queue_s == pytest.approx(35.5e-6)
    assert record.tpot_s == pytest.approx(37.75e-3)
    assert record.input_tokens == int(attrs["prompt_tokens"])
    assert record.output_tokens == int(attrs["generated_tokens"])


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1.234ms", 1.234e-3),
        ("12µs", 12e-6),
        ("12μs", 12e-6),
        ("1.5s", 1.5),
        ("250ns", 250e-9),
        ("0.5", 0.5),
    ],
)
def test_rust_duration_strings_convert_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_an_sglang_trace_with_a_64_bit_id_reassembles_from_its_stage_slices_in_any_order() -> None:
    trace_id, root_id = shapes.new_ids(trace_bytes=8)
    assert trace_id.startswith("0" * 16)
    root = span(
        "Req 9f8e7d6c",
        {"rid": "9f8e7d6c5b4a"},
        duration_s=3.0,
        trace_id=trace_id,
        span_id=root_id,
        service="sglang",
    )
    thread = span(
        "Tokenizer (host:abcd1234 | pid:42)", {"pid": 42}, trace_id=trace_id, parent=root_id
    )
    # One after the other, as SGLang's threads run them.
    steps = [
        ("tokenize", 0.02),
        ("prefill_forward", 0.3),
        ("decode_loop", 1.0),
        ("decode_loop", 1.5),
    ]
    starts = [shapes.START_NS + int(sum(d for _, d in steps[:i]) * 1e9) for i in range(4)]
    slices = [
        span(name, {}, duration_s=d, trace_id=trace_id, parent=thread.span_id, start_ns=start)
        for (name, d), start in zip(steps, starts, strict=True)
    ]
    outcomes = [map_span(s, CTX) for s in reversed([root, thread, *slices])]
    records = [o for o in outcomes if isinstance(o, RequestRecord)]
    fragments = [o for o in outcomes if isinstance(o, StageFragment)]
    assert len(records) == 1
    assert len(fragments) == len(slices)
    merged = merge_stages(records[0], fragments)
    assert merged.engine is Engine.SGLANG
    assert merged.trace_id == trace_id
    assert merged.e2e_s == pytest.approx(3.0)
    assert merged.preprocess_s == pytest.approx(0.02)
    assert merged.prefill_s == pytest.approx(0.3)
    assert merged.decode_s == pytest.approx(2.5)


def test_newer_sglang_roots_carry_gen_ai_latencies_which_win_over_slices() -> None:
    attrs = {
        "gen_ai.latency.time_to_first_token": 0.4,
        "gen_ai.latency.time_in_model_decode": 2.0,
        "gen_ai.usage.prompt_tokens": 50,
        "gen_ai.usage.completion_tokens": 11,
    }
    record = as_record(map_span(span("decode Req 1234abcd", attrs, duration_s=2.5), CTX))
    fragment = StageFragment(record.trace_id, "00000000000000aa", "decode", 9.0)
    merged = merge_stages(record, [fragment])
    assert merged.decode_s == attrs["gen_ai.latency.time_in_model_decode"]
    assert merged.ttft_s == attrs["gen_ai.latency.time_to_first_token"]
    assert merged.tpot_s == pytest.approx(2.0 / 10)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"gen_ai.latency.time_to_first_token": math.nan}, "invalid_value"),
        ({"gen_ai.latency.e2e": -1.0}, "invalid_value"),
        ({"gen_ai.latency.time_in_queue": math.inf}, "invalid_value"),
        ({"gen_ai.usage.prompt_tokens": -5}, "invalid_value"),
    ],
    ids=["NaN TTFT", "negative e2e", "infinite queue time", "negative token count"],
)
def test_absurd_values_reject_the_span_with_a_reason(change: dict[str, float], reason: str) -> None:
    outcome = map_span(span("llm_request", {**shapes.VLLM_V1, **change}), CTX)
    assert isinstance(outcome, Skipped)
    assert outcome.rejected
    assert outcome.reason == reason


def test_a_span_without_ids_is_rejected_not_crashed_on() -> None:
    outcome = map_span(span("llm_request", shapes.VLLM_V1, trace_id=""), CTX)
    assert isinstance(outcome, Skipped)
    assert (outcome.reason, outcome.rejected) == ("invalid_id", True)


def test_an_llm_request_without_attributes_still_yields_its_end_to_end_time() -> None:
    record = as_record(map_span(span("llm_request", {}, duration_s=0.75), CTX))
    assert record.e2e_s == pytest.approx(0.75)
    assert record.ttft_s is None
    assert record.input_tokens is None


def test_a_span_that_is_no_request_is_skipped_as_unmapped() -> None:
    outcome = map_span(span("GET /health", {"http.method": "GET"}), CTX)
    assert isinstance(outcome, Skipped)
    assert (outcome.reason, outcome.rejected) == ("not_a_request", False)


def test_an_errored_span_records_its_error_type_and_status() -> None:
    attrs = {**shapes.VLLM_V1, "error.type": "TimeoutError"}
    record = as_record(map_span(span("llm_request", attrs, status=STATUS_ERROR), CTX))
    assert record.status is Status.ERROR
    assert record.error_type == "TimeoutError"


@pytest.mark.parametrize(
    ("attrs", "ctx", "expected"),
    [
        ({"gen_ai.request.model": "from-span"}, MappingContext("n", model="flag"), "from-span"),
        ({}, MappingContext("n", model="flag", service_models={"svc": "mapped"}), "flag"),
        ({}, MappingContext("n", service_models={"svc": "mapped"}), "mapped"),
        ({}, MappingContext("n", scraped_model=lambda: "scraped"), "scraped"),
    ],
    ids=["span attribute first", "then --model", "then service.name map", "then the scraped name"],
)
def test_model_attribution_order(attrs: dict[str, str], ctx: MappingContext, expected: str) -> None:
    record = as_record(map_span(span("llm_request", {**shapes.VLLM_V1, **attrs}), ctx))
    assert record.model == expected


def test_a_child_preprocess_span_of_a_vllm_trace_fills_the_stage() -> None:
    root = as_record(map_span(span("llm_request", shapes.VLLM_V1), CTX))
    child = map_span(
        span(
            "apply_chat_template", {}, duration_s=0.004, trace_id=root.trace_id, parent=root.span_id
        ),
        CTX,
    )
    assert isinstance(child, StageFragment)
    other_trace = StageFragment("1" * 32, "2" * 16, "postprocess", 1.0)
    merged = merge_stages(root, [child, other_trace])
    assert merged.preprocess_s == pytest.approx(0.004)
    assert merged.postprocess_s is None


def test_an_enclosing_gateway_span_contributes_only_its_own_overhead() -> None:
    gateway = span("api-gateway POST /v1/chat/completions", {}, duration_s=2.5, service="gateway")
    request = span(
        "llm_request",
        {**shapes.VLLM_V1},
        trace_id=gateway.trace_id,
        parent=gateway.span_id,
        service="vllm",
    )
    fragment = map_span(gateway, CTX)
    record = as_record(map_span(request, CTX))
    assert isinstance(fragment, StageFragment)
    merged = merge_stages(record, [fragment])
    assert merged.gateway_s == pytest.approx(2.5 - shapes.VLLM_V1["gen_ai.latency.e2e"])


def test_build_record_puts_every_value_in_the_field_of_its_name() -> None:
    # build_record passes the record's 25 fields by position, for speed: each must land
    # where the keyword of the same name would put it.
    timings = Timings(
        *(
            100 + i if name.endswith("_tokens") else 0.001 * (i + 1)
            for i, name in enumerate(Timings._fields)
        )
    )
    attrs = {
        "gen_ai.request.model": "the-model",
        "infersight.tenant": "the-tenant",
        "infersight.priority": "the-priority",
        "gen_ai.operation.name": "the-operation",
        "error.type": "the-error",
        "finish_reason": "the-finish",
    }
    view = span("anything", attrs, service="the-service")
    record = as_record(build_record(view, Engine.SGLANG, timings, CTX))
    expected = RequestRecord(
        trace_id=view.trace_id,
        span_id=view.span_id,
        start=datetime.fromtimestamp(shapes.START_NS / 1e9, tz=UTC),
        instance="node-1",
        service="the-service",
        engine=Engine.SGLANG,
        model="the-model",
        tenant="the-tenant",
        priority="the-priority",
        operation="the-operation",
        **{name: getattr(timings, name) for name in Timings._fields},
        status=Status.ERROR,
        error_type="the-error",
        finish_reason="the-finish",
    )
    assert record == expected


class _Renamed(NamedTuple):
    ttft_s: float | None = None
    time_to_first_token: float | None = None


class _Retyped(NamedTuple):
    ttft_s: float | None = None
    input_tokens: float | None = None


class _Reordered(NamedTuple):
    e2e_s: float | None = None
    ttft_s: float | None = None


class _Required(NamedTuple):
    ttft_s: float | None


@pytest.mark.parametrize("part", [_Renamed, _Retyped, _Reordered, _Required])
def test_timings_can_only_be_a_part_of_the_record_itself(part: type[tuple[object, ...]]) -> None:
    # Timings declares no field of its own: each is RequestRecord's, checked on import.
    assert _is_measured_part(Timings)
    assert not _is_measured_part(part)
