"""A broad, deterministic corpus of OTLP exports and what the ingest pipeline made of each,
for the golden test of the ingest path (``test_collector_ingest_golden``, issue 35).

Every span shape a mapper knows (vLLM V0 / V1, TensorRT-LLM, SGLang roots, thread spans and
slices, TGI, the GenAI conventions, client instrumentations, llm-d's P/D proxy, stage slices,
plain links), each attribute any mapper or rule reads given every kind of value (well-formed,
numeric strings, absurd numbers, NaN, wrong types, arrays, key-value lists, oversized, empty),
span-level variants (ids, times, kinds, status, events, resources, duplicated and excess
attributes), several mapping contexts, limits and accept windows, and exports refused as a
whole. Each case goes through the functions a decoder process runs (``ingest.decode_body``
then ``ingest.prepare``), as protobuf and as OTLP/JSON; ``outcome`` is what it became, as
plain JSON: every spool entry byte for byte, the tallies, or the error that refused it.

``make_ingest_golden.py`` writes the expected outcomes with the code of a given checkout.
This module imports only what every checkout since the ingest path was written has.
"""

from __future__ import annotations

import base64
import math
import pickle
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

#: "Now" for every case (2026-12-06 09:00 UTC) and the start of most spans, about 3 s
#: before (to the nanosecond, as spans are timed).
NOW_NS = 1_796_547_600 * 10**9
START_NS = NOW_NS - 3 * 10**9 + 123_456_789
S = 10**9
SERVER, INTERNAL, CLIENT = 2, 1, 3

#: Values an attribute may carry: ``(name, AnyValue fields)``.
VALUES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("absent", {}),
    ("empty_any", {"__empty__": True}),
    ("str_num", {"string_value": "0.25"}),
    ("str_int", {"string_value": "12"}),
    ("str_padded", {"string_value": " 12 "}),
    ("str_float_int", {"string_value": "3.0"}),
    ("str_frac", {"string_value": "1.5"}),
    ("str_word", {"string_value": "abc"}),
    ("str_empty", {"string_value": ""}),
    ("str_nan", {"string_value": "nan"}),
    ("str_inf", {"string_value": "inf"}),
    ("str_neg", {"string_value": "-1"}),
    ("str_exp", {"string_value": "1e3"}),
    ("str_underscore", {"string_value": "1_000"}),
    ("str_ms", {"string_value": "12ms"}),
    ("str_us", {"string_value": "35.5µs"}),
    ("str_s", {"string_value": "1.5s"}),
    ("str_json_list", {"string_value": '["length"]'}),
    ("str_json_empty", {"string_value": "[]"}),
    ("str_json_num", {"string_value": "[1]"}),
    ("str_json_bad", {"string_value": '["x"'}),
    ("str_abort", {"string_value": "abort"}),
    ("str_upper_llm", {"string_value": "llm"}),
    ("str_label_long", {"string_value": "x" * 300}),
    ("str_too_big", {"string_value": "y" * 5000}),
    ("str_unicode", {"string_value": "ünïcødé-模型"}),
    ("int_zero", {"int_value": 0}),
    ("int_one", {"int_value": 1}),
    ("int_neg", {"int_value": -1}),
    ("int_big", {"int_value": 10**12}),
    ("int_max", {"int_value": 2**63 - 1}),
    ("int_min", {"int_value": -(2**63)}),
    ("dbl_zero", {"double_value": 0.0}),
    ("dbl_negzero", {"double_value": -0.0}),
    ("dbl_small", {"double_value": 0.25}),
    ("dbl_frac", {"double_value": 1.5}),
    ("dbl_int", {"double_value": 3.0}),
    ("dbl_huge", {"double_value": 1e308}),
    ("dbl_week", {"double_value": 8e5}),
    ("dbl_nan", {"double_value": math.nan}),
    ("dbl_inf", {"double_value": math.inf}),
    ("dbl_neginf", {"double_value": -math.inf}),
    ("dbl_neg", {"double_value": -1e-9}),
    ("bool_true", {"bool_value": True}),
    ("bool_false", {"bool_value": False}),
    ("bytes", {"bytes_value": b"\x00\xff"}),
    ("bytes_empty", {"bytes_value": b""}),
    ("arr_empty", {"array_value": ()}),
    ("arr_str", {"array_value": ({"string_value": "stop"},)}),
    ("arr_strs", {"array_value": ({"string_value": "a"}, {"string_value": "b"})}),
    ("arr_int", {"array_value": ({"int_value": 1}, {"int_value": 2})}),
    ("arr_nested", {"array_value": ({"array_value": ({"string_value": "x"},)},)}),
    ("arr_too_big", {"array_value": tuple({"string_value": "z" * 1000} for _ in range(5))}),
    ("kvlist", {"kvlist_value": (("k", {"string_value": "v"}),)}),
)

