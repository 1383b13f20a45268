"""The engine model behaves like a continuous-batching server (vLLM V1) on its calibration."""

from __future__ import annotations

import numpy as np
import pytest

from infersight.simulator.engine import InstanceSim
from infersight.simulator.events import Batch
from infersight.simulator.faults import Fault, FaultKind, FaultSchedule
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.workload import ArrivalStream, Poisson
from tests.simulator.support import SHORT_MIX, START, RunFn, median


def throughput(run: object, duration: float) -> float:
    records = run.sink.records  # type: ignore[attr-defined]
    return len(records) / duration


def test_light_load_matches_published_figures_for_8b(run_fleet: RunFn) -> None:
    run = run_fleet(1.0, 180.0)
    records = run.records(since=10)
    assert len(records) > 100
    assert 0.005 <= median([r.tpot_s for r in records]) <= 0.0075
    assert 0.010 <= median([r.ttft_s for r in records]) <= 0.080


def test_light_load_matches_published_figures_for_70b(
    run_fleet: RunFn, profile_70b: ModelProfile
) -> None:
    run = run_fleet(1.0, 180.0, profile=profile_70b)
    records = run.records(since=10)
    assert 0.014 <= median([r.tpot_s for r in records]) <= 0.019
    assert 0.030 <= median([r.ttft_s for r in records]) <= 0.150


@pytest.mark.parametrize(
    ("profile_name", "low", "high"),
    [("llama-3.1-8b-h200x1", 15.0, 25.0), ("llama-3.1-70b-h200x4", 7.5, 12.5)],
)
def test_throughput_rises_with_load_then_saturates_near_the_calibration(
    run_fleet: RunFn, profile_name: str, low: float, high: float
) -> None:
    from infersight.simulator.specs import load_profile

    profile = load_profile(profile_name)
    duration = 150.0
    light = throughput(run_fleet(low / 4, 600.0, profile=profile), 600.0)
    heavy, heavier = (
        throughput(run_fleet(rate, duration, profile=profile), duration)
        for rate in (high * 1.6, high * 2.4)
    )
    assert light == pytest.approx(low / 4, rel=0.1)  # below saturation, output = offered load
    assert low <= heavy <= high
    assert heavier == pytest.approx(heavy, rel=0.06)  # the plateau: more load, no more output


def test_queue_time_explodes_past_saturation_while_decode_time_stays_flat(
    run_fleet: RunFn,
) -> None:
    below, past, far_past = (run_fleet(rate, 150.0) for rate in (8.0, 30.0, 45.0))

    def q(run: object) -> float:
        return median([r.queue_s for r in run.records(since=20)])  # type: ignore[attr-defined]

    def tpot(run: object) -> float:
        return median([r.tpot_s for r in run.records(since=20)])  # type: ignore[attr-defined]

    assert q(past) > 100 * q(below)
    assert q(far_past) > 1.5 * q(past)
    # Once the batch is full, a step costs the same however long the queue: decode is flat.
    assert tpot(far_past) == pytest.approx(tpot(past), rel=0.08)
    waiting = [s.requests_waiting for s in far_past.server("sim-0", since=100)]
    assert min(waiting) > 100


def test_tpot_grows_with_batch_size(run_fleet: RunFn) -> None:
    runs = [run_fleet(rate, 120.0) for rate in (1.0, 6.0, 12.0, 16.0)]
    batches = [np.mean([s.requests_running for s in r.server("sim-0", since=20)]) for r in runs]
    tpots = [median([x.tpot_s for x in r.records(since=20)]) for r in runs]
    assert batches == sorted(batches)
    assert tpots == sorted(tpots)
    assert tpots[-1] > 2 * tpots[0]


def test_preemptions_appear_only_under_kv_pressure(run_fleet: RunFn) -> None:
    calm = run_fleet(12.0, 240.0)
    assert calm.result.preemptions == 0
    assert all(s.preemptions_total == 0 for s in calm.sink.server_samples)

    fault = Fault(FaultKind.KV_PRESSURE, "sim-0", 80.0, 160.0, 0.01)
    pressed = run_fleet(12.0, 240.0, faults=[fault])
    samples = {s.ts: s.preemptions_total for s in pressed.server("sim-0")}
    before = [v for ts, v in samples.items() if (ts - START).total_seconds() <= 80]
    assert pressed.result.preemptions > 0
    assert max(before) == 0
    during = pressed.server("sim-0", since=100, until=160)
    assert during[-1].preemptions_total > during[0].preemptions_total
    assert median([s.kv_cache_usage for s in during]) > 0.8
    after = pressed.server("sim-0", since=200)
    assert after[0].preemptions_total == after[-1].preemptions_total


def test_same_seed_same_run_and_another_seed_another(run_fleet: RunFn) -> None:
    a, b, c = run_fleet(5.0, 60.0), run_fleet(5.0, 60.0), run_fleet(5.0, 60.0, seed=8)
    assert a.sink.records == b.sink.records
    assert a.sink.gpu_samples == b.sink.gpu_samples
    assert a.sink.records != c.sink.records


def test_records_are_consistent_vllm_records(run_fleet: RunFn) -> None:
    run = run_fleet(10.0, 60.0, instances=2)
    records = run.sink.records
    assert {r.instance for r in records} == {"sim-0", "sim-1"}
    assert len({(r.trace_id, r.span_id) for r in records}) == len(records)
    for r in records[:500]:
        assert r.engine == "vllm"
        assert r.ttft_s == pytest.approx(r.preprocess_s + r.queue_s + r.prefill_s)
        assert r.e2e_s == pytest.approx(r.ttft_s + r.decode_s)
        assert r.output_tokens is not None
        if r.output_tokens > 1:
            assert r.tpot_s == pytest.approx(r.decode_s / (r.output_tokens - 1))
        assert r.finish_reason in {"stop", "length"}


def test_coalesced_decode_steps_give_the_same_run_as_single_steps(
    profile_8b: ModelProfile,
) -> None:
    fault = Fault(FaultKind.KV_PRESSURE, "x", 40.0, 80.0, 0.01)

    def run(coalesce: bool) -> Batch:
        seeds = np.random.SeedSequence(11).spawn(2)
        faults = FaultSchedule([fault])
        arrivals = ArrivalStream(
            Poisson(9.0), SHORT_MIX, np.random.default_rng(seeds[0]), faults, max_input_tokens=8192
        )
        sim = InstanceSim(
            "x",
            profile_8b,
            epoch=START,
            rng=np.random.default_rng(seeds[1]),
            arrivals=arrivals,
            faults=faults,
            sample_interval_s=3.0,
            coalesce_steps=coalesce,
        )
        sim.advance_to(120.0)
        return sim.drain()

    single, coalesced = run(False), run(True)
    assert len(single.completions) == len(coalesced.completions) > 500
    for a, b in zip(single.completions, coalesced.completions, strict=True):
        assert a.record.trace_id == b.record.trace_id
        for name in ("ttft_s", "tpot_s", "e2e_s", "queue_s", "decode_s"):
            assert getattr(a.record, name) == pytest.approx(getattr(b.record, name), rel=1e-6)
        assert a.preemptions == b.preemptions
    assert [s.preemptions_total for s in single.server_samples] == [
        s.preemptions_total for s in coalesced.server_samples
    ]
    for a_gpu, b_gpu in zip(single.gpu_samples, coalesced.gpu_samples, strict=True):
        assert a_gpu.util_gpu == pytest.approx(b_gpu.util_gpu, rel=1e-6)
