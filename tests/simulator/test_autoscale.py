"""The closed-loop scaling backtest (``simulator.autoscale``): the demand day, the fluid service
model against the discrete-event engine, the fleet's cold start and accounting, the policies."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pytest

from infersight.core.errors import InvalidInput
from infersight.core.scaling import ScalingPolicy
from infersight.simulator.autoscale import (
    REBOUND,
    Demand,
    Fleet,
    Observation,
    ServiceModel,
    Static,
    backtest,
    curve,
    from_minutes,
    run_policy,
    synthetic,
    table,
)
from infersight.simulator.autoscale_pd import PdBacktest, pd_backtest, pd_table, pool_capacity
from infersight.simulator.engine import InstanceSim
from infersight.simulator.faults import FaultSchedule
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.scenario import Scenario
from infersight.simulator.specs import load_scenario, scenario_from_data
from infersight.simulator.workload import ArrivalStream, LengthDist, LengthKind, Poisson, RequestMix

POLICY = ScalingPolicy(name="default", model=None)
NO_UTIL = ScalingPolicy(name="no-util", model=None, gpu_util_up=1.0)
H = 3600.0


@pytest.fixture(scope="module")
def service(profile_8b: ModelProfile) -> ServiceModel:
    return ServiceModel(profile_8b)


def _at(hours: float) -> float:
    return float(curve(np.array([hours * H]))[0])


def test_the_day_has_a_morning_ramp_a_quiet_spell_and_the_afternoon_rebound() -> None:
    assert _at(3) == pytest.approx(0.10, abs=0.02)  # night
    ramp = curve(np.linspace(7 * H, 10 * H, 50))
    assert np.all(np.diff(ramp) >= 0)
    assert ramp[-1] - ramp[0] > 0.8
    assert _at(11) > 0.95  # the late-morning peak
    assert _at(13) == pytest.approx(0.22, abs=0.005)  # the quiet spell 12:45–14:00
    assert _at(13.9) == pytest.approx(0.22, abs=0.005)
    assert _at(14 + 20 / 60) > 0.9  # back to near-peak within 20 minutes
    assert _at(22) < 0.3  # the evening decline

    day = synthetic(1)
    rates = day.rates()
    t = day.times
    quiet = rates[(t >= 13 * H) & (t < 13.9 * H)].mean()
    assert day.peak_minute_rps() == pytest.approx(200, rel=0.15)
    assert 0.18 < quiet / 200 < 0.27
    assert len(day.history) == 4  # same-time-of-day weeks for the forecast


def test_the_same_seed_draws_the_same_day_and_the_same_outcome(service: ServiceModel) -> None:
    a, b, c = synthetic(7, step_s=60), synthetic(7, step_s=60), synthetic(8, step_s=60)
    assert np.array_equal(a.arrivals, b.arrivals)
    assert all(np.array_equal(x, y) for x, y in zip(a.history, b.history, strict=True))
    assert not np.array_equal(a.arrivals, c.arrivals)
    assert not np.array_equal(a.arrivals, a.history[0])  # each week has its own noise
    first, second = (backtest(d, service, POLICY) for d in (a, b))
    assert [r.to_dict() for r in first.results] == [r.to_dict() for r in second.results]


def test_the_fluid_service_model_agrees_with_the_discrete_event_engine(
    profile_8b: ModelProfile, service: ServiceModel
) -> None:
    """The per-step model is the engine's step-cost model in fluid form: its TPOT and its
    saturation rate are what ``InstanceSim`` measures for the same 512 / 256-token requests."""
    mix = RequestMix(
        LengthDist(LengthKind.FIXED, 512), LengthDist(LengthKind.FIXED, 256), max_tokens=256
    )
    epoch = datetime(2026, 1, 1, tzinfo=UTC)
    duration, warmup = 200.0, 60.0
    for share in (0.5, 0.85, 1.3):
        rate = share * service.capacity_rps
        faults = FaultSchedule(())
        arrivals = ArrivalStream(
            Poisson(rate), mix, np.random.default_rng(1), faults, max_input_tokens=8192
        )
        sim = InstanceSim(
            "x", profile_8b, epoch=epoch, rng=np.random.default_rng(2), arrivals=arrivals
        )
        sim.advance_to(duration)
        done = [c.record for c in sim.drain().completions]
        steady = [r for r in done if (r.start - epoch).total_seconds() > warmup]
        tpot = float(np.median([r.tpot_s for r in steady if r.tpot_s is not None]))
        predicted = service.step_s(service.batch_for(min(rate, service.saturation_rps)))
        assert tpot == pytest.approx(predicted, rel=0.1)
        if share < 1:  # keeps up, TTFT far below the 2 s target
            assert float(np.percentile([r.ttft_s for r in steady], 99)) < 0.5
        else:  # saturated: output is the fluid model's saturation rate
            assert len(done) / duration == pytest.approx(service.saturation_rps, rel=0.1)


@dataclass
class Scripted:
    """Asks for ``target`` instances from ``at`` seconds on."""

    at: float
    target: int
    start: int = 1
    name: str = "scripted"
    interval_s: float = 10.0

    def desired(self, obs: Observation) -> int:
        return self.target if obs.t >= self.at else self.start


def _flat(rps: float, minutes: int) -> Demand:
    return from_minutes([rps * 60] * minutes, [], step_s=10)


def test_a_new_instance_serves_only_after_the_cold_start_and_is_paid_for_meanwhile(
    service: ServiceModel,
) -> None:
    demand = _flat(5.0, 60)
    fleet = Fleet(service, cold_start_s=600.0, initial=1)
    result = run_policy(Scripted(at=600.0, target=3), demand, fleet)
    t = demand.times
    assert np.all(result.replicas[t < 600] == 1)
    assert np.all(result.replicas[t >= 600] == 3)  # asked for at 600 s ...
    assert np.all(result.ready[t < 1200] == 1)  # ... serving only from 1200 s
    assert np.all(result.ready[t >= 1200] == 3)
    assert result.gpu_hours == pytest.approx((600 * 1 + 3000 * 3) / H)  # cold start is paid
    assert result.scale_events == 1


def test_removal_cancels_a_cold_starting_instance_before_a_serving_one(
    service: ServiceModel,
) -> None:
    @dataclass
    class UpThenDown:
        name: str = "up-then-down"
        interval_s: float = 10.0

        def desired(self, obs: Observation) -> int:
            return 3 if obs.t < 300 else 2

    demand = _flat(5.0, 30)
    result = run_policy(UpThenDown(), demand, Fleet(service, cold_start_s=600.0, initial=2))
    t = demand.times
    # 2 serving, one more asked for at 10 s, cancelled at 300 s: the two serving ones stay.
    assert np.all(result.ready == 2)
    assert np.all(result.replicas[(t >= 10) & (t < 300)] == 3)
    assert np.all(result.replicas[t >= 300] == 2)


def test_with_no_serving_instance_no_request_meets_the_slo(service: ServiceModel) -> None:
    result = run_policy(Static(0), _flat(5.0, 10), Fleet(service, initial=0))
    assert result.met == 0
    assert result.attainment == 0
    assert result.gpu_hours == 0


def test_static_sizing_never_scales_and_covers_the_peak_with_the_headroom(
    service: ServiceModel,
) -> None:
    day = synthetic(3, step_s=30)
    run = backtest(day, service, POLICY, only=("static",))
    [static] = run.results
    assert static.scale_events == 0
    assert static.min_replicas == static.max_replicas == run.static_instances
    assert run.static_instances == math.ceil(day.peak_minute_rps() * 1.4 / service.capacity_rps)
    assert static.attainment > 0.999


def test_each_policys_accounting_adds_up(service: ServiceModel) -> None:
    day = synthetic(5, step_s=30, start_s=11 * H, end_s=16 * H)
    run = backtest(day, service, POLICY, price_per_gpu_hour=3.5, variants=(("no util", NO_UTIL),))
    assert len(run.results) == 5
    rebound = (day.times >= REBOUND[0]) & (day.times < REBOUND[1])
    for r in run.results:
        assert r.requests == pytest.approx(day.arrivals.sum())
        assert 0 <= r.met <= r.requests + 1e-6
        assert r.rebound_requests == pytest.approx(day.arrivals[rebound].sum())
        assert 0 <= r.rebound_met <= r.rebound_requests + 1e-6
        assert r.gpu_hours == pytest.approx(r.replicas.sum() * day.step_s / H)
        assert r.cost == pytest.approx(r.gpu_hours * 3.5)
        changes = int(np.count_nonzero(np.diff(r.replicas)))
        assert changes <= r.scale_events <= changes + 1  # the last decision lands after the day
        assert np.all(r.ready <= r.replicas)
        assert 0 <= r.worst_minute_attainment <= r.attainment + 1e-9
        assert 11 * H <= r.worst_minute_s < 16 * H
    assert "infersight (no util)" in table(run)


def test_infersight_beats_reactive_scaling_on_the_rebound(service: ServiceModel) -> None:
    """The forecast sees the 14:00 rebound a lead time ahead; a queue trigger sees it only once
    requests wait, and its instances arrive a cold start later."""
    day = synthetic(1, step_s=10, start_s=11 * H, end_s=16 * H)
    run = backtest(day, service, POLICY)
    ours, queue, gpu = (run.result(p) for p in ("infersight", "reactive KEDA", "reactive GPU"))
    assert ours.rebound_attainment is not None
    assert queue.rebound_attainment is not None
    assert gpu.rebound_attainment is not None
    assert ours.rebound_attainment > queue.rebound_attainment + 0.2
    assert ours.rebound_attainment >= gpu.rebound_attainment - 0.005
    # ... and it did so by the forecast: it scaled out before the rebound, during the quiet.
    t = day.times
    before = ours.replicas[(t >= 13.5 * H) & (t < 13.75 * H)].max()
    assert ours.replicas[(t >= 13.9 * H) & (t < 14 * H)].max() > before
    assert ours.drivers.get("rebound", 0) > 0  # held through the quiet spell's end


def test_gpu_utilisation_reads_near_full_with_any_real_batch_so_alone_it_never_scales_in(
    service: ServiceModel,
) -> None:
    """The essay's trap, modelled honestly: a few sequences in flight read as a busy GPU. The
    reactive-only 70/30 rule sits at max all night; the recommender, which counts utilisation
    only while requests wait, follows the night's demand down."""
    assert 1 - math.exp(-service.batch_for(2.0)) > 0.9  # 2 req/s on an instance of ~22
    day = synthetic(2, step_s=30)
    run = backtest(day, service, POLICY, only=("reactive-gpu", "infersight"))
    gpu, ours = run.results
    t = day.times
    night = t >= 22 * H
    assert gpu.replicas[night].min() == POLICY.max_replicas  # up all day, never back down
    assert ours.replicas[night].max() < POLICY.max_replicas / 2
    assert ours.gpu_hours < 0.7 * gpu.gpu_hours


