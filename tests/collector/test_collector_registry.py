"""The engine registry (``collector.engines``) is the one place an engine is declared (#30):
its record ``Engine``, its span shapes and its ``/metrics`` dialects. The span dispatch, the
scraper's detection and the sidecar's scrape-dialect gauge follow it; TensorRT-LLM, NVIDIA
Dynamo's frontend and llm-d are declared through it."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from infersight.collector import engines, otlp
from infersight.collector.engines import DIALECTS, REGISTRY, SPAN_SHAPES, Kind
from infersight.collector.mapping import MappingContext, StageFragment, map_span, pd_proxy
from infersight.collector.mapping import dispatch as dispatch_module
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.scrape.exposition import parse
from infersight.core.records import Engine, RequestRecord
from tests.collector import collector_shapes as shapes
from tests.collector.harness import encoded

CTX = MappingContext(instance="node-1")

#: TensorRT-LLM's ``llm_request`` span (``GenerationResultBase.do_tracing``; attribute names
#: from ``tensorrt_llm/llmapi/tracing.py``'s ``SpanAttributes``): vLLM's latency names, no
#: prefill or decode time, a KV transfer time when served disaggregated.
TRTLLM = {
    "gen_ai.request.id": "42",
    "gen_ai.request.max_tokens": 256,
    "gen_ai.request.temperature": 0.7,
    "gen_ai.request.top_p": 1.0,
    "gen_ai.request.n": 1,
    "gen_ai.usage.prompt_tokens": 812,
    "gen_ai.usage.completion_tokens": 64,
    "gen_ai.latency.time_in_queue": 0.012,
    "gen_ai.latency.time_to_first_token": 0.094,
    "gen_ai.latency.e2e": 0.73,
    "gen_ai.latency.kv_cache_transfer_time": 0.021,
    "gen_ai.response.finish_reasons": ("stop",),
}


def sdk_spans(scope: str, service: str, attrs: dict[str, object]) -> bytes:
    """One ``llm_request`` span made by the real SDK under tracer ``scope``, OTLP-encoded."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer(scope)
    with tracer.start_as_current_span("llm_request", kind=SpanKind.SERVER, attributes=attrs):
        pass
    provider.shutdown()
    return encoded(memory.get_finished_spans())


def mapped(body: bytes) -> RequestRecord:
    (view,) = otlp.decode(body, otlp.PROTOBUF).spans
    record = map_span(view, CTX)
    assert isinstance(record, RequestRecord), record
    return record


def test_a_trtllm_llm_request_span_is_a_trtllm_record_not_a_vllm_one() -> None:
    # trtllm-serve's TracerProvider sets no service name: the tracer's scope tells it apart
    record = mapped(sdk_spans("trt.llm", "unknown_service", TRTLLM))
    assert record.engine is Engine.TRTLLM
    assert (record.ttft_s, record.e2e_s, record.queue_s) == (0.094, 0.73, 0.012)
    assert (record.prefill_s, record.decode_s) == (None, None)  # TensorRT-LLM reports neither
    assert (record.input_tokens, record.output_tokens) == (812, 64)
    assert record.kv_transfer_s == 0.021  # a disaggregated generation server waited for it
    assert record.tpot_s is not None  # (e2e − TTFT) over the tokens after the first


def test_the_same_shape_from_vllms_tracer_stays_vllm() -> None:
    assert mapped(sdk_spans("vllm.llm_engine", "vllm", shapes.VLLM_V1)).engine is Engine.VLLM
    assert mapped(sdk_spans("vllm.llm_engine", "vllm", TRTLLM)).engine is Engine.VLLM


def test_every_engine_has_one_declaration_and_only_engines_name_one() -> None:
    declared = [d.engine for d in REGISTRY if d.engine is not None]
    assert sorted(declared) == sorted(Engine)
    assert all((d.kind is Kind.ENGINE) == (d.engine is not None) for d in REGISTRY)
    assert len({d.name for d in REGISTRY}) == len(REGISTRY)
    assert engines.declaration_of(Engine.TRTLLM).name == "trtllm"


def test_dispatch_follows_the_registry_peers_first_generic_last() -> None:
    peers = [s for d in REGISTRY if d.kind is Kind.PEER for s in d.spans]
    engine_shapes = [s for d in REGISTRY if d.kind is Kind.ENGINE for s in d.spans]
    assert list(SPAN_SHAPES) == peers + engine_shapes
    assert SPAN_SHAPES[-1] is engines.declaration_of(Engine.GENERIC).spans[-1]
    trtllm_at = SPAN_SHAPES.index(engines.declaration_of(Engine.TRTLLM).spans[0])
    assert trtllm_at < SPAN_SHAPES.index(engines.declaration_of(Engine.VLLM).spans[0])
    assert dispatch_module.engines.SPAN_SHAPES is SPAN_SHAPES  # the dispatcher reads this one


def test_each_dialect_is_declared_once_with_prefixes_no_other_dialect_shadows() -> None:
    names = [d.name for d in DIALECTS]
    assert len(names) == len(set(names))
    assert set(names) == {d.name for decl in REGISTRY for d in decl.dialects}
    prefixes = [(d.name, p) for d in DIALECTS for p in d.prefixes]
    for name, prefix in prefixes:  # detection order between engines is then immaterial
        assert not any(p.startswith(prefix) for n, p in prefixes if n != name), prefix
    kinds = {d.name: decl.kind for decl in REGISTRY for d in decl.dialects}
    order = [kinds[n] for n in names]
    assert order == sorted(order, key=[Kind.ENGINE, Kind.PEER, Kind.DEVICE].index)


def test_dynamo_and_llm_d_are_peers_declared_through_the_registry() -> None:
    by_name = {d.name: d for d in REGISTRY}
    dynamo, llm_d = by_name["dynamo"], by_name["llm-d"]
    assert (dynamo.kind, dynamo.engine, dynamo.spans) == (Kind.PEER, None, ())  # metrics only
    assert [d.name for d in dynamo.dialects] == ["dynamo"]
    assert [d.name for d in llm_d.dialects] == ["llm-d-epp"]
    assert [s.claims for s in llm_d.spans] == [pd_proxy.claims]
    prefill = shapes.span("prefill", {pd_proxy.PREFILL_TARGET: "10.0.0.7:8000"}, parent="ab" * 8)
    outcome = map_span(prefill, CTX)
    assert isinstance(outcome, StageFragment)
    assert outcome.detail == "10.0.0.7:8000"


def test_an_engines_series_beside_a_routers_is_the_engine() -> None:
    text = (
        "llm_d_epp_request_total 3\ndynamo_frontend_requests_total 2\nvllm:num_requests_running 1\n"
    )
    found = engines.detect(parse(text, "text/plain"))
    assert found is not None
    assert found.name == "vllm"
    assert engines.detect(parse("process_cpu_seconds_total 1\n", "text/plain")) is None


def test_the_scrape_dialect_gauge_names_come_from_the_registry() -> None:
    metrics = CollectorMetrics()
    (family,) = [m for m in metrics.registry.collect() if m.name.endswith("scrape_dialect")]
    assert family.documentation.endswith("(" + ", ".join(engines.DIALECT_NAMES) + ")")
    assert engines.DIALECT_NAMES[-1] == engines.UNRECOGNISED
