"""The P/D causes of the decision table (#30), on hand-built signals of two decode instances
behind a P/D proxy: each case changes what its fault moves on ``dec-1`` and expects that cause,
on that instance, with the changed signal in the evidence — and a unified fleet with the same
TTFT rise keeps its old causes (the P/D rules do not apply where nothing was split)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from infersight.alerts.diagnose import diagnose, slow_kv_source
from infersight.alerts.rules import Cause, RulePack, load_rules
from infersight.core.signals import InstanceSignals, WindowSignals
from tests.alerts.test_diagnose import HEALTHY, NOW, REF

#: A decode instance's healthy figures: the user's TTFT includes the prefill leg (prefill_mean)
#: and the KV transfer; the decode instance's own queue is the transfer's (no queue_mean).
PD: Mapping[str, float] = {
    **{k: v for k, v in HEALTHY.items() if not k.startswith("queue")},
    "ttft_p50": 0.30,
    "ttft_p90": 0.45,
    "prefill_mean": 0.25,
    "kv_transfer_mean": 0.03,
    "kv_transfer_p90": 0.05,
    "prefill_queue_mean": 0.02,
    "requests_deferred": 0.3,
}


@pytest.fixture(scope="module")
def pack() -> RulePack:
    return load_rules()


def _window(window, changes: Mapping[str, float], base: Mapping[str, float] = PD) -> WindowSignals:
    return WindowSignals(
        window,
        (
            InstanceSignals("dec-0", "llama-70b", base),
            InstanceSignals("dec-1", "llama-70b", {**base, **changes}),
        ),
    )


CASES = [
    pytest.param(
        {"ttft_p50": 1.2, "ttft_p90": 1.4, "kv_transfer_mean": 0.91, "kv_transfer_p90": 1.1,
         "requests_deferred": 6},
        Cause.KV_TRANSFER_SLOW,
        "kv_transfer_mean",
        id="TTFT up, the KV transfer 30x and requests held for it, TPOT flat → kv_transfer_slow",
    ),
    pytest.param(
        {"ttft_p50": 1.0, "ttft_p90": 1.6, "prefill_mean": 1.0, "prefill_queue_mean": 0.7},
        Cause.PREFILL_POOL_SATURATED,
        "prefill_mean",
        id="TTFT up through the prefill leg and its queue, decode flat → prefill_pool_saturated",
    ),
    pytest.param(
        {"tpot_p50": 0.02, "tpot_p90": 0.025, "e2e_p90": 9.0, "kv_transfer_mean": 0.2,
         "requests_running": 30, "requests_waiting": 5, "ttft_p90": 0.7},
        Cause.DECODE_POOL_SATURATED,
        "requests_running",
        id="TPOT up with fuller batches and requests waiting for a slot → decode_pool_saturated",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "cause", "signal"), CASES)
def test_pd_decision_table(
    pack: RulePack, changes: Mapping[str, float], cause: Cause, signal: str
) -> None:
    result = diagnose(_window(NOW, changes), _window(REF, {}), pack)
    assert result.cause is cause, result.to_dict()
    assert result.instance == "dec-1"
    assert signal in {e.signal for e in result.evidence}
    assert 0.5 <= result.confidence <= 1.0


def test_a_unified_fleet_never_gets_a_pd_cause(pack: RulePack) -> None:
    """The same queue-driven TTFT rise on instances that split nothing: queue_backlog."""
    changes = {"ttft_p90": 0.3, "queue_p90": 0.2, "queue_mean": 0.1, "requests_waiting": 4}
    result = diagnose(_window(NOW, changes, HEALTHY), _window(REF, {}, HEALTHY), pack)
    assert result.cause is Cause.QUEUE_BACKLOG
    pd_causes = {Cause.KV_TRANSFER_SLOW, Cause.PREFILL_POOL_SATURATED, Cause.DECODE_POOL_SATURATED}
    assert not pd_causes & {a.cause for a in result.alternatives}
    assert not any("disaggregated" in m for m in result.missing_evidence)


def _sources(now: Mapping[str, float], before: Mapping[str, float]) -> str:
    return slow_kv_source(
        InstanceSignals("dec-1", "llama-70b", PD, kv_sources=now),
        InstanceSignals("dec-1", "llama-70b", PD, kv_sources=before),
    )


def test_a_slow_kv_transfer_names_its_prefill_to_decode_pair(pack: RulePack) -> None:
    """The decode instance's transfer times by prefill source tell which pair slowed: one
    source (a bad link between two hosts), every source (the decode side), or cannot tell."""
    healthy = {"10.0.0.4:8200": 0.03, "10.0.0.5:8200": 0.03}
    assert _sources({"10.0.0.4:8200": 0.9, "10.0.0.5:8200": 0.031}, healthy) == "10.0.0.4:8200"
    assert _sources({"10.0.0.4:8200": 0.9, "10.0.0.5:8200": 0.8}, healthy) == "*"
    assert _sources({"10.0.0.4:8200": 0.035, "10.0.0.5:8200": 0.03}, healthy) == ""
    assert _sources({"10.0.0.9:8200": 0.9}, healthy) == ""  # a source not seen before

    changes = {"ttft_p50": 1.2, "ttft_p90": 1.4, "kv_transfer_mean": 0.47, "requests_deferred": 6}
    now = WindowSignals(
        NOW,
        (
            InstanceSignals("dec-0", "llama-70b", PD, kv_sources=healthy),
            InstanceSignals(
                "dec-1", "llama-70b", {**PD, **changes},
                kv_sources={"10.0.0.4:8200": 0.9, "10.0.0.5:8200": 0.03},
            ),
        ),
    )  # fmt: skip
    ref = WindowSignals(
        REF,
        tuple(InstanceSignals(n, "llama-70b", PD, kv_sources=healthy) for n in ("dec-0", "dec-1")),
    )
    result = diagnose(now, ref, pack)
    assert (result.cause, result.instance, result.kv_source) == (
        Cause.KV_TRANSFER_SLOW,
        "dec-1",
        "10.0.0.4:8200",
    )
    assert result.to_dict()["kv_source"] == "10.0.0.4:8200"
    other = diagnose(_window(NOW, {"ttft_p90": 0.3, "queue_p90": 0.2}), _window(REF, {}), pack)
    assert other.to_dict()["kv_source"] is None


@pytest.mark.parametrize(("changes", "cause", "signal"), CASES)
def test_split_requests_are_not_said_to_lack_queue_time(
    pack: RulePack, changes: Mapping[str, float], cause: Cause, signal: str
) -> None:
    """A split request's wait for a decode slot is its KV transfer, not a queue: the evidence
    says so instead of "the stage spans lack queue_p90"."""
    result = diagnose(_window(NOW, changes), _window(REF, {}), pack)
    missing = [
        *result.missing_evidence,
        *(m for a in result.alternatives for m in a.missing_evidence),
    ]
    assert not any("lack queue" in m for m in missing), missing
    said = [m for m in missing if "no queue time of their own" in m]
    assert all("counted in the KV transfer (kv_transfer_p90" in m for m in said)


def test_a_unified_instance_without_queue_time_still_says_it_lacks_it(pack: RulePack) -> None:
    base = {k: v for k, v in HEALTHY.items() if not k.startswith("queue")}
    changes = {"ttft_p90": 0.6, "requests_waiting": 4}
    result = diagnose(_window(NOW, changes, base), _window(REF, {}, base), pack)
    missing = [
        *result.missing_evidence,
        *(m for a in result.alternatives for m in a.missing_evidence),
    ]
    assert any("lack queue" in m for m in missing), missing