def test_bad_demand_is_refused_clearly(service: ServiceModel) -> None:
    with pytest.raises(InvalidInput, match="arrivals"):
        Demand(10.0, 0.0, np.array([1.0, -1.0]), (), "bad")
    with pytest.raises(InvalidInput, match="history week"):
        Demand(10.0, 0.0, np.array([1.0, 1.0]), (np.array([1.0]),), "bad")
    with pytest.raises(InvalidInput, match="divide a minute"):
        from_minutes([1.0], [], step_s=7)
    with pytest.raises(InvalidInput, match="within one day"):
        synthetic(1, start_s=10 * H, end_s=9 * H)
    with pytest.raises(InvalidInput, match="unknown policies"):
        backtest(_flat(1.0, 5), service, POLICY, only=("magic",))


# -- a disaggregated deployment, per pool (simulator.autoscale_pd) -----------------------------


def test_an_unsplit_backtest_is_unchanged(service: ServiceModel) -> None:
    """The figures this window gave before the backtest learnt pools (commit 2ca02c5)."""
    day = synthetic(5, step_s=30, start_s=11 * H, end_s=16 * H)
    run = backtest(day, service, POLICY)
    got = {
        r.name: (r.gpu_hours, r.met, r.scale_events, r.min_replicas, r.max_replicas)
        for r in run.results
    }
    assert got["static (peak)"] == pytest.approx((70.0, 2600691.0, 0, 14, 14))
    assert got["reactive GPU util 70/30"] == pytest.approx(
        (79.96666666666667, 2600691.0, 1, 12, 16)
    )
    assert got["reactive KEDA queue"] == pytest.approx(
        (78.21666666666667, 502993.2383103038, 28, 1, 16)
    )
    assert got["infersight"] == pytest.approx((53.858333333333334, 2600691.0, 19, 3, 14))
    assert run.result("infersight").drivers == {
        "forecast": 14,
        "hold": 227,
        "rebound": 32,
        "cooldown": 22,
        "scale_in_step": 5,
    }