#: Every attribute a mapper or a rule reads, by the base shape it is varied on.
ENGINE_ATTRS = (
    "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e", "gen_ai.latency.time_in_queue",
    "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode",
    "gen_ai.latency.kv_cache_transfer_time", "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.input_tokens", "gen_ai.usage.completion_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cached_tokens", "prompt_tokens",
    "completion_tokens", "generated_tokens", "cached_tokens", "gen_ai.response.model",
    "gen_ai.request.model", "model", "model_id", "infersight.tenant", "tenant", "tenant.id",
    "infersight.priority", "gen_ai.request.priority", "priority", "gen_ai.operation.name",
    "gen_ai.request.id", "error.type", "gen_ai.response.finish_reasons", "finish_reason",
    "openinference.span.kind", "gen_ai.provider.name", "gen_ai.system",
    "llm_d.pd_proxy.prefill_target", "total_time", "inference_time",
)  # fmt: skip
TGI_ATTRS = (
    "total_time", "inference_time", "time_per_token", "queue_time", "validation_time",
    "prompt_tokens", "generated_tokens",
)  # fmt: skip
GENAI_ATTRS = (
    "gen_ai.server.time_to_first_token", "gen_ai.response.time_to_first_token",
    "gen_ai.server.time_per_output_token", "gen_ai.provider.name", "gen_ai.system",
    "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens", "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.operation.name",
)  # fmt: skip
CLIENT_ATTRS = (
    "openinference.span.kind", "gen_ai.response.model", "gen_ai.request.model",
    "llm.response.model_name", "llm.model_name", "llm.request.model_name",
    "gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system",
    "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt",
    "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
    "llm.token_count.completion", "gen_ai.server.time_to_first_token",
    "gen_ai.response.time_to_first_token", "gen_ai.operation.name", "llm.request.type",
    "infersight.tenant", "error.type", "gen_ai.response.finish_reasons",
)  # fmt: skip
SGLANG_ATTRS = (
    "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e", "gen_ai.latency.time_in_queue",
    "gen_ai.usage.prompt_tokens", "prompt_tokens", "gen_ai.usage.completion_tokens",
    "completion_tokens", "gen_ai.usage.cached_tokens", "cached_tokens",
)  # fmt: skip
PD_ATTRS = ("llm_d.pd_proxy.prefill_target", "llm_d.pd_proxy.connector", "gen_ai.request.model")
RESOURCE_ATTRS = ("service.name", "telemetry.sdk.name")

VLLM_V1: dict[str, Any] = {
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
VLLM_V0: dict[str, Any] = {
    "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
    "gen_ai.request.id": "cmpl-0",
    "gen_ai.usage.prompt_tokens": 10,
    "gen_ai.usage.completion_tokens": 64,
    "gen_ai.latency.time_in_queue": 0.01,
    "gen_ai.latency.time_to_first_token": 0.03,
    "gen_ai.latency.e2e": 0.66,
    "gen_ai.latency.time_in_scheduler": 0.002,
    "gen_ai.latency.time_in_model_forward": 0.5,
    "gen_ai.response.finish_reasons": '["length"]',
}
GENAI: dict[str, Any] = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "vllm",
    "gen_ai.request.model": "qwen2.5-7b",
    "gen_ai.usage.input_tokens": 300,
    "gen_ai.usage.output_tokens": 20,
    "gen_ai.response.finish_reasons": ("stop",),
}
TGI: dict[str, Any] = {
    "parameters": "GenerateParameters { .. }",
    "total_time": "1.512s",
    "validation_time": "1.2ms",
    "queue_time": "35.5µs",
    "inference_time": "1.51s",
    "time_per_token": "37.75ms",
    "prompt_tokens": "17",
    "generated_tokens": "40",
}
CLIENT_SPAN: dict[str, Any] = {
    "llm.request.type": "chat",
    "gen_ai.system": "openai",
    "gen_ai.request.model": "Llama-3.1-8B-Instruct",
    "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
    "gen_ai.usage.prompt_tokens": 30,
    "gen_ai.usage.completion_tokens": 12,
}
OPENINFERENCE: dict[str, Any] = {
    "openinference.span.kind": "LLM",
    "llm.model_name": "gpt-4o-mini",
    "llm.provider": "openai",
    "llm.token_count.prompt": 11,
    "llm.token_count.completion": 5,
}
SGLANG_ROOT: dict[str, Any] = {
    "gen_ai.latency.time_to_first_token": 0.1,
    "gen_ai.latency.e2e": 1.0,
    "gen_ai.usage.prompt_tokens": 50,
    "gen_ai.usage.completion_tokens": 10,
}


def any_value(spec: dict[str, Any]) -> AnyValue:
    value = AnyValue()
    for kind, item in spec.items():
        if kind == "__empty__":
            continue
        if kind == "array_value":
            value.array_value.SetInParent()
            for each in item:
                value.array_value.values.append(any_value(each))
        elif kind == "kvlist_value":
            value.kvlist_value.SetInParent()
            for key, each in item:
                value.kvlist_value.values.append(KeyValue(key=key, value=any_value(each)))
        else:
            setattr(value, kind, item)
    return value


