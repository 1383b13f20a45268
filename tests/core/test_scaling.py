"""The replica recommender: scale-out signals, the scale-in safety rules, staleness, bounds."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infersight.core.errors import InvalidInput, NotFound
from infersight.core.scaling import (
    INPUTS,
    ScalingInputs,
    ScalingPolicy,
    below_scale_in_threshold,
    policy_for,
    recommend,
    track_low_load,
)

NOW = 1_800_000_000.0
POLICY = ScalingPolicy(name="default", model=None)


def inputs(**overrides: Any) -> ScalingInputs:
    """A pool of 8 instances of 10 req/s each, serving 50 req/s, all inputs fresh and calm:
    50 × 1.4 / 10 = 7 instances are needed, one fewer than observed."""
    base: dict[str, Any] = {
        "model": "llama",
        "observed_instances": 8,
        "capacity_rps": 10.0,
        "demand_rps": 50.0,
        "forecast_rps": 50.0,
        "queue_per_instance": 0.0,
        "service_rate_rps": 6.0,
        "kv_usage": 0.3,
        "burn_rate_short": 0.5,
        "gpu_util": 0.5,
        "low_load_since": NOW - 3600,
        "input_times": dict.fromkeys(INPUTS, NOW - 10),
    }
    base.update(overrides)
    return ScalingInputs(**base)


# -- scale-in rules: a table whose ids are sentences -------------------------------------------

SCALE_IN = [
    pytest.param(
        inputs(low_load_since=NOW - 600),
        8,
        "cooldown",
        id="a pool below threshold for only 10 minutes keeps its instances",
    ),
    pytest.param(
        inputs(low_load_since=None),
        8,
        "cooldown",
        id="a pool whose load has just dropped keeps its instances",
    ),
    pytest.param(
        inputs(low_load_since=NOW - 900),
        7,
        "forecast",
        id="a pool below threshold for the full 15 minutes scales in to what the forecast needs",
    ),
    pytest.param(
        inputs(demand_rps=10.0, forecast_rps=10.0),
        6,
        "scale_in_step",
        id="a pool of 8 that needs 2 loses at most 25 percent, 2 instances, in one step",
    ),
    pytest.param(
        inputs(observed_instances=3, demand_rps=1.0, forecast_rps=1.0),
        2,
        "scale_in_step",
        id="a pool of 3 that needs 1 still loses one instance per step",
    ),
    pytest.param(
        inputs(demand_rps=10.0, forecast_rps=50.0),
        8,
        "rebound",
        id="a pool whose demand is forecast to rebound within the lead time keeps its instances",
    ),
    pytest.param(
        inputs(demand_rps=10.0, forecast_rps=11.0),
        6,
        "scale_in_step",
        id="a forecast that stays within the instances needed now does not block scaling in",
    ),
    pytest.param(
        inputs(demand_rps=None),
        8,
        "hold",
        id="a pool whose demand series is missing never scales in",
    ),
    pytest.param(
        inputs(input_times={**dict.fromkeys(INPUTS, NOW - 10), "forecast_rps": NOW - 600}),
        8,
        "hold",
        id="a pool whose forecast is stale never scales in",
    ),
    pytest.param(
        inputs(observed_instances=2, demand_rps=0.0, forecast_rps=0.0),
        1,
        "min",
        id="a pool with no demand scales in no further than min replicas",
    ),
    pytest.param(
        inputs(queue_per_instance=20.0),
        11,
        "queue",
        id="a pool with a long queue scales out instead of in",
    ),
]


@pytest.mark.parametrize(("given_inputs", "desired", "driver"), SCALE_IN)
def test_scale_in_rules(given_inputs: ScalingInputs, desired: int, driver: str) -> None:
    rec = recommend(POLICY, given_inputs, NOW)
    assert (rec.desired, rec.driver) == (desired, driver), rec.reason
    assert rec.reason


SCALE_OUT = [
    pytest.param(
        inputs(observed_instances=4, forecast_rps=80.0),
        12,
        "forecast",
        id="a forecast of 80 req/s at 10 per instance with 40 percent headroom needs 12",
    ),
    pytest.param(
        inputs(observed_instances=4, forecast_rps=200.0),
        16,
        "max",
        id="a forecast beyond max replicas is capped at max",
    ),
    pytest.param(
        inputs(observed_instances=7, queue_per_instance=30.0),
        14,
        "queue",
        id="a queue of twice the allowed depth doubles the pool",
    ),
    pytest.param(
        inputs(observed_instances=7, kv_usage=0.99),
        8,
        "kv_cache",
        id="a nearly full KV cache adds an instance",
    ),
    pytest.param(
        inputs(observed_instances=7, gpu_util=0.95, queue_per_instance=3.0),
        10,
        "gpu_util",
        id=(
            "GPU utilisation of 95 percent against 70 with requests waiting scales 7 to 10 "
            "as HPA does"
        ),
    ),
    pytest.param(
        inputs(observed_instances=7, gpu_util=0.99, queue_per_instance=0.0),
        7,
        "hold",
        id="a GPU 99 percent busy with nothing waiting is batching, not a reason to scale out",
    ),
    pytest.param(
        inputs(observed_instances=7, burn_rate_short=20.0),
        8,
        "burn_rate",
        id="a fast short-window burn adds an instance",
    ),
    pytest.param(
        inputs(observed_instances=7),
        7,
        "hold",
        id="a pool that fits its forecast exactly holds",
    ),
    pytest.param(
        inputs(observed_instances=0, demand_rps=0.0, forecast_rps=0.0),
        1,
        "min",
        id="an empty pool is raised to min replicas",
    ),
]


@pytest.mark.parametrize(("given_inputs", "desired", "driver"), SCALE_OUT)
def test_scale_out_and_hold(given_inputs: ScalingInputs, desired: int, driver: str) -> None:
    rec = recommend(POLICY, given_inputs, NOW)
    assert (rec.desired, rec.driver) == (desired, driver), rec.reason


def test_the_reason_names_the_driving_input_and_its_value() -> None:
    rec = recommend(POLICY, inputs(observed_instances=4, forecast_rps=80.0), NOW)
    assert "forecast peak 80 req/s" in rec.reason
    assert rec.predictive == 12
    rec = recommend(POLICY, inputs(observed_instances=7, kv_usage=0.99), NOW)
    assert "KV-cache usage 99%" in rec.reason
    rec = recommend(POLICY, inputs(demand_rps=10.0, forecast_rps=50.0), NOW)
    assert "rebound to 50 req/s" in rec.reason


def test_a_decision_that_needed_a_stale_input_says_so() -> None:
    times = {**dict.fromkeys(INPUTS, NOW - 10), "forecast_rps": NOW - 181}
    rec = recommend(POLICY, inputs(input_times=times), NOW)
    assert rec.stale == ("forecast_rps",)
    assert rec.driver == "hold"
    assert "forecast_rps" in rec.reason
    assert rec.predictive is None
    assert rec.forecast_rps is None
    fresh = recommend(POLICY, inputs(input_times={**times, "forecast_rps": NOW - 179}), NOW)
    assert fresh.stale == ()


def test_nothing_measured_holds_and_lists_every_input() -> None:
    empty = dict.fromkeys(INPUTS)
    rec = recommend(POLICY, inputs(**empty, input_times={}), NOW)
    assert (rec.desired, rec.driver) == (8, "hold")
    assert rec.stale == INPUTS


def test_a_reactive_signal_scales_out_even_when_the_forecast_is_stale() -> None:
    times = {**dict.fromkeys(INPUTS, NOW - 10), "forecast_rps": NOW - 3600}
    rec = recommend(
        POLICY, inputs(observed_instances=4, queue_per_instance=30.0, input_times=times), NOW
    )
    assert (rec.desired, rec.driver) == (8, "queue")
    assert "forecast_rps" in rec.stale


def test_low_load_tracking_starts_keeps_and_resets() -> None:
    assert below_scale_in_threshold(POLICY, inputs(), NOW)
    assert not below_scale_in_threshold(POLICY, inputs(observed_instances=7), NOW)
    assert not below_scale_in_threshold(POLICY, inputs(demand_rps=None, forecast_rps=None), NOW)
    since = track_low_load(None, True, NOW)
    assert since == NOW
    assert track_low_load(since, True, NOW + 60) == NOW
    assert track_low_load(since, False, NOW + 60) is None


def test_policy_for_prefers_the_models_own_policy() -> None:
    own = ScalingPolicy(name="llama", model="llama", max_replicas=4)
    assert policy_for([POLICY, own], "llama") is own
    assert policy_for([POLICY, own], "mistral") is POLICY
    with pytest.raises(NotFound, match="mistral"):
        policy_for([own], "mistral")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("min_replicas", -1, "min_replicas"),
        ("max_replicas", 0, "max_replicas"),
        ("headroom", -0.1, "headroom"),
        ("gpu_util_down", 0.8, "gpu_util_down"),
        ("stale_after_s", 0.0, "stale_after_s"),
        ("max_scale_in_fraction", 1.5, "max_scale_in_fraction"),
        ("lead_time_s", float("nan"), "lead_time_s"),
        ("name", "", "name"),
    ],
)
def test_a_bad_policy_names_its_field(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        dataclasses.replace(POLICY, **{field: value})


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(InvalidInput, match="observed_instances"):
        inputs(observed_instances=-1)
    with pytest.raises(InvalidInput, match="demand_rps"):
        inputs(demand_rps=float("inf"))
    with pytest.raises(InvalidInput, match="unknown"):
        inputs(input_times={"bogus": NOW})


# -- properties ----------------------------------------------------------------------------------

_rate = st.floats(min_value=0, max_value=1e4, allow_nan=False)
_maybe_rate = st.none() | _rate
_frac = st.none() | st.floats(min_value=0, max_value=1.0)
_policy = st.builds(
    lambda lo, span, headroom: ScalingPolicy(
        name="p", model=None, min_replicas=lo, max_replicas=max(1, lo) + span, headroom=headroom
    ),
    st.integers(0, 8),
    st.integers(0, 40),
    st.floats(min_value=0.0, max_value=1.0),
)
_inputs = st.builds(
    lambda n, cap, demand, queue, rate, kv, burn, util, low: ScalingInputs(
        model="m",
        observed_instances=n,
        capacity_rps=cap,
        demand_rps=demand,
        forecast_rps=None,
        queue_per_instance=queue,
        service_rate_rps=rate,
        kv_usage=kv,
        burn_rate_short=burn,
        gpu_util=util,
        low_load_since=low,
        input_times={},
    ),
    st.integers(0, 60),
    st.none() | st.floats(min_value=0.01, max_value=1e3),
    _maybe_rate,
    _maybe_rate,
    st.none() | st.floats(min_value=0.01, max_value=1e3),
    _frac,
    st.none() | st.floats(min_value=0, max_value=100),
    _frac,
    st.none() | st.floats(min_value=NOW - 7200, max_value=NOW),
)


@settings(max_examples=300, deadline=None)
@given(_policy, _inputs, _rate, _rate)
def test_desired_is_monotone_in_forecast_demand(
    policy: ScalingPolicy, base: ScalingInputs, a: float, b: float
) -> None:
    low, high = sorted((a, b))
    at_low = recommend(policy, dataclasses.replace(base, forecast_rps=low), NOW)
    at_high = recommend(policy, dataclasses.replace(base, forecast_rps=high), NOW)
    assert at_low.desired <= at_high.desired


@settings(max_examples=300, deadline=None)
@given(_policy, _inputs, _maybe_rate, _rate, _rate)
def test_desired_is_monotone_in_queue(
    policy: ScalingPolicy, base: ScalingInputs, forecast: float | None, a: float, b: float
) -> None:
    low, high = sorted((a, b))
    base = dataclasses.replace(base, forecast_rps=forecast)
    at_low = recommend(policy, dataclasses.replace(base, queue_per_instance=low), NOW)
    at_high = recommend(policy, dataclasses.replace(base, queue_per_instance=high), NOW)
    assert at_low.desired <= at_high.desired


@settings(max_examples=300, deadline=None)
@given(_policy, _inputs, _maybe_rate)
def test_desired_stays_within_min_and_max(
    policy: ScalingPolicy, base: ScalingInputs, forecast: float | None
) -> None:
    rec = recommend(policy, dataclasses.replace(base, forecast_rps=forecast), NOW)
    assert policy.min_replicas <= rec.desired <= policy.max_replicas
    assert rec.driver in {
        "forecast",
        "queue",
        "kv_cache",
        "burn_rate",
        "gpu_util",
        "min",
        "max",
        "cooldown",
        "scale_in_step",
        "rebound",
        "hold",
    }
    assert rec.reason


def test_a_forecast_from_the_recent_peak_says_it_cannot_see_a_rebound() -> None:
    rec = recommend(POLICY, inputs(observed_instances=3, forecast_basis="recent"), NOW)
    assert rec.driver == "forecast"
    assert "no earlier week holds this model" in rec.reason
    plain = recommend(POLICY, inputs(observed_instances=3), NOW)
    assert "earlier week" not in plain.reason


def test_an_unknown_forecast_basis_is_refused() -> None:
    with pytest.raises(InvalidInput, match="forecast_basis"):
        inputs(forecast_basis="guess")
