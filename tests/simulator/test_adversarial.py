"""The simulator's shapes of production telemetry (issue 13): data-parallel engines in the real
exposition formats, no GPU telemetry, client spans in the server's trace, faults that clear."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
from opentelemetry.proto.trace.v1 import trace_pb2
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infersight.core.errors import InvalidInput
from infersight.simulator.faults import Fault, FaultKind
from infersight.simulator.fleet import aggregate, run_scenario
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.scenario import Deployment, Scenario
from infersight.simulator.sinks.otlp import ClientSpans, OtlpSink
from infersight.simulator.sinks.prometheus import MetricsSink
from infersight.simulator.specs import scenario_from_data
from infersight.simulator.workload import Poisson
from tests.simulator.otlp_receiver import attributes, http_receiver
from tests.simulator.support import SHORT_MIX, START, median


class Keep:
    """Keeps every batch (engine samples included)."""

    def __init__(self) -> None:
        self.batches: list = []

    def write(self, batch) -> None:
        self.batches.append(batch)

    def close(self) -> None:
        return None

    def all(self, field: str) -> list:
        return [x for b in self.batches for x in getattr(b, field)]


def _scenario(
    profile: ModelProfile,
    *,
    rate: float,
    duration: float,
    engines: int = 1,
    gpu: bool = True,
    faults: tuple[Fault, ...] = (),
) -> Scenario:
    return Scenario(
        name="adversarial",
        start=START,
        duration_s=duration,
        seed=11,
        sample_interval_s=5.0,
        deployments=(Deployment(profile, ("sim-0",), Poisson(rate), SHORT_MIX, engines),),
        faults=faults,
        gpu_telemetry=gpu,
    )


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_two_data_parallel_engines_are_two_engine_series_in_vllms_exposition(
    profile_8b: ModelProfile,
) -> None:
    kept = Keep()
    metrics = MetricsSink()
    run_scenario(_scenario(profile_8b, rate=24.0, duration=60.0, engines=2), [kept, metrics])
    engine_samples = kept.all("engine_samples")
    last = {e.index: e.sample for e in engine_samples}
    assert set(last) == {0, 1}
    text = generate_latest(metrics.vllm_registry("sim-0")).decode()
    families = _families(text)
    kv = {s.labels["engine"]: s.value for s in families["vllm:kv_cache_usage_perc"]}
    assert kv == {
        "0": pytest.approx(last[0].kv_cache_usage),
        "1": pytest.approx(last[1].kv_cache_usage),
    }
    assert 0 < kv["0"] < 1
    assert 0 < kv["1"] < 1
    assert kv["0"] != kv["1"]  # each engine its own cache
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:generation_tokens",
    ):
        assert {s.labels["engine"] for s in families[name]} == {"0", "1"}, name
    assert {s.labels["model_name"] for s in families["vllm:kv_cache_usage_perc"]} == {
        profile_8b.model_name
    }
    # The instance's own reading: ratios averaged over engines, counts added up.
    instance = kept.all("server_samples")[-1]
    assert instance.kv_cache_usage == pytest.approx((kv["0"] + kv["1"]) / 2)
    assert instance.requests_running == last[0].requests_running + last[1].requests_running
    generation = {s.labels["engine"]: s.value for s in families["vllm:generation_tokens"]}
    assert instance.generation_tokens_total == pytest.approx(sum(generation.values()))


def test_sglang_data_parallel_ranks_are_dp_rank_series(profile_8b: ModelProfile) -> None:
    metrics = MetricsSink("sglang")
    kept = Keep()
    run_scenario(_scenario(profile_8b, rate=24.0, duration=60.0, engines=2), [kept, metrics])
    families = _families(generate_latest(metrics.vllm_registry("sim-0")).decode())
    usage = {s.labels["dp_rank"]: s.value for s in families["sglang:token_usage"]}
    last = {e.index: e.sample.kv_cache_usage for e in kept.all("engine_samples")}
    assert usage == {"0": pytest.approx(last[0]), "1": pytest.approx(last[1])}
    assert {s.labels["dp_rank"] for s in families["sglang:num_queue_reqs"]} == {"0", "1"}
    assert sum(s.value for s in families["sglang:num_requests"]) == len(kept.all("completions"))


def test_engines_share_the_instances_traffic_and_own_distinct_gpus(
    profile_70b: ModelProfile,
) -> None:
    kept = Keep()
    run_scenario(_scenario(profile_70b, rate=8.0, duration=120.0, engines=2), [kept])
    served = Counter(c.engine for c in kept.all("completions"))
    assert set(served) == {0, 1}
    assert abs(served[0] - served[1]) < 0.2 * sum(served.values())
    gpus = {(g.gpu_index, g.uuid) for g in kept.all("gpu_samples")}
    assert sorted(i for i, _ in gpus) == list(range(2 * profile_70b.tensor_parallel))
    assert len({u for _, u in gpus}) == len(gpus)
    assert {c.record.instance for c in kept.all("completions")} == {"sim-0"}


def test_one_engine_keeps_the_single_engine_run_exactly(profile_8b: ModelProfile) -> None:
    kept = Keep()
    run_scenario(_scenario(profile_8b, rate=6.0, duration=60.0), [kept])
    assert [e.sample for e in kept.all("engine_samples")] == kept.all("server_samples")
    assert aggregate(kept.all("server_samples")[:1]) == kept.all("server_samples")[0]


def test_gpu_telemetry_off_means_no_gpu_sample_at_all(profile_8b: ModelProfile) -> None:
    on, off = Keep(), Keep()
    run_scenario(_scenario(profile_8b, rate=6.0, duration=60.0), [on])
    run_scenario(_scenario(profile_8b, rate=6.0, duration=60.0, gpu=False), [off])
    assert on.all("gpu_samples")
    assert not off.all("gpu_samples")
    assert off.all("server_samples") == on.all("server_samples")
    assert [c.record for c in off.all("completions")] == [c.record for c in on.all("completions")]


def test_scenario_files_name_engines_and_gpu_telemetry() -> None:
    data = {
        "apiVersion": "infersight/v1",
        "kind": "Scenario",
        "metadata": {"name": "dp"},
        "spec": {
            "duration": "5m",
            "gpu_telemetry": False,
            "fleet": [
                {
                    "profile": "llama-3.1-8b-h200x1",
                    "instances": 1,
                    "engines": 2,
                    "arrival": {"rate": 4},
                    "mix": {"input": {"median": 100}, "output": {"median": 20}},
                }
            ],
        },
    }
    scenario = scenario_from_data(data)
    assert scenario.deployments[0].engines == 2
    assert scenario.gpu_telemetry is False
    data["spec"]["fleet"][0]["engines"] = 0
    with pytest.raises(InvalidInput) as refused:
        scenario_from_data(data)
    assert any("engines" in e["loc"] for e in refused.value.details["errors"])


def test_client_spans_join_the_servers_trace_as_its_ancestors(profile_8b: ModelProfile) -> None:
    kept = Keep()
    run_scenario(_scenario(profile_8b, rate=4.0, duration=20.0), [kept])
    completions = kept.all("completions")
    assert completions
    with http_receiver() as (endpoint, received):
        sink = OtlpSink(endpoint, client=ClientSpans(service="chat-app"))
        for c in completions:
            sink.emit(c)
        sink.close()
        assert sink.failed == 0
        spans = received.spans()
    by_id = {(s.trace_id.hex(), s.span_id.hex()): (res, s) for res, s in spans}
    assert len(spans) == 6 * len(completions)  # tokenize, llm_request + four of the app's
    for c in completions:
        r = c.record
        res, server = by_id[(r.trace_id, r.span_id)]
        assert res["service.name"] == r.instance
        call_res, call = by_id[(r.trace_id, server.parent_span_id.hex())]
        assert call.kind == trace_pb2.Span.SPAN_KIND_CLIENT
        assert call_res["service.name"] == "chat-app"
        assert call.name == f"chat {r.model}"
        assert attributes(call)["gen_ai.request.model"] == r.model
        assert call.start_time_unix_nano < server.start_time_unix_nano
        assert call.end_time_unix_nano > server.end_time_unix_nano
        _, root = by_id[(r.trace_id, call.parent_span_id.hex())]
        assert root.parent_span_id == b""
        same_trace = [(res_, s) for (t, _), (res_, s) in by_id.items() if t == r.trace_id]
        assert len(same_trace) == 6
        [(tok_res, tok)] = [(x, s) for x, s in same_trace if s.name == "tokenize_prompt"]
        assert tok_res["service.name"] == "chat-app"
        assert tok.parent_span_id == root.span_id
        assert tok.end_time_unix_nano - tok.start_time_unix_nano == pytest.approx(50e6, abs=2)
        [gateway] = [s for _, s in same_trace if s.name == "gateway"]
        assert gateway.parent_span_id == root.span_id
        [(own_res, own)] = [(x, s) for x, s in same_trace if s.name == "tokenize"]
        assert own_res["service.name"] == r.instance
        assert own.parent_span_id == server.span_id


def test_a_fault_that_clears_stops_slowing_the_server(profile_8b: ModelProfile) -> None:
    throttle = Fault(FaultKind.THERMAL_THROTTLE, "sim-0", 120.0, 240.0, 0.55)
    kept = Keep()
    run_scenario(_scenario(profile_8b, rate=8.0, duration=420.0, faults=(throttle,)), [kept])
    records = [c.record for c in kept.all("completions")]

    def tpot(lo: float, hi: float) -> float:
        return median([r.tpot_s for r in records if lo <= (r.start - START).total_seconds() < hi])

    before, during, after = tpot(30, 120), tpot(150, 230), tpot(300, 400)
    assert during > 1.5 * before
    assert after == pytest.approx(before, rel=0.1)
    gpus = kept.all("gpu_samples")
    late = [g for g in gpus if (g.ts - START).total_seconds() > 300]
    assert late
    assert all(not {"sw_thermal_slowdown"} & set(g.throttle_reasons) for g in late)


def test_a_data_parallel_fault_slows_every_engine_of_its_instance(
    profile_8b: ModelProfile,
) -> None:
    throttle = Fault(FaultKind.THERMAL_THROTTLE, "sim-0", 60.0, 1e6, 0.55)
    kept = Keep()
    scenario = _scenario(profile_8b, rate=16.0, duration=180.0, engines=2, faults=(throttle,))
    run_scenario(dataclasses.replace(scenario), [kept])
    by_engine: dict[int, list[float]] = {0: [], 1: []}
    for c in kept.all("completions"):
        if c.record.tpot_s is not None and (c.record.start - START).total_seconds() > 80:
            by_engine[c.engine].append(c.record.tpot_s)
    assert by_engine[0]
    assert by_engine[1]
    assert median(by_engine[0]) == pytest.approx(median(by_engine[1]), rel=0.25)