def spec_of(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool_value": value}
    if isinstance(value, int):
        return {"int_value": value}
    if isinstance(value, float):
        return {"double_value": value}
    if isinstance(value, tuple):
        return {"array_value": tuple(spec_of(v) for v in value)}
    if isinstance(value, bytes):
        return {"bytes_value": value}
    return {"string_value": value}


Attrs = list[tuple[str, dict[str, Any]]]


def attrs_of(plain: dict[str, Any]) -> Attrs:
    return [(k, spec_of(v)) for k, v in plain.items()]


def varied(base: dict[str, Any], name: str, spec: dict[str, Any] | None) -> Attrs:
    """``base`` with ``name`` given ``spec`` (``None``: removed)."""
    out = [(k, v) for k, v in attrs_of(base) if k != name]
    if spec is not None:
        out.append((name, spec))
    return out


@dataclass
class SpanSpec:
    name: str
    attrs: Attrs
    kind: int = SERVER
    start_ns: int = START_NS
    end_ns: int = START_NS + int(2.25 * S)
    trace_id: bytes | None = None
    span_id: bytes | None = None
    parent: bytes = b""
    status: int = 0
    status_message: str = ""
    events: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class ResourceSpec:
    attrs: Attrs
    scope: str
    spans: list[SpanSpec]
    #: The scope given this many times, each with the same spans.
    scopes: int = 1


@dataclass
class Case:
    """One export, and how it is ingested."""

    name: str
    resources: list[ResourceSpec]
    context: str = "plain"
    limits: str = "default"
    accept: bool = True
    #: A body given as it is (hostile bytes) instead of built from ``resources``.
    raw: bytes | None = None


class Ids:
    """Deterministic ids, so that outcomes can be compared byte for byte."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def trace(self, size: int = 16) -> bytes:
        return self.rng.randbytes(size).rjust(16, b"\0")

    def span(self) -> bytes:
        return self.rng.randbytes(8)


def build(case: Case, ids: Ids) -> bytes:
    if case.raw is not None:
        return case.raw
    message = ExportTraceServiceRequest()
    for res in case.resources:
        rs = ResourceSpans()
        rs.resource.SetInParent()
        for key, spec in res.attrs:
            rs.resource.attributes.append(KeyValue(key=key, value=any_value(spec)))
        scope = ScopeSpans()
        scope.scope.name = res.scope
        for s in res.spans:
            span = Span(
                trace_id=s.trace_id if s.trace_id is not None else ids.trace(),
                span_id=s.span_id if s.span_id is not None else ids.span(),
                parent_span_id=s.parent, name=s.name, kind=s.kind,  # type: ignore[arg-type]
                start_time_unix_nano=s.start_ns, end_time_unix_nano=s.end_ns,
                status=Status(code=s.status, message=s.status_message),  # type: ignore[arg-type]
                events=[Span.Event(name=n, time_unix_nano=t) for n, t in s.events],
            )  # fmt: skip
            for key, spec in s.attrs:
                span.attributes.append(KeyValue(key=key, value=any_value(spec)))
            scope.spans.append(span)
        for _ in range(res.scopes):
            rs.scope_spans.append(scope)
        message.resource_spans.append(rs)
    return message.SerializeToString()


def as_json(body: bytes) -> bytes:
    """The same export in OTLP/JSON (hex ids, enums as numbers)."""
    import json

    document = json_format.MessageToDict(
        ExportTraceServiceRequest.FromString(body), use_integers_for_enums=True
    )
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def service(name: str = "vllm", extra: Attrs | None = None) -> Attrs:
    return [
        ("telemetry.sdk.language", {"string_value": "python"}),
        ("service.name", {"string_value": name}),
        *(extra or []),
    ]


def one(name: str, spans: list[SpanSpec], svc: str = "vllm", scope: str = "vllm.llm_engine",
        **options: Any) -> Case:  # fmt: skip
    return Case(name, [ResourceSpec(service(svc), scope, spans)], **options)


def attribute_cases() -> Iterator[Case]:
    """Each attribute any mapper reads, given each kind of value, on each shape reading it."""
    bases: list[tuple[str, str, str, str, int, dict[str, Any], tuple[str, ...]]] = [
        ("vllm_v1", "llm_request", "vllm", "vllm.llm_engine", SERVER, VLLM_V1, ENGINE_ATTRS),
        ("vllm_v0", "llm_request", "vllm", "vllm.llm_engine", SERVER, VLLM_V0, ENGINE_ATTRS[:12]),
        ("trtllm", "llm_request", "trtllm", "trt.llm", SERVER, VLLM_V1, ENGINE_ATTRS[:6]),
        ("tgi", "generate", "text-generation-inference.router", "router", SERVER, TGI,
         TGI_ATTRS),
        ("genai", "chat qwen", "gateway", "genai", SERVER, GENAI, GENAI_ATTRS),
        ("client", "openai.chat", "chat-app", "opentelemetry.instrumentation.openai.v1",
         CLIENT, CLIENT_SPAN, CLIENT_ATTRS),
        ("openinference", "ChatCompletion", "chat-app", "openinference", INTERNAL,
         OPENINFERENCE, CLIENT_ATTRS[:12]),
        ("sglang", "Req 1a2b3c4d", "sglang", "sglang", SERVER, SGLANG_ROOT, SGLANG_ATTRS),
        ("pd_prefill", "prefill", "llm-d", "llm-d", INTERNAL,
         {"llm_d.pd_proxy.connector": "nixlv2"}, PD_ATTRS),
    ]  # fmt: skip
    for base_name, span_name, svc, scope, kind, base, names in bases:
        for attr in names:
            spans = [
                SpanSpec(span_name, varied(base, attr, None if v == "absent" else spec),
                         kind=kind, parent=b"\x01" * 8 if base_name == "pd_prefill" else b"")
                for v, spec in VALUES
            ]  # fmt: skip
            yield one(f"attr/{base_name}/{attr}", spans, svc, scope)
    for attr in RESOURCE_ATTRS:
        resources = [
            ResourceSpec(varied({"telemetry.sdk.name": "opentelemetry"}, attr,
                                None if v == "absent" else spec),
                         "vllm.llm_engine", [SpanSpec("llm_request", attrs_of(VLLM_V1))])
            for v, spec in VALUES
        ]  # fmt: skip
        yield Case(f"resource/{attr}", resources)


def span_cases() -> Iterator[Case]:
    v1 = attrs_of(VLLM_V1)
    e2e = int(2.25 * S)
    yield one("ids", [
        SpanSpec("llm_request", v1, trace_id=b""),
        SpanSpec("llm_request", v1, trace_id=b"\0" * 16),
        SpanSpec("llm_request", v1, trace_id=b"\1" * 8),
        SpanSpec("llm_request", v1, trace_id=b"\1" * 17),
        SpanSpec("llm_request", v1, span_id=b""),
        SpanSpec("llm_request", v1, span_id=b"\0" * 8),
        SpanSpec("llm_request", v1, span_id=b"\1" * 7),
        SpanSpec("llm_request", v1, parent=b"\0" * 8),
        SpanSpec("llm_request", v1, parent=b"\2" * 8),
        SpanSpec("llm_request", v1, parent=b"\2" * 3),
        SpanSpec("llm_request", v1, trace_id=b"\0" * 8 + b"\7" * 8),
    ])  # fmt: skip
    times = [
        (0, e2e), (1, e2e), (START_NS, START_NS), (START_NS, START_NS - 1), (START_NS, 0),
        (NOW_NS - 13 * 86_400 * S, NOW_NS - 13 * 86_400 * S + e2e),
        (NOW_NS - 15 * 86_400 * S, NOW_NS - 15 * 86_400 * S + e2e),
        (NOW_NS + 299 * S, NOW_NS + 302 * S), (NOW_NS + 301 * S, NOW_NS + 303 * S),
        (946_684_799 * S, 946_684_801 * S), (2**64 - 2, 2**64 - 1),
        (7_258_118_400 * S, 7_258_118_401 * S), (START_NS, START_NS + 8 * 86_400 * S),
    ]  # fmt: skip
    for base_name, name, base in (("vllm", "llm_request", VLLM_V1), ("tgi", "generate", TGI),
                                  ("genai", "chat", GENAI), ("client", "openai.chat", CLIENT_SPAN),
                                  ("sglang", "Req 0a0b", SGLANG_ROOT)):  # fmt: skip
        kind = CLIENT if base_name == "client" else SERVER
        spans = [SpanSpec(name, attrs_of(base), kind=kind, start_ns=a, end_ns=b) for a, b in times]
        spans += [
            SpanSpec(name, attrs_of(base), kind=k, status=st, status_message=msg)
            for k in (0, 1, 2, 3, 4, 5)
            for st, msg in ((0, ""), (1, ""), (2, "boom"), (2, ""))
        ]
        yield one(f"times_kinds/{base_name}", spans, "svc-" + base_name, "scope")
        spans_ctx = [SpanSpec(name, attrs_of(base), kind=kind) for _ in range(3)]
        for context in CONTEXTS:
            yield one(f"context/{base_name}/{context}", spans_ctx, "vllm", "scope",
                      context=context)  # fmt: skip
        yield one(f"no_accept/{base_name}", [SpanSpec(name, attrs_of(base), kind=kind,
                  start_ns=a, end_ns=b) for a, b in times], accept=False)  # fmt: skip
    # Starts to the nanosecond, halfway between microseconds and at the ends of the range
    # a record accepts, with the accept window off.
    rng = random.Random(7)
    starts = [START_NS - rng.randrange(10**12) for _ in range(300)]
    starts += [START_NS - rng.randrange(10**9) // 1000 * 1000 + 500 for _ in range(100)]
    for edge in (946_684_800, 7_258_118_400):
        starts += [edge * S + d for d in (-1000, -501, -500, -499, -1, 0, 1, 499, 500, 501)]
        starts += [edge * S + d * S for d in (-2, -1, 1, 2)]
    yield one("start_precision", [
        SpanSpec("llm_request", v1, start_ns=start, end_ns=start + e2e) for start in starts
    ], accept=False)  # fmt: skip
    # Client TTFT from chunk events.
    events = [
        [("gen_ai.content.completion.chunk", START_NS + S // 4),
         ("gen_ai.content.completion.chunk", START_NS + S // 2)],
        [("llm.content.completion.chunk", START_NS + S // 3)],
        [("First Token Stream Event", START_NS + S // 5), ("other", START_NS + 1)],
        [("gen_ai.content.completion.chunk", START_NS - S)],
        [("gen_ai.content.completion.chunk", 0)],
        [("unrelated", START_NS + 5)],
        [],
    ]  # fmt: skip
    yield one("client_events", [
        SpanSpec("openai.chat", attrs_of(CLIENT_SPAN), kind=CLIENT, events=e) for e in events
    ] + [
        SpanSpec("openai.chat", attrs_of({**CLIENT_SPAN,
                 "gen_ai.server.time_to_first_token": 0.3}), kind=CLIENT, events=e)
        for e in events
    ], "chat-app", "opentelemetry.instrumentation.openai.v1")  # fmt: skip
    for scope, sdk in (
        ("openlit.otel", ""),
        ("x", "openlit"),
        ("traceloop.sdk", ""),
        ("opentelemetry.instrumentation.openai.v0", ""),
        ("openai_v2", ""),
    ):
        yield Case(f"client_source/{scope}/{sdk}", [ResourceSpec(
            service("chat-app", [("telemetry.sdk.name", {"string_value": sdk})] if sdk else []),
            scope, [SpanSpec("openai.chat", attrs_of({"gen_ai.system": "openai",
                             "gen_ai.request.model": "m"}), kind=CLIENT)])])  # fmt: skip
    # Names: request shapes, stage slices, links.
    names = [
        "llm_request", "Req 1234", "prefill Req ab_c-9", "decode Req x", "Req ", "Req a b",
        "tokenize", "detokenize", "chat_template", "gateway", "Gateway route", "queue wait",
        "prefill", "decode", "prefill forward", "decode loop", "postprocess", "post_process",
        "Scheduler (host:1.2.3.4 | pid:7)", "TokenizerManager (host:x | pid:1) tokenize",
        "forward_request", "llm_d.pd_proxy.request", "llm_d.pd_proxy.prefill",
        "llm_d.pd_proxy.decode", "POST /v1/chat/completions", "", "generate", "chat qwen",
    ]  # fmt: skip
    for parent in (b"", b"\3" * 8):
        for attrs_name, attrs in (
            ("none", []),
            ("pd", [("llm_d.pd_proxy.connector", {"string_value": "nixl"})]),
            ("model", [("gen_ai.request.model", {"string_value": "m"})]),
        ):
            spans = [SpanSpec(n, attrs, kind=INTERNAL, parent=parent) for n in names]
            yield one(f"names/{attrs_name}/{'child' if parent else 'root'}", spans, "svc",
                      "scope")  # fmt: skip
    yield one("names/trtllm_scope", [SpanSpec("llm_request", v1), SpanSpec("other", v1)],
              "trt", "trt.llm")  # fmt: skip
    # Duplicated keys (the last one kept, unless it is dropped), excess and long keys.
    yield one("duplicates", [
        SpanSpec("llm_request", [*v1, ("gen_ai.latency.e2e", {"double_value": 3.0})]),
        SpanSpec("llm_request", [*v1, ("gen_ai.latency.e2e", {"string_value": "q" * 5000})]),
        SpanSpec("llm_request", [*v1, ("gen_ai.usage.prompt_tokens", {"int_value": 7}),
                                 ("gen_ai.usage.prompt_tokens", {"double_value": 1.5})]),
        SpanSpec("llm_request", [("gen_ai.latency.e2e", {"double_value": 1.0})] * 3 + v1),
        SpanSpec("llm_request", [*v1, ("k" * 5000, {"int_value": 1})]),
        SpanSpec("llm_request", [*v1, ("", {"int_value": 1})]),
        SpanSpec("llm_request", [(f"pad.{i}", {"int_value": i}) for i in range(130)] + v1),
        SpanSpec("llm_request", v1 + [(f"pad.{i}", {"int_value": i}) for i in range(130)]),
    ])  # fmt: skip
    yield Case("many_resources", [
        ResourceSpec(service(f"svc-{i % 7}"), f"scope-{i}",
                     [SpanSpec("llm_request", v1), SpanSpec("tokenize", [], parent=b"\4" * 8)])
        for i in range(40)
    ] + [ResourceSpec([], "", []), ResourceSpec(service("empty"), "", [])])  # fmt: skip
    yield one("resource_attrs_excess", [SpanSpec("llm_request", v1)], limits="small")
    for limits in ("small", "tiny"):
        yield one(f"limits/{limits}", [
            SpanSpec("llm_request", v1),
            SpanSpec("llm_request", attrs_of(VLLM_V0)),
            SpanSpec("generate", attrs_of(TGI)),
            SpanSpec("openai.chat", attrs_of(CLIENT_SPAN), kind=CLIENT),
            SpanSpec("x" * 100, v1),
        ], limits=limits)  # fmt: skip


def export_cases() -> Iterator[Case]:
    """Exports refused as a whole, or at the edges of the limits."""
    v1 = attrs_of(VLLM_V1)
    one_span = [SpanSpec("llm_request", v1)]
    yield one("too_many_spans", [SpanSpec("llm_request", v1)] * 9, limits="small")
    yield one("spans_at_limit", [SpanSpec("llm_request", v1)] * 8, limits="small")
    yield Case("too_many_resources", [ResourceSpec(service(), "s", one_span)] * 5,
               limits="small")  # fmt: skip
    yield Case(
        "too_many_scopes", [ResourceSpec(service(), "s", one_span, scopes=5)], limits="small"
    )
    yield Case("empty", [])
    body = build(one("x", one_span), Ids(1))
    yield Case("truncated", [], raw=body[:-3])
    yield Case("garbage", [], raw=b"\xff\xff\xff\xff")
    yield Case("tags_packed", [], raw=b"\x0a\x00" * 5000, limits="small")
    yield Case("tags_packed_default", [], raw=b"\x0a\x00" * 300_000)
    yield Case("tag_bytes_in_strings", [], raw=b"\x0a" * 100 + body)
    nested = b""
    for _ in range(120):
        nested = b"\x0a" + bytes([len(nested)]) + nested if len(nested) < 128 else nested
    yield Case("nested", [], raw=nested)
    yield Case("empty_resources", [], raw=b"\x0a\x00" * 20, limits="small")


def shape_cases() -> Iterator[Case]:
    """Exports as servers send them: vLLM's parallel sampling (``n`` > 1: one span per
    sequence, one request id), speculative decoding and LoRA adapters, SGLang's trace of a
    request, TensorRT-LLM served disaggregated, llm-d's P/D proxy above a decode instance,
    TGI, client instrumentations: each under every mapping context."""
    v1 = {**VLLM_V1, "gen_ai.response.finish_reasons": '["stop"]'}
    parent = b"\x05" * 8
    spans = [
        *(
            SpanSpec(
                "llm_request",
                attrs_of(
                    {
                        **v1,
                        "gen_ai.request.id": "cmpl-par-3",
                        "gen_ai.request.n": 1,
                        "gen_ai.usage.completion_tokens": 30 + i,
                    }
                ),
            )
            for i in range(3)
        ),
        SpanSpec(
            "llm_request",
            attrs_of(
                {
                    **v1,
                    "vllm.spec_decode.num_draft_tokens": 120,
                    "vllm.spec_decode.num_accepted_tokens": 87,
                    "vllm.spec_decode.method": "eagle",
                }
            ),
        ),
        *(
            SpanSpec("llm_request", attrs_of({**v1, "gen_ai.response.model": name}))
            for name in ("sql-lora", "gpt-x", "qwen2.5-7b", "meta-llama/Llama-3.1-8B-Instruct")
        ),
        SpanSpec(
            "llm_request",
            attrs_of(
                {
                    **v1,
                    "infersight.tenant": "team-a",
                    "gen_ai.request.priority": "high",
                    "gen_ai.operation.name": "chat",
                    "error.type": "",
                    "gen_ai.usage.cached_tokens": 64,
                    "gen_ai.usage.cache_read.input_tokens": 32,
                }
            ),
        ),
        SpanSpec("llm_request", attrs_of({**v1, "gen_ai.response.finish_reasons": '["abort"]'})),
        SpanSpec("llm_request", attrs_of(v1), status=2, status_message="cancelled"),
        SpanSpec(
            "llm_request",
            attrs_of(
                {
                    **v1,
                    "gen_ai.request.id": "é" * 300,
                    "tenant": "t" * 200,
                    "gen_ai.response.model": "m" * 150,
                }
            ),
        ),
        SpanSpec(
            "llm_request",
            attrs_of(
                {
                    **v1,
                    "gen_ai.usage.prompt_tokens": 20_000,
                    "gen_ai.usage.completion_tokens": 3_000_000,
                }
            ),
        ),
        SpanSpec("llm_request", attrs_of(v1), parent=parent),
    ]
    sglang_trace = b"\0" * 8 + b"\x09" * 8
    sglang_root = b"\x0a" * 8
    thread = b"\x0b" * 8
    sglang = [
        SpanSpec("Req 7f3a", attrs_of(SGLANG_ROOT), trace_id=sglang_trace, span_id=sglang_root),
        SpanSpec(
            "Scheduler (host:10.0.0.1 | pid:77)",
            [],
            kind=INTERNAL,
            trace_id=sglang_trace,
            span_id=thread,
            parent=sglang_root,
        ),
        *(
            SpanSpec(stage, [], kind=INTERNAL, trace_id=sglang_trace, parent=thread)
            for stage in ("tokenize", "prefill forward", "decode loop", "detokenize")
        ),
    ]
    pd_trace, proxy, decode_leg = b"\x0c" * 16, b"\x0d" * 8, b"\x0e" * 8
    pd = [
        SpanSpec(
            "forward_request",
            attrs_of({"llm_d.pd_proxy.disaggregation_used": True}),
            trace_id=pd_trace,
            span_id=proxy,
        ),
        SpanSpec(
            "prefill",
            attrs_of({"llm_d.pd_proxy.prefill_target": "10.0.0.2:8000"}),
            kind=INTERNAL,
            trace_id=pd_trace,
            parent=proxy,
        ),
        SpanSpec(
            "decode",
            attrs_of({"llm_d.pd_proxy.connector": "nixlv2"}),
            kind=INTERNAL,
            trace_id=pd_trace,
            span_id=decode_leg,
            parent=proxy,
        ),
        SpanSpec("llm_request", attrs_of(v1), trace_id=pd_trace, parent=decode_leg),
    ]
    chunks = [("gen_ai.content.completion.chunk", START_NS + S // 4)]
    resources = [
        ResourceSpec(service("vllm"), "vllm.llm_engine", spans),
        ResourceSpec(service("sglang"), "sglang", sglang),
        ResourceSpec(
            service("trtllm"),
            "trt.llm",
            [
                SpanSpec(
                    "llm_request", attrs_of({**v1, "gen_ai.latency.kv_cache_transfer_time": 0.012})
                )
            ],
        ),
        ResourceSpec(service("llm-d-routing-sidecar"), "llm-d", pd),
        ResourceSpec(
            service("text-generation-inference.router"),
            "router",
            [SpanSpec("generate", attrs_of(TGI))],
        ),
        ResourceSpec(
            service("chat-app"),
            "opentelemetry.instrumentation.openai.v1",
            [
                SpanSpec("openai.chat", attrs_of(CLIENT_SPAN), kind=CLIENT, events=chunks),
                SpanSpec("ChatCompletion", attrs_of(OPENINFERENCE), kind=INTERNAL),
            ],
        ),
        ResourceSpec(service("gateway"), "genai", [SpanSpec("chat qwen", attrs_of(GENAI))]),
    ]
    for context in CONTEXTS:
        yield Case(f"shapes/{context}", resources, context=context)
    # An export of more bytes than ``max_messages``: its tag bytes are counted first.
    yield one("shapes/large", [SpanSpec("llm_request", attrs_of(v1)) for _ in range(1000)])


def _varint(number: int) -> bytes:
    out = b""
    while True:
        low, number = number & 0x7F, number >> 7
        if not number:
            return out + bytes([low])
        out += bytes([low | 0x80])


def _ld(field_number: int, payload: bytes) -> bytes:
    return bytes([field_number << 3 | 2]) + _varint(len(payload)) + payload


def _wire_kv(key: bytes, *values: bytes) -> bytes:
    return _ld(1, key) + b"".join(_ld(2, value) for value in values)


def _wire_double(value: float) -> bytes:
    import struct

    return b"\x21" + struct.pack("<d", value)


def _wire_span(attributes: list[bytes], ids: Ids, extra: bytes = b"") -> bytes:
    """A vLLM V1 ``llm_request`` span, its attributes given as encoded ``KeyValue``s."""
    import struct

    head = _ld(1, ids.trace()) + _ld(2, ids.span()) + _ld(5, b"llm_request") + b"\x30\x02"
    times = b"\x39" + struct.pack("<Q", START_NS) + b"\x41" + struct.pack("<Q", START_NS + 2 * S)
    return head + times + b"".join(_ld(9, kv) for kv in attributes) + extra


def _wire_export(spans: list[bytes]) -> bytes:
    resource = _ld(1, _ld(1, _wire_kv(b"service.name", _ld(1, b"vllm"))))
    scope_spans = _ld(1, _ld(1, b"vllm.llm_engine")) + b"".join(_ld(2, span) for span in spans)
    return _ld(1, resource + _ld(2, scope_spans))


def _nested(levels: int, kvlist: bool = False) -> bytes:
    value = _ld(1, b"x")
    for _ in range(levels):
        value = _ld(6, _ld(1, _wire_kv(b"k", value))) if kvlist else _ld(5, _ld(1, value))
    return value


def wire_cases() -> Iterator[Case]:
    """Bodies an exporter's own serialisation never makes, but upb parses: a key-value's value
    given twice (merged), members given twice, unknown fields, non-minimal and overlong
    varints, invalid UTF-8, values nested to upb's depth limit and past it, strings of one,
    two and three length bytes around the size limit, many attributes."""
    ids = Ids(3535)
    base = [_wire_kv(k.encode(), _wire_value(v)) for k, v in VLLM_V1.items()]
    tokens, finish = b"gen_ai.usage.prompt_tokens", b"gen_ai.response.finish_reasons"
    e2e = b"gen_ai.latency.e2e"
    variants: dict[str, list[bytes]] = {
        "value_twice_int_then_empty": [_wire_kv(tokens, b"\x18\x05", b"")],
        "value_twice_string_then_int": [_wire_kv(tokens, _ld(1, b"7"), b"\x18\x09")],
        "value_twice_arrays_merged": [
            _wire_kv(finish, _ld(5, _ld(1, _ld(1, b"length"))), _ld(5, _ld(1, _ld(1, b"stop"))))
        ],
        "key_twice": [_ld(1, b"other") + _wire_kv(e2e, _wire_double(1.5))],
        "value_before_key": [_ld(2, _wire_double(1.5)) + _ld(1, e2e)],
        "members_twice": [_wire_kv(e2e, _ld(1, b"abc") + _wire_double(1.75))],
        "member_then_unknown": [_wire_kv(tokens, b"\x18\x05\x78\x01")],
        "unknown_fixed32": [_wire_kv(tokens, b"\x18\x06\xa5\x01\x00\x00\x00\x00")],
        "int_overlong": [_wire_kv(tokens, b"\x18\x85\x80\x00")],
        "int_minus_one": [_wire_kv(tokens, b"\x18" + b"\xff" * 9 + b"\x01")],
        "int_over_64_bits": [_wire_kv(tokens, b"\x18" + b"\xff" * 9 + b"\x7f")],
        "int_eleven_bytes": [_wire_kv(tokens, b"\x18" + b"\xff" * 10 + b"\x01")],
        "int_truncated": [_wire_kv(tokens, b"\x18\x85")],
        "int_two_bytes": [_wire_kv(tokens, b"\x18\xac\x02")],
        "int_three_bytes": [_wire_kv(tokens, b"\x18\x80\x80\x01")],
        "bool_two": [_wire_kv(b"gen_ai.request.stream", b"\x10\x02")],
        "bool_known": [_wire_kv(tokens, b"\x10\x01")],
        "double_short": [_wire_kv(e2e, b"\x21\x00\x00\x80\x3f")],
        "double_as_fixed32": [_wire_kv(e2e, b"\x25\x00\x00\x80\x3f")],
        "string_truncated": [_wire_kv(b"gen_ai.request.id", b"\x0a\x05ab")],
        "string_length_non_minimal": [_wire_kv(b"gen_ai.request.id", b"\x0a\x83\x00abc")],
        "utf8_known": [_wire_kv(b"gen_ai.request.id", _ld(1, b"ab\xffcd"))],
        "utf8_unknown": [_wire_kv(b"x.note", _ld(1, b"\xed\xa0\x80"))],
        "utf8_in_array": [_wire_kv(finish, _ld(5, _ld(1, _ld(1, b"\xc0\x80"))))],
        "utf8_key": [_wire_kv(b"bad\xffkey", _wire_double(1.0))],
        "utf8_past_most": [_wire_kv(f"pad.{i}".encode(), b"\x18\x01") for i in range(130)]
        + [_wire_kv(b"x.note", _ld(1, b"\xff"))],
        "empty_values": [_wire_kv(e2e), _wire_kv(b"x.empty", b"")],
        "kvlist_known": [_wire_kv(tokens, _ld(6, _ld(1, _wire_kv(b"k", b"\x18\x01"))))],
        "bytes_value": [_wire_kv(b"gen_ai.request.id", _ld(7, b"\x00\xff"))],
        "array_depth_47": [_wire_kv(b"x.deep", _nested(47))],
        "array_depth_48": [_wire_kv(b"x.deep", _nested(48))],
        "kvlist_depth_31": [_wire_kv(b"x.deep", _nested(31, kvlist=True))],
        "kvlist_depth_32": [_wire_kv(b"x.deep", _nested(32, kvlist=True))],
        "string_200": [_wire_kv(b"gen_ai.request.id", _ld(1, b"r" * 200))],
        "string_20000": [_wire_kv(b"gen_ai.request.id", _ld(1, b"r" * 20_000))],
        "string_4096_two_byte_chars": [_wire_kv(b"tenant", _ld(1, "é".encode() * 4096))],
        "string_4097_two_byte_chars": [_wire_kv(b"tenant", _ld(1, "é".encode() * 4097))],
        "key_2049_two_byte_chars": [_wire_kv("é".encode() * 2049, _wire_double(1.0))],
        "key_4097": [_wire_kv(b"k" * 4097, _wire_double(1.0))],
        "array_of_numbers_at_limit": [
            _wire_kv(b"x.list", _ld(5, b"".join(_ld(1, b"\x18\x01") for _ in range(512))))
        ],
        "array_of_numbers_past_limit": [
            _wire_kv(b"x.list", _ld(5, b"".join(_ld(1, b"\x18\x01") for _ in range(513))))
        ],
    }
    for name, extra in variants.items():
        body = _wire_export([_wire_span(base + extra, ids), _wire_span(base, ids)])
        yield Case(f"wire/{name}", [], raw=body)
        yield Case(f"wire/{name}/no_accept", [], raw=body, accept=False)
    # Span fields encoded as an exporter would not (a non-minimal kind): parsed the same.
    yield Case(
        "wire/kind_overlong",
        [],
        raw=_wire_export([_wire_span(base, ids).replace(b"\x30\x02", b"\x30\x82\x00", 1)]),
    )
    # A refusal of the whole export and an undecodable value in one: undecodable first.
    bad = _wire_span(base + variants["utf8_known"], ids)
    yield Case("wire/too_many_spans_and_utf8", [], raw=_wire_export([bad] * 9), limits="small")
    yield Case("wire/too_many_spans", [], raw=_wire_export([_wire_span(base, ids)] * 9),
               limits="small")  # fmt: skip


def _wire_value(value: Any) -> bytes:
    if isinstance(value, float):
        return _wire_double(value)
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    return _ld(1, str(value).encode())


CONTEXTS = ("plain", "model", "services", "prefill", "adapters", "scraped")
LIMITS = ("default", "small", "tiny")


def cases() -> list[Case]:
    return [*attribute_cases(), *span_cases(), *export_cases(), *shape_cases(), *wire_cases()]


def run(case: Case, media: str, body: bytes, one_pass: bool = True) -> dict[str, Any]:
    """What a decoder process makes of ``body`` (``ingest.prepare_body``, or ``decode_body`` +
    ``prepare`` where there is none, or where ``one_pass`` is false), as plain JSON."""
    from infersight.collector import ingest
    from infersight.collector.assembly import Reassembly
    from infersight.collector.ingest import decode_body, prepare
    from infersight.collector.mapping import MappingContext
    from infersight.collector.otlp import Limits
    from infersight.core.accept import AcceptWindow
    from infersight.core.errors import InfersightError
    from infersight.core.records import Role

    limits = {
        "default": Limits(),
        "small": Limits(max_spans=8, max_resources=4, max_scopes=4, max_attributes=4,
                        max_attribute_bytes=16, max_messages=2000, max_json_containers=2000),
        "tiny": Limits(max_attributes=1, max_attribute_bytes=4),
    }[case.limits]  # fmt: skip
    scraped = "meta-llama/Llama-3.1-8B-Instruct"
    contexts = {
        "plain": MappingContext("node-1/vllm-0"),
        "model": MappingContext("node-1/vllm-0", model="llama-8b"),
        "services": MappingContext("n", service_models={"vllm": "svc-model", "sglang": "sg"}),
        "prefill": MappingContext("n", role=Role.PREFILL),
        "adapters": MappingContext("n", adapters=frozenset({"qwen2.5-7b", "cmpl-1"})),
        "scraped": MappingContext("n", scraped_model=lambda: scraped,
                                  scraped_adapters=lambda: frozenset({"gpt-x"})),
    }  # fmt: skip
    accept = AcceptWindow.of_days(14) if case.accept else None
    now = NOW_NS / 1e9
    context = contexts[case.context]
    try:
        if one_pass and hasattr(ingest, "prepare_body"):  # what a decoder process runs
            prepared = ingest.prepare_body(
                body, "identity", media, limits, context, now, accept, Reassembly(2.0)
            )
        else:
            decoded = decode_body(body, "identity", media, limits)
            prepared = prepare(decoded, context, now, accept, Reassembly(2.0))
        prepared = pickle.loads(pickle.dumps(prepared))  # the trip back from a decoder
    except InfersightError as exc:
        return {"error": [type(exc).__name__, exc.message, _plain(exc.details)]}
    return {
        "entries": [
            [int(e.kind), e.trace_id, e.ready_at, e.payload.decode("utf-8", "surrogateescape")]
            for e in prepared.entries
        ],
        "spans": prepared.spans,
        "dropped_attributes": prepared.dropped_attributes,
        "unmapped": sorted([list(k), v] for k, v in prepared.unmapped.items()),
        "rejected": dict(sorted(prepared.rejected.items())),
        "sources": {s: dict(sorted(t.items())) for s, t in sorted(prepared.sources.items())},
    }


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def outcomes(one_pass: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every case's outcome, as protobuf and as OTLP/JSON, in corpus order (``run``)."""
    ids = Ids(35)
    for case in cases():
        body = build(case, ids)
        yield f"{case.name} [protobuf]", run(case, "application/x-protobuf", body, one_pass)
        if case.raw is None:
            yield f"{case.name} [json]", run(case, "application/json", as_json(body), one_pass)


#: What the golden file holds for an OTLP/JSON outcome equal to its protobuf twin's.
SAME_AS_PROTOBUF = {"same_as": "protobuf"}


def deduplicated(outcomes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``outcomes`` with each OTLP/JSON outcome equal to its protobuf twin's written as
    ``SAME_AS_PROTOBUF`` (half the golden file)."""
    out = {}
    for name, outcome in outcomes.items():
        twin = outcomes.get(name.replace(" [json]", " [protobuf]"))
        same = name.endswith(" [json]") and twin == outcome
        out[name] = SAME_AS_PROTOBUF if same else outcome
    return out


def expanded(outcomes: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The inverse of ``deduplicated``."""
    return {
        name: outcomes[name.replace(" [json]", " [protobuf]")]
        if outcome == SAME_AS_PROTOBUF
        else outcome
        for name, outcome in outcomes.items()
    }
