"""Spans leave through the real OTLP exporters in vLLM V1's ``llm_request`` shape."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

import pytest
from opentelemetry.proto.trace.v1 import trace_pb2

from infersight.simulator.events import Batch
from infersight.simulator.faults import Fault, FaultKind
from infersight.simulator.fleet import run_scenario
from infersight.simulator.scenario import Deployment, Scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.sinks.otlp import OtlpSink
from infersight.simulator.specs import load_profile
from infersight.simulator.workload import Poisson
from tests.simulator.otlp_receiver import Received, attributes, grpc_receiver, http_receiver
from tests.simulator.support import SHORT_MIX, START, RunFn

LATENCIES = {
    "gen_ai.latency.time_in_queue": "queue_s",
    "gen_ai.latency.time_to_first_token": "ttft_s",
    "gen_ai.latency.e2e": "e2e_s",
    "gen_ai.latency.time_in_model_prefill": "prefill_s",
    "gen_ai.latency.time_in_model_decode": "decode_s",
}
VLLM_V1_ATTRIBUTES = {
    "gen_ai.request.id",
    "gen_ai.response.model",
    "gen_ai.request.max_tokens",
    "gen_ai.request.temperature",
    "gen_ai.request.top_p",
    "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.completion_tokens",
    "gen_ai.latency.time_in_scheduler",
    "gen_ai.latency.time_in_model_forward",
    "gen_ai.latency.time_in_model_execute",
    "gen_ai.latency.time_in_model_inference",
    *LATENCIES,
}

Receiver = Callable[[], AbstractContextManager[tuple[str, Received]]]


@pytest.fixture(params=["http", "grpc"])
def receiver(request: pytest.FixtureRequest) -> Iterator[tuple[str, Received]]:
    factory: Receiver = http_receiver if request.param == "http" else grpc_receiver
    with factory() as pair:
        yield pair


def test_every_request_arrives_as_an_llm_request_span_with_its_record(
    run_fleet: RunFn, receiver: tuple[str, Received]
) -> None:
    endpoint, received = receiver
    run = run_fleet(4.0, 30.0, instances=2)
    sink = OtlpSink(endpoint)
    for start in range(0, len(run.sink.completions), 50):
        sink.write(Batch(tuple(run.sink.completions[start : start + 50])))
    sink.close()
    assert sink.failed == 0
    spans = received.spans()
    roots = {
        (s.trace_id.hex(), s.span_id.hex()): (res, s) for res, s in spans if s.name == "llm_request"
    }
    children = [s for _, s in spans if s.name == "tokenize"]
    assert len(roots) == len(run.sink.completions) == len(children)
    for c in run.sink.completions:
        r = c.record
        resource, span = roots[(r.trace_id, r.span_id)]
        attrs = attributes(span)
        assert span.kind == trace_pb2.Span.SPAN_KIND_SERVER
        assert resource["service.name"] == r.instance
        assert set(attrs) >= VLLM_V1_ATTRIBUTES
        assert attrs["gen_ai.usage.prompt_tokens"] == r.input_tokens
        assert attrs["gen_ai.usage.completion_tokens"] == r.output_tokens
        assert attrs["gen_ai.response.model"] == r.model
        for name, field in LATENCIES.items():
            assert attrs[name] == pytest.approx(getattr(r, field))
        assert span.start_time_unix_nano == int(r.start.timestamp() * 1e9)
        assert (span.end_time_unix_nano - span.start_time_unix_nano) / 1e9 == pytest.approx(
            r.e2e_s, abs=1e-6
        )
    for child in children[:50]:
        parent = next(s for (t, _), (_, s) in roots.items() if t == child.trace_id.hex())
        assert child.parent_span_id == parent.span_id


def test_the_fleet_exports_while_it_runs_and_nothing_is_dropped() -> None:
    scenario = Scenario(
        name="otlp",
        start=START,
        duration_s=120.0,
        seed=3,
        sample_interval_s=10.0,
        deployments=(
            Deployment(load_profile("llama-3.1-8b-h200x1"), ("a",), Poisson(20.0), SHORT_MIX),
        ),
        faults=(Fault(FaultKind.KV_PRESSURE, "a", 30.0, 60.0, 0.01),),
    )
    with http_receiver() as (endpoint, received):
        memory, otlp = MemorySink(), OtlpSink(endpoint, tokenizer_spans=False)
        result = run_scenario(scenario, [memory, otlp], chunk_s=10.0)
        otlp.close()
        assert otlp.exported == result.requests == len(received.spans()) > 1000


def test_a_gateway_in_front_encloses_the_request_span(run_fleet: RunFn) -> None:
    mix = dataclasses.replace(SHORT_MIX, gateway_s=0.003)
    run = run_fleet(4.0, 10.0, mix=mix)
    with http_receiver() as (endpoint, received):
        sink = OtlpSink(endpoint)
        sink.write(Batch(tuple(run.sink.completions)))
        sink.close()
        spans = [s for _, s in received.spans()]
    by_name: dict[str, list[trace_pb2.Span]] = {}
    for s in spans:
        by_name.setdefault(s.name.split(" ")[0], []).append(s)
    assert len(by_name["gateway"]) == len(by_name["llm_request"]) == len(run.sink.records)
    gateways = {s.trace_id: s for s in by_name["gateway"]}
    for request in by_name["llm_request"]:
        gateway = gateways[request.trace_id]
        assert gateway.parent_span_id == b""
        assert request.parent_span_id == gateway.span_id
        overhead = (gateway.end_time_unix_nano - gateway.start_time_unix_nano) - (
            request.end_time_unix_nano - request.start_time_unix_nano
        )
        assert overhead / 1e9 == pytest.approx(0.003, abs=2e-9)
    assert all(r.gateway_s == 0.003 for r in run.sink.records)
