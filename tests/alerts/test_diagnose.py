"""The decision table, one sentence per cause, on hand-built signals of a two-instance model.

Each case starts from a healthy reference (both instances alike), changes the signals its cause
moves on one instance (``gpu-1``), and expects the default rule pack to name that cause, on that
instance, with the changed signal in the evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.alerts.diagnose import diagnose, ratio, step_onset
from infersight.alerts.rules import Cause, RulePack, load_rules
from infersight.core.errors import InvalidInput
from infersight.core.signals import InstanceSignals, WindowSignals
from infersight.core.window import Window

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
REF = Window(T0, T0 + timedelta(minutes=20))
NOW = Window(T0 + timedelta(minutes=20), T0 + timedelta(minutes=40))

HEALTHY: Mapping[str, float] = {
    "requests": 3000,
    "request_rate": 6.0,
    "error_ratio": 0.0,
    "ttft_p50": 0.03,
    "ttft_p90": 0.06,
    "tpot_p50": 0.008,
    "tpot_p90": 0.009,
    "e2e_p90": 3.5,
    "queue_mean": 0.006,
    "queue_p90": 0.013,
    "preprocess_mean": 0.0013,
    "prefill_mean": 0.03,
    "decode_mean": 1.9,
    "decode_per_token_mean": 0.0085,
    "input_tokens_mean": 610,
    "slow_input_tokens_p50": 1200,
    "requests_running": 12,
    "requests_waiting": 0.1,
    "kv_cache_usage": 0.01,
    "preemptions_per_s": 0.0,
    "util_gpu": 0.8,
    "dram_bw_util": 0.6,
    "sm_clock_mhz": 1980,
    "throttled_share": 0.0,
    "temperature_c": 67,
    "power_w": 570,
    "ecc_sbe_per_s": 0.0,
    "ecc_dbe_per_s": 0.0,
    "xid_samples": 0.0,
}


@pytest.fixture(scope="module")
def pack() -> RulePack:
    return load_rules()


def _window(window: Window, changes: Mapping[str, float]) -> WindowSignals:
    return WindowSignals(
        window,
        (
            InstanceSignals("gpu-0", "llama-8b", HEALTHY),
            InstanceSignals("gpu-1", "llama-8b", {**HEALTHY, **changes}),
        ),
    )


CASES = [
    pytest.param(
        {"ttft_p90": 0.3, "queue_p90": 0.2, "queue_mean": 0.1, "requests_waiting": 4},
        Cause.QUEUE_BACKLOG,
        "queue_p90",
        id="TTFT up with TPOT normal and the queue up → queue_backlog",
    ),
    pytest.param(
        {"ttft_p90": 0.2, "preprocess_mean": 0.07},
        Cause.PREPROCESSING_SLOW,
        "preprocess_mean",
        id="TTFT up with TPOT normal and tokenization 50x slower → preprocessing_slow",
    ),
    pytest.param(
        {"ttft_p90": 0.4, "input_tokens_mean": 4900, "slow_input_tokens_p50": 6000,
         "prefill_mean": 0.3},
        Cause.LONG_INPUTS,
        "input_tokens_mean",
        id="slow requests carry eight times longer prompts → long_inputs",
    ),
    # Saturation needs more work: here the balancer gives gpu-1 a quarter more of the traffic
    # than before and than its peer (not the 1.4× of an overload).
    pytest.param(
        {"tpot_p90": 0.015, "util_gpu": 0.99, "requests_running": 20, "request_rate": 7.5},
        Cause.GPU_SATURATED,
        "util_gpu",
        id="TPOT up with TTFT normal and the GPU busy all the time → gpu_saturated",
    ),
    pytest.param(
        {"tpot_p90": 0.015, "util_gpu": 0.9, "dram_bw_util": 0.95, "requests_running": 20,
         "request_rate": 7.5},
        Cause.MEMORY_BANDWIDTH_BOUND,
        "dram_bw_util",
        id="TPOT up with TTFT normal and DRAM bandwidth at its limit → memory_bandwidth_bound",
    ),
    # The same busy GPU and larger running batch at its peer's traffic, no ECC or XID errors:
    # the same work takes gpu-1 longer — the instance, not saturation.
    pytest.param(
        {"tpot_p90": 0.018, "util_gpu": 0.99, "requests_running": 24, "e2e_p90": 7.0},
        Cause.INSTANCE_DEGRADED,
        "tpot_p90",
        id="one instance slower than its peer at the same traffic, its GPU busy → "
        "instance_degraded, not gpu_saturated",
    ),
    pytest.param(
        {"tpot_p90": 0.016, "throttled_share": 1.0, "sm_clock_mhz": 1100, "temperature_c": 88},
        Cause.GPU_THROTTLED,
        "throttled_share",
        id="TPOT up with thermal clock-event reasons and clocks down → gpu_throttled",
    ),
    pytest.param(
        {"ttft_p90": 0.5, "tpot_p90": 0.03, "kv_cache_usage": 0.97, "preemptions_per_s": 2.0},
        Cause.KV_CACHE_PRESSURE,
        "preemptions_per_s",
        id="TTFT and TPOT up with the KV cache full and preemptions → kv_cache_pressure",
    ),
    pytest.param(
        {"ttft_p90": 0.2, "tpot_p90": 0.03, "request_rate": 18, "queue_p90": 0.05,
         "requests_waiting": 3, "util_gpu": 0.97},
        Cause.OVERLOAD,
        "request_rate",
        id="TTFT and TPOT up with three times the arrivals → overload",
    ),
    pytest.param(
        {"tpot_p90": 0.02, "e2e_p90": 8.0, "ecc_sbe_per_s": 8.0, "xid_samples": 100},
        Cause.INSTANCE_DEGRADED,
        "ecc_sbe_per_s",
        id="one instance twice as slow as its peer with ECC errors → instance_degraded",
    ),
    pytest.param(
        {"tpot_p90": 0.03, "util_gpu": 0.45, "requests_waiting": 3, "preprocess_mean": 0.04},
        Cause.HOST_BOUND,
        "util_gpu",
        id="low GPU utilisation with waiting requests → host_bound",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "cause", "signal"), CASES)
def test_decision_table(
    pack: RulePack, changes: Mapping[str, float], cause: Cause, signal: str
) -> None:
    result = diagnose(_window(NOW, changes), _window(REF, {}), pack)
    assert result.cause is cause, result.to_dict()
    assert result.instance == "gpu-1"
    assert signal in {e.signal for e in result.evidence}
    assert 0.5 <= result.confidence <= 1.0
    assert all(a.confidence <= result.confidence for a in result.alternatives)
    assert result.missing_evidence == ()  # every signal family was there


def test_nothing_changed_is_unknown_with_no_confidence(pack: RulePack) -> None:
    result = diagnose(_window(NOW, {}), _window(REF, {}), pack)
    assert result.cause is Cause.UNKNOWN
    assert result.confidence == 0.0
    assert result.alternatives == ()


def test_a_symptom_no_rule_explains_is_unknown_with_low_confidence(pack: RulePack) -> None:
    slow = {**HEALTHY, "e2e_p90": 9.0}
    now = WindowSignals(
        NOW,
        (InstanceSignals("gpu-0", "llama-8b", slow), InstanceSignals("gpu-1", "llama-8b", slow)),
    )
    result = diagnose(now, _window(REF, {}), pack)
    assert result.cause is Cause.UNKNOWN
    assert 0.0 < result.confidence <= 0.3
    assert {e.signal for e in result.symptoms} >= {"ttft_p90", "e2e_p90"}


def test_an_instance_with_too_few_requests_is_not_judged(pack: RulePack) -> None:
    changes = {"requests": 5, "tpot_p90": 0.03, "throttled_share": 1.0}
    result = diagnose(_window(NOW, changes), _window(REF, {}), pack)
    assert result.cause is Cause.UNKNOWN


def test_two_faults_on_two_instances_rank_both_causes_first(pack: RulePack) -> None:
    now = WindowSignals(
        NOW,
        (
            InstanceSignals("a-0", "m-a", {**HEALTHY, "tpot_p90": 0.016, "throttled_share": 1.0}),
            InstanceSignals("a-1", "m-a", HEALTHY),
            InstanceSignals(
                "b-0", "m-b", {**HEALTHY, "ttft_p90": 5.0, "request_rate": 15, "queue_p90": 4}
            ),
            InstanceSignals("b-1", "m-b", HEALTHY),
        ),
    )
    ref = WindowSignals(
        REF, tuple(InstanceSignals(n, "m-" + n[0], HEALTHY) for n in ("a-0", "a-1", "b-0", "b-1"))
    )
    result = diagnose(now, ref, pack)
    assert set(result.ranked[:2]) == {Cause.GPU_THROTTLED, Cause.OVERLOAD}
    json = result.to_dict()
    assert set(json) >= {"cause", "confidence", "evidence", "alternatives"}
    assert set(json["evidence"][0]) >= {"signal", "current", "baseline", "ratio"}


def test_a_zero_reference_gives_an_infinite_ratio_rendered_as_null(pack: RulePack) -> None:
    assert ratio(2.0, 0.0) == float("inf")
    assert ratio(0.0, 0.0) == 1.0
    assert ratio(3.0, None) is None
    result = diagnose(
        _window(NOW, {"tpot_p90": 0.02, "ecc_sbe_per_s": 8.0}), _window(REF, {}), pack
    )
    ecc = next(e for e in result.to_dict()["evidence"] if e["signal"] == "ecc_sbe_per_s")
    assert ecc["ratio"] is None
    assert ecc["baseline"] == 0.0


def test_signals_reject_unknown_names_and_negative_values() -> None:
    with pytest.raises(InvalidInput):
        InstanceSignals("gpu-0", "m", {"not_a_signal": 1.0})
    with pytest.raises(InvalidInput):
        InstanceSignals("gpu-0", "m", {"util_gpu": -1.0})


def test_slow_tokenization_with_slower_decode_steps_is_the_host_not_the_tokenizer(
    pack: RulePack,
) -> None:
    # The first minute of a CPU-starved host: tokenization 25x slower, decode steps 3x slower,
    # the GPU's utilisation not yet far down. The tokenizer alone cannot slow decode steps.
    changes = {"ttft_p90": 0.13, "tpot_p90": 0.029, "preprocess_mean": 0.022, "util_gpu": 0.7}
    result = diagnose(_window(NOW, changes), _window(REF, {}), pack)
    assert result.cause is not Cause.PREPROCESSING_SLOW
    assert Cause.PREPROCESSING_SLOW not in result.ranked


def _errors(share: Mapping[str, int]) -> dict[str, dict[str, int]]:
    return {"gpu-0": dict(share), "gpu-1": dict(share)}


def test_a_total_outage_stays_unknown_with_the_error_ratio_and_types_as_evidence(
    pack: RulePack,
) -> None:
    failing = {**HEALTHY, "error_ratio": 1.0}
    now = WindowSignals(
        NOW,
        (
            InstanceSignals("gpu-0", "llama-8b", failing),
            InstanceSignals("gpu-1", "llama-8b", failing),
        ),
    )
    errors = _errors({"upstream_unavailable": 2700, "timeout": 300})
    result = diagnose(now, _window(REF, {}), pack, errors, {})
    assert result.cause is Cause.UNKNOWN
    assert 0.0 < result.confidence <= 0.3
    assert result.instance == ""  # every instance fails: the scope, not one of them
    evidence = {e.signal: e for e in result.evidence}
    assert list(evidence) == [
        "error_ratio",
        "error_type:upstream_unavailable",
        "error_type:timeout",
    ]
    assert evidence["error_ratio"].current == pytest.approx(1.0)
    assert evidence["error_ratio"].baseline == pytest.approx(0.0)
    assert evidence["error_type:upstream_unavailable"].current == pytest.approx(0.9)
    assert evidence["error_type:timeout"].current == pytest.approx(0.1)
    assert evidence["error_type:timeout"].baseline is None  # no failures in the reference


def test_error_types_are_compared_with_their_share_in_the_reference(pack: RulePack) -> None:
    now = WindowSignals(
        NOW, tuple(InstanceSignals(n, "m", {**HEALTHY, "error_ratio": 0.5}) for n in ("a", "b"))
    )
    ref = WindowSignals(
        REF, tuple(InstanceSignals(n, "m", {**HEALTHY, "error_ratio": 0.002}) for n in ("a", "b"))
    )
    errors = {"a": {"oom": 750, "timeout": 750}, "b": {"oom": 1500}}
    before = {"a": {"timeout": 3}, "b": {"timeout": 3}}
    result = diagnose(now, ref, pack, errors, before)
    evidence = {e.signal: e for e in result.evidence}
    assert evidence["error_type:oom"].current == pytest.approx(0.75)
    assert evidence["error_type:oom"].baseline == pytest.approx(0.0)
    assert evidence["error_type:timeout"].baseline == pytest.approx(1.0)
    assert evidence["error_type:timeout"].ratio == pytest.approx(0.25)
    assert evidence["error_ratio"].ratio == pytest.approx(250.0)


def test_one_instance_failing_while_its_peer_serves_is_a_degraded_instance(
    pack: RulePack,
) -> None:
    changes = {"error_ratio": 0.4, "util_gpu": 0.3, "xid_samples": 12}
    errors = {"gpu-1": {"xid_79": 1200}}
    result = diagnose(_window(NOW, changes), _window(REF, {}), pack, errors, {})
    assert result.cause is Cause.INSTANCE_DEGRADED, result.to_dict()
    assert result.instance == "gpu-1"
    signals = [e.signal for e in result.evidence]
    assert "error_ratio" in signals
    assert "error_type:xid_79" in signals


@pytest.mark.parametrize(
    ("ratios", "onset"),
    [
        pytest.param([0.0, 0.0, 0.0, 0.02, 0.03], 3, id="a clean step up is found where it starts"),
        pytest.param(
            [0.0, 0.001, 0.0, 0.0, 0.01, 0.012, 0.011], 4, id="noise before it is ignored"
        ),
        pytest.param([0.0, 0.0, 0.0, 0.0, 0.05], 4, id="a step in the last minute is found"),
        pytest.param([0.05, 0.04, 0.0, 0.0], None, id="a step down is no onset"),
        pytest.param([0.01, 0.01, 0.01], None, id="a flat series has no onset"),
        pytest.param([0.3], None, id="one minute has no onset"),
        pytest.param([], None, id="no minutes have no onset"),
    ],
)
def test_step_onset(ratios: list[float], onset: int | None) -> None:
    assert step_onset(ratios) == onset


@given(
    quiet=st.integers(1, 40),
    burning=st.integers(1, 40),
    low=st.floats(0.0, 0.001),
    high=st.floats(0.005, 1.0),
)
def test_a_two_level_series_steps_where_the_levels_change(
    quiet: int, burning: int, low: float, high: float
) -> None:
    assert step_onset([low] * quiet + [high] * burning) == quiet


def test_support_the_window_cannot_give_is_missing_evidence_not_a_penalty(pack: RulePack) -> None:
    # A failing board at the page: XIDs read, but each board's ECC counter once, so no rate.
    slow = {**HEALTHY, "tpot_p90": 0.018, "util_gpu": 0.99, "xid_samples": 4.0}
    for name in ("ecc_sbe_per_s", "ecc_dbe_per_s"):
        del slow[name]
    now = WindowSignals(
        NOW,
        (InstanceSignals("gpu-0", "llama-8b", HEALTHY), InstanceSignals("gpu-1", "llama-8b", slow)),
    )
    result = diagnose(now, _window(REF, {}), pack)
    assert result.cause is Cause.INSTANCE_DEGRADED
    assert result.instance == "gpu-1"
    # One support of three held (the XIDs): 0.85 × (0.7 + 0.3 / 3), with no penalty on top.
    assert result.confidence == pytest.approx(0.85 * 0.8)
    assert result.missing_evidence == (
        "the GPU samples of gpu-1 lack ecc_dbe_per_s, ecc_sbe_per_s: cannot rule out clock "
        "throttling or see ECC and XID errors",
    )