def _pd_scenario(input_tokens: int, output_tokens: int) -> Scenario:
    return scenario_from_data(
        {
            "apiVersion": "infersight/v1",
            "kind": "Scenario",
            "metadata": {"name": "pd-test"},
            "spec": {
                "start": "2026-01-05T00:00:00Z",
                "duration": "1h",
                "seed": 3,
                "fleet": [
                    {
                        "profile": "llama-3.1-8b-h200x1",
                        "name_prefix": "v",
                        "disaggregated": {"prefill_instances": 1, "decode_instances": 1},
                        "arrival": {"process": "poisson", "rate": 1},
                        "mix": {
                            "input": {"kind": "fixed", "median": input_tokens, "max": 32000},
                            "output": {"kind": "fixed", "median": output_tokens, "max": 4096},
                            "max_tokens": output_tokens,
                        },
                    }
                ],
            },
        }
    )


def _pd_run(input_tokens: int, output_tokens: int, pool: str) -> PdBacktest:
    """Ten quiet minutes at half of one ``pool`` engine's capacity, then 20 at four times that."""
    scenario = _pd_scenario(input_tokens, output_tokens)
    d = scenario.deployments[0]
    cap = pool_capacity(d.profile, d.mix, ttft_target_s=2.0, tpot_target_s=0.1)
    low = 0.5 * cap.of(pool) * 60
    minutes = [low] * 10 + [4 * low] * 20
    demand = from_minutes(minutes, [minutes, minutes], step_s=10)
    return pd_backtest(scenario, demand, POLICY, cold_start_s=120.0, price_per_gpu_hour=2.0)


