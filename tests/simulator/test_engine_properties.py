"""Invariants of the engine model for arbitrary small workloads (Hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infersight.core.records import Status
from infersight.simulator.engine import InstanceSim
from infersight.simulator.faults import Effects, Fault, FaultKind, FaultSchedule
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.specs import load_profile
from infersight.simulator.workload import Arrival
from tests.simulator.support import START

PROFILE: ModelProfile = load_profile("llama-3.1-8b-h200x1")

arrivals = st.lists(
    st.tuples(
        st.floats(0.0, 0.5),  # gap to the previous arrival, s
        st.integers(1, 6000),  # prompt tokens
        st.integers(1, 300),  # output tokens
    ),
    min_size=1,
    max_size=60,
)


def simulate(
    workload: list[tuple[float, int, int]], kv_scale: float, seed: int = 0
) -> tuple[InstanceSim, list[Arrival]]:
    faults = FaultSchedule([Fault(FaultKind.KV_PRESSURE, "p", 0.0, 1e6, kv_scale)])
    sim = InstanceSim(
        "p",
        PROFILE,
        epoch=START,
        rng=np.random.default_rng(seed),
        faults=faults,
        sample_interval_s=5.0,
    )
    t, sent = 0.0, []
    for gap, prompt, output in workload:
        t += gap
        a = Arrival(t, prompt, output, 512, "t", "p")
        sim.advance_to(t)
        sim.submit(a)
        sent.append(a)
    sim.advance_to(t + 900.0)
    return sim, sent


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=arrivals, kv_scale=st.sampled_from([1.0, 0.02, 0.008]))
def test_every_request_finishes_once_with_consistent_timings(
    workload: list[tuple[float, int, int]], kv_scale: float
) -> None:
    sim, sent = simulate(workload, kv_scale)
    batch = sim.drain()
    assert len(batch.completions) == len(sent)
    assert sim.running == sim.waiting == 0
    assert len({c.record.span_id for c in batch.completions}) == len(sent)
    for c in batch.completions:
        r = c.record
        assert r.preprocess_s is not None
        assert r.preprocess_s > 0
        if r.status is Status.ERROR:
            assert r.ttft_s is None
            assert r.error_type == "context_length_exceeded"
            continue
        assert r.ttft_s == pytest.approx(r.preprocess_s + r.queue_s + r.prefill_s)
        assert r.e2e_s == pytest.approx(r.ttft_s + r.decode_s)
        assert min(r.queue_s, r.prefill_s, r.decode_s) >= 0
    ok = [c.record for c in batch.completions if c.record.status is Status.OK]
    expected_out = sum(min(a.output_tokens, a.max_tokens) for a in sent) - sum(
        min(a.output_tokens, a.max_tokens)
        for a in sent
        if a.input_tokens > sim.kv_capacity(Effects(kv_scale=kv_scale))
    )
    assert sum(r.output_tokens or 0 for r in ok) == expected_out
    assert sim.generation_tokens_total == expected_out
    for s in batch.server_samples:
        assert 0.0 <= (s.kv_cache_usage or 0.0) <= 1.0
    if kv_scale == 1.0:
        assert sim.preemptions_total == 0


def test_a_prompt_larger_than_the_kv_cache_is_refused_not_stuck() -> None:
    sim, _sent = simulate([(0.0, 20_000, 10), (0.1, 100, 10)], kv_scale=0.01)
    records = [c.record for c in sim.drain().completions]
    assert len(records) == 2
    refused = next(r for r in records if r.input_tokens == 20_000)
    served = next(r for r in records if r.input_tokens == 100)
    assert refused.status is Status.ERROR
    assert refused.finish_reason == "abort"
    assert served.status is Status.OK
    assert sim.errors_total == 1
