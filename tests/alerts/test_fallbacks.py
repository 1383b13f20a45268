"""Diagnosis on partial telemetry: rules that need a missing signal family are skipped, and the
fallbacks name what the symptom pattern supports (the essay's table), with lower confidence
and a sentence per missing family.

Hand-built signals of a two-instance model (``gpu-1`` hurt), as in ``test_diagnose``; a
fleet without GPU telemetry lacks the GPU family on every instance (``--gpu-source none``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from infersight.alerts.diagnose import Diagnosis, diagnose
from infersight.alerts.rules import Cause, RulePack, load_rules
from infersight.core.errors import InvalidInput
from infersight.core.signals import (
    FAMILIES,
    FAMILY_OF,
    GPU,
    REQUESTS,
    SERVER,
    SIGNALS,
    STAGES,
    InstanceSignals,
    WindowSignals,
)
from infersight.core.window import Window
from tests.alerts.test_diagnose import HEALTHY, NOW, REF


@pytest.fixture(scope="module")
def pack() -> RulePack:
    return load_rules()


def _without(values: Mapping[str, float], families: Iterable[str]) -> dict[str, float]:
    gone = set(families)
    return {k: v for k, v in values.items() if FAMILY_OF[k] not in gone}


def _fleet(
    window: Window,
    changes: Mapping[str, float],
    lacking: Iterable[str] = (),
    peers: int = 1,
    drop: Iterable[str] = (),
) -> WindowSignals:
    """``gpu-1`` with ``changes`` and ``peers`` healthy peers, all without the ``lacking``
    families (and without the single signals in ``drop``)."""
    lacking = tuple(lacking)

    def signals(values: Mapping[str, float]) -> dict[str, float]:
        return {k: v for k, v in _without(values, lacking).items() if k not in set(drop)}

    hurt = InstanceSignals("gpu-1", "llama-8b", signals({**HEALTHY, **changes}))
    healthy = [InstanceSignals(f"gpu-{i + 2}", "llama-8b", signals(HEALTHY)) for i in range(peers)]
    return WindowSignals(window, (*healthy, hurt))


def _diagnose(
    pack: RulePack,
    changes: Mapping[str, float],
    lacking: Iterable[str] = (),
    peers: int = 1,
    drop: Iterable[str] = (),
) -> Diagnosis:
    lacking = tuple(lacking)
    return diagnose(
        _fleet(NOW, changes, lacking, peers, drop), _fleet(REF, {}, lacking, peers, drop), pack
    )


#: One instance's decode 1.8× slower: TPOT and the engine's decode time per token up, TTFT up
#: a little (prefill runs on the same GPU), nothing else moves.
DECODE_SLOWER = {"tpot_p90": 0.016, "decode_per_token_mean": 0.015, "ttft_p90": 0.07}
DECODE_BOUND = "no GPU samples for gpu-1: cannot tell compute from memory bandwidth"


def test_a_decode_slowdown_without_gpu_samples_is_decode_bound_on_that_instance(
    pack: RulePack,
) -> None:
    result = _diagnose(pack, DECODE_SLOWER, lacking=[GPU])
    assert result.cause is Cause.DECODE_BOUND, result.to_dict()
    assert result.instance == "gpu-1"
    assert {"tpot_p90", "decode_per_token_mean"} <= {e.signal for e in result.evidence}
    assert result.missing_evidence == (
        "no GPU samples for gpu-1: cannot tell compute from memory bandwidth, "
        "nor see clock throttling",
    )
    # A fallback is a weaker claim than the rules it stands in for.
    assert 0.3 < result.confidence < 0.6
    # One instance out of line is the runner-up (the essay's "one instance → that instance").
    assert result.alternatives[0].cause is Cause.INSTANCE_DEGRADED
    assert result.alternatives[0].missing_evidence
    assert result.to_dict()["missing_evidence"] == list(result.missing_evidence)


@pytest.mark.parametrize(
    ("gpu", "cause"),
    [
        pytest.param(
            {"throttled_share": 1.0, "sm_clock_mhz": 1100}, Cause.GPU_THROTTLED, id="throttled"
        ),
        pytest.param({"util_gpu": 0.99}, Cause.GPU_SATURATED, id="saturated"),
        pytest.param({"dram_bw_util": 0.95}, Cause.MEMORY_BANDWIDTH_BOUND, id="bandwidth"),
    ],
)
def test_with_gpu_samples_the_gpu_causes_still_win(
    pack: RulePack, gpu: Mapping[str, float], cause: Cause
) -> None:
    # A single instance, so the peer comparison (instance_degraded) does not compete.
    with_gpu = _diagnose(pack, {**DECODE_SLOWER, **gpu}, peers=0)
    assert with_gpu.cause is cause, with_gpu.to_dict()
    assert with_gpu.missing_evidence == ()
    without = _diagnose(pack, {**DECODE_SLOWER, **gpu}, lacking=[GPU], peers=0)
    assert without.cause is Cause.DECODE_BOUND
    assert without.missing_evidence[0].startswith(DECODE_BOUND)
    assert without.confidence < with_gpu.confidence


def test_gpu_samples_without_dram_bandwidth_say_which_signal_is_missing(pack: RulePack) -> None:
    # NVML through a path that reports neither DRAM bandwidth nor memory utilisation: the GPU
    # is not saturated (0.9) and not throttled, so only bandwidth could explain it.
    result = _diagnose(pack, {**DECODE_SLOWER, "util_gpu": 0.9}, peers=0, drop=["dram_bw_util"])
    assert result.cause is Cause.DECODE_BOUND, result.to_dict()
    assert result.missing_evidence == (
        "the GPU samples of gpu-1 lack dram_bw_util: cannot tell compute from memory "
        "bandwidth, nor see clock throttling",
    )


def test_ttft_up_without_stage_spans_names_the_queue_but_claims_no_tokenizer(
    pack: RulePack,
) -> None:
    # A tokenizer 50× slower, seen only as TTFT: nothing says where the time went.
    result = _diagnose(pack, {"ttft_p90": 0.2, "preprocess_mean": 0.07}, lacking=[STAGES])
    assert result.cause is Cause.QUEUE_BACKLOG, result.to_dict()
    assert Cause.PREPROCESSING_SLOW not in result.ranked
    assert "preprocess_mean" not in {e.signal for e in result.evidence}
    assert result.missing_evidence == (
        "no stage spans for gpu-1: cannot tell time in the queue from preprocessing (tokenization)",
    )
    assert result.confidence < 0.5
    # With stage spans the tokenizer is named.
    assert _diagnose(pack, {"ttft_p90": 0.2, "preprocess_mean": 0.07}).cause is (
        Cause.PREPROCESSING_SLOW
    )


def test_kv_pressure_without_engine_metrics_falls_back_to_the_queue_and_says_why(
    pack: RulePack,
) -> None:
    kv = {"ttft_p90": 0.5, "queue_p90": 0.4, "kv_cache_usage": 0.99, "preemptions_per_s": 2.0}
    assert _diagnose(pack, kv).cause is Cause.KV_CACHE_PRESSURE
    result = _diagnose(pack, kv, lacking=[SERVER])
    assert result.cause is Cause.QUEUE_BACKLOG, result.to_dict()
    assert result.instance == "gpu-1"
    [sentence] = result.missing_evidence
    assert sentence.startswith("no engine /metrics samples for gpu-1: ")
    assert "cannot see KV-cache usage or preemptions" in sentence


def test_ttft_and_tpot_up_without_engine_metrics_fall_back_to_overload(pack: RulePack) -> None:
    # One instance (no peer to compare with), the KV cache thrashing: requests wait, and
    # preempted ones recompute. Arrivals did not grow, so no rule explains it.
    changes = {"ttft_p90": 0.5, "tpot_p90": 0.03, "queue_p90": 0.4}
    result = _diagnose(pack, changes, lacking=[SERVER], peers=0)
    assert result.cause is Cause.OVERLOAD, result.to_dict()
    assert result.missing_evidence == (
        "no engine /metrics samples for gpu-1: cannot see KV-cache usage or preemptions",
    )
    assert result.confidence < 0.5


def test_a_slow_tokenizer_with_slow_decode_and_no_gpu_samples_is_the_host(
    pack: RulePack,
) -> None:
    changes = {"ttft_p90": 0.13, "tpot_p90": 0.03, "decode_per_token_mean": 0.027,
               "preprocess_mean": 0.04, "queue_p90": 0.05, "requests_waiting": 3}  # fmt: skip
    result = _diagnose(pack, changes, lacking=[GPU])
    assert result.cause is Cause.HOST_BOUND, result.to_dict()
    assert result.instance == "gpu-1"
    assert Cause.PREPROCESSING_SLOW not in result.ranked
    assert "preprocess_mean" in {e.signal for e in result.evidence}
    assert result.missing_evidence == (
        "no GPU samples for gpu-1: cannot confirm that the GPU idles while requests wait",
    )


def test_one_instance_slow_end_to_end_without_gpu_samples_is_that_instance(
    pack: RulePack,
) -> None:
    result = _diagnose(pack, {"e2e_p90": 8.0}, lacking=[GPU])
    assert result.cause is Cause.INSTANCE_DEGRADED, result.to_dict()
    assert result.instance == "gpu-1"
    assert result.missing_evidence == (
        "no GPU samples for gpu-1: cannot rule out clock throttling or see ECC and XID errors",
    )
    assert result.confidence < 0.5


def test_long_inputs_need_nothing_but_the_requests(pack: RulePack) -> None:
    changes = {"ttft_p90": 0.4, "input_tokens_mean": 4900, "slow_input_tokens_p50": 6000,
               "prefill_mean": 0.3}  # fmt: skip
    full = _diagnose(pack, changes)
    bare = _diagnose(pack, changes, lacking=[GPU, SERVER, STAGES])
    assert full.cause is bare.cause is Cause.LONG_INPUTS
    assert bare.instance == "gpu-1"
    assert bare.confidence < full.confidence
    assert {s.split(":")[0] for s in bare.missing_evidence} <= {
        f"no {FAMILIES[f]} for gpu-1" for f in (GPU, SERVER, STAGES)
    }


def test_an_arrival_surge_without_gpu_samples_is_still_overload(pack: RulePack) -> None:
    surge = {"ttft_p90": 0.2, "tpot_p90": 0.03, "request_rate": 18, "queue_p90": 0.05,
             "requests_waiting": 3, "util_gpu": 0.97}  # fmt: skip
    full = _diagnose(pack, surge)
    blind = _diagnose(pack, surge, lacking=[GPU])
    assert full.cause is blind.cause is Cause.OVERLOAD
    assert blind.confidence < full.confidence
    assert blind.missing_evidence
    assert blind.missing_evidence[0].startswith("no GPU samples")


def test_a_measured_zero_is_not_a_missing_signal(pack: RulePack) -> None:
    # GPU utilisation measured at 0 with requests waiting: the host starves an idle GPU.
    idle = {"tpot_p90": 0.03, "util_gpu": 0.0, "requests_waiting": 3, "queue_p90": 0.05}
    assert _diagnose(pack, idle).cause is Cause.HOST_BOUND
    # The same without GPU samples: nothing says the GPU idles.
    assert _diagnose(pack, idle, lacking=[GPU]).cause is not Cause.HOST_BOUND


def test_an_unexplained_symptom_still_says_what_was_not_checked(pack: RulePack) -> None:
    slow = _without({**HEALTHY, "e2e_p90": 9.0}, [GPU])
    now = WindowSignals(
        NOW,
        (InstanceSignals("gpu-0", "llama-8b", slow), InstanceSignals("gpu-1", "llama-8b", slow)),
    )
    ref = WindowSignals(
        REF,
        tuple(InstanceSignals(n, "llama-8b", _without(HEALTHY, [GPU])) for n in ("gpu-0", "gpu-1")),
    )
    result = diagnose(now, ref, pack)
    assert result.cause is Cause.UNKNOWN
    assert result.missing_evidence
    assert all(
        s.startswith(f"no GPU samples for {result.instance}") for s in result.missing_evidence
    )


def test_every_signal_has_a_family() -> None:
    assert set(FAMILY_OF) == set(SIGNALS)
    assert set(FAMILY_OF.values()) == set(FAMILIES)


def test_instance_signals_tell_absent_families_from_zeros() -> None:
    measured = InstanceSignals("gpu-0", "m", {"requests": 10, "util_gpu": 0.0})
    assert measured.has(GPU)
    assert measured.get("util_gpu") == 0.0
    assert not measured.has(SERVER)
    declared = InstanceSignals("gpu-0", "m", {"requests": 10}, frozenset({REQUESTS, SERVER}))
    assert declared.has(SERVER)  # scraped, though without any gauge the rules read
    with pytest.raises(InvalidInput, match="unknown signal families"):
        InstanceSignals("gpu-0", "m", {}, frozenset({"nvml"}))
    with pytest.raises(InvalidInput, match="marked unavailable"):
        InstanceSignals("gpu-0", "m", {"util_gpu": 0.5}, frozenset({REQUESTS}))