@pytest.fixture(scope="module")
def prefill_heavy() -> PdBacktest:
    return _pd_run(8000, 16, "prefill")


def test_long_prompts_grow_the_prefill_pool_while_the_decode_pool_stays_put(
    prefill_heavy: PdBacktest,
) -> None:
    ours = prefill_heavy.result("infersight")
    prefill, decode = ours.pool("prefill"), ours.pool("decode")
    t = prefill_heavy.demand.times
    assert prefill.replicas[t < 400].max() == 1  # the forecast sees the rise a lead time ahead
    assert prefill.replicas[t >= 1200].min() >= 3  # 2 × one engine's capacity, with headroom
    assert decode.max_replicas == decode.min_replicas == 1
    assert decode.scale_events == 0
    assert ours.attainment > 0.98
    assert prefill_heavy.static_instances == {"prefill": 3, "decode": 1}


def test_each_pools_gpu_hours_are_accounted_and_add_up(prefill_heavy: PdBacktest) -> None:
    day = prefill_heavy.demand
    for r in prefill_heavy.results:
        for p in r.pools:
            assert p.gpu_hours == pytest.approx((p.replicas + p.draining).sum() * day.step_s / H)
            assert np.all(p.ready <= p.replicas)
        assert r.gpu_hours == pytest.approx(sum(p.gpu_hours for p in r.pools))
        assert r.cost == pytest.approx(2.0 * r.gpu_hours)
        assert r.requests > 0
        assert 0 <= r.met <= min(r.ttft_met, r.tpot_met) <= r.requests
    static = prefill_heavy.result("static")
    assert static.pool("prefill").gpu_hours == pytest.approx(3 * 0.5)  # 3 engines, half an hour
    assert static.pool("decode").gpu_hours == pytest.approx(1 * 0.5)
    ours = prefill_heavy.result("infersight")
    assert ours.gpu_hours < static.gpu_hours
    text = pd_table(prefill_heavy)
    assert "prefill pool" in text
    assert "decode pool" in text
    assert prefill_heavy.to_dict()["static_instances"] == {"prefill": 3, "decode": 1}


def test_long_outputs_grow_the_decode_pool_while_the_prefill_pool_stays_put() -> None:
    run = _pd_run(256, 512, "decode")
    ours = run.result("infersight")
    prefill, decode = ours.pool("prefill"), ours.pool("decode")
    t = run.demand.times
    assert decode.replicas[t < 300].max() == 1  # sized for the quiet start
    assert decode.replicas[t >= 1200].min() >= 3
    assert prefill.max_replicas == prefill.min_replicas == 1
    assert prefill.scale_events == 0
    assert ours.attainment > 0.98


def test_a_pd_backtest_needs_one_split_deployment() -> None:
    scenario = load_scenario("quiet-day")
    with pytest.raises(InvalidInput, match="disaggregated"):
        pd_backtest(scenario, _flat(1.0, 5), POLICY, cold_start_s=60.0)
