"""Diagnosis signals: per-instance aggregates of one time window, as plain values.

The store computes them (``storage.signals``) and the diagnosis engine (``alerts.diagnose``)
reads them, so neither needs the other: this module is their shared vocabulary. A signal the
source cannot provide (no GPU samples, no requests) is simply absent from ``values`` — never a
0.0 — and each instance says which *families* of signals it had data for in the window
(``available``): telemetry is often partial (no NVML in the container, no engine ``/metrics``,
an engine that emits no stage spans), and the diagnosis must tell "not measured" from "zero".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.records import check_label
from infersight.core.window import Window

#: Every signal name with its unit and meaning (the rule pack may only name these).
SIGNALS: Final[Mapping[str, str]] = {
    "requests": "count: finished requests in the window",
    "request_rate": "1/s: finished requests per second",
    "error_ratio": "ratio: failed requests / requests",
    "ttft_p50": "s: time to first token, median",
    "ttft_p90": "s: time to first token, 90th percentile",
    "tpot_p50": "s: time per output token, median",
    "tpot_p90": "s: time per output token, 90th percentile",
    "e2e_p90": "s: end-to-end latency, 90th percentile",
    "queue_mean": "s: mean time in the scheduler queue",
    "queue_p90": "s: time in the scheduler queue, 90th percentile",
    "preprocess_mean": "s: mean tokenization / prompt assembly time",
    "prefill_mean": "s: mean prefill time",
    "decode_mean": "s: mean decode time",
    "decode_per_token_mean": "s: mean engine decode time per output token after the first",
    "input_tokens_mean": "tokens: mean prompt length",
    "slow_input_tokens_p50": "tokens: median prompt length of the slowest 10 % (by TTFT)",
    "requests_running": "count: mean running requests (server scrape)",
    "requests_waiting": "count: mean waiting requests (server scrape)",
    "kv_cache_usage": "ratio: mean KV-cache usage (server scrape; data-parallel engines' mean)",
    "kv_cache_usage_max": "ratio: mean KV-cache usage of the hottest data-parallel engine",
    "preemptions_per_s": "1/s: preemptions per second (server counter, two scrapes needed)",
    "util_gpu": "ratio: mean GPU utilisation",
    "dram_bw_util": "ratio: mean DRAM bandwidth (or memory-controller) utilisation",
    "sm_clock_mhz": "MHz: mean SM clock while busy",
    "throttled_share": "ratio: share of GPU time with a non-benign clock-event reason",
    "temperature_c": "°C: mean GPU temperature",
    "power_w": "W: mean GPU power",
    "ecc_sbe_per_s": "1/s: correctable ECC errors per second (two readings per board needed)",
    "ecc_dbe_per_s": "1/s: uncorrectable ECC errors per second (two readings per board needed)",
    "xid_samples": "count: GPU samples that report an XID error",
    "spec_acceptance_rate": "ratio: accepted ÷ proposed draft tokens (speculative decoding)",
    "spec_accept_length": "tokens: mean tokens one speculative verification step yields",
    "requests_deferred": "count: mean requests a decode instance holds for their KV cache "
    "(server scrape; disaggregated serving)",
    "kv_transfer_mean": "s: mean time from the prefill leg's end until the decode instance "
    "scheduled the request (KV-cache transfer and the wait behind it; disaggregated requests)",
    "kv_transfer_p90": "s: that time, 90th percentile",
    "prefill_queue_mean": "s: mean queue time of the requests' prefill legs on the prefill "
    "instances (disaggregated requests whose prefill part is stored)",
    "client_pairs": "count: client calls joined to the instance's server records by trace id",
    "client_ttft_p90": "s: time to first token the client saw (joined calls), 90th percentile",
    "client_e2e_p90": "s: end-to-end latency the client saw (joined calls), 90th percentile",
    "gap_ttft_p50": "s: client TTFT − server TTFT of joined calls, median",
    "gap_ttft_p90": "s: client TTFT − server TTFT of joined calls, 90th percentile",
    "gap_e2e_p50": "s: client E2E − server E2E of joined calls, median",
    "gap_e2e_p90": "s: client E2E − server E2E of joined calls, 90th percentile",
}

#: The prefill sources per decode instance whose KV-transfer times the signals keep.
MAX_KV_SOURCES: Final = 64

#: Signal families: where each signal comes from. ``requests`` are the request records
#: themselves (always there for an instance that is judged); the others are separate feeds a
#: deployment may lack. ``client``: client records (``core.client``) joined to the instance's
#: server records by trace id (``core.gap``) — only where callers propagate their trace
#: context. A gap quantile below 0 (the engine's clock of a call longer than the client's:
#: measurement noise of a few milliseconds) reads as 0, as every signal is ≥ 0.
REQUESTS: Final = "requests"
STAGES: Final = "stages"
SERVER: Final = "server"
GPU: Final = "gpu"
CLIENT: Final = "client"
#: Speculative decoding's counters in the engine's ``/metrics`` (only engines that speculate).
SPECULATIVE: Final = "speculative"
#: The P/D stages of disaggregated requests (only instances that decode for a P/D proxy).
DISAGGREGATED: Final = "disaggregated"
#: Families whose absence means a serving feature is off, not that telemetry is missing: an
#: engine that does not speculate has no acceptance counters. A rule that needs one does not
#: apply where it is absent — it is neither blind nor a gap in the evidence.
FEATURE_FAMILIES: Final = frozenset({SPECULATIVE, DISAGGREGATED})
FAMILY_OF: Final[Mapping[str, str]] = {
    **dict.fromkeys(
        ("requests", "request_rate", "error_ratio", "ttft_p50", "ttft_p90", "tpot_p50",
         "tpot_p90", "e2e_p90", "input_tokens_mean", "slow_input_tokens_p50"),
        REQUESTS,
    ),
    **dict.fromkeys(
        ("queue_mean", "queue_p90", "preprocess_mean", "prefill_mean", "decode_mean",
         "decode_per_token_mean"),
        STAGES,
    ),
    **dict.fromkeys(
        ("requests_running", "requests_waiting", "kv_cache_usage", "kv_cache_usage_max",
         "preemptions_per_s", "requests_deferred"),
        SERVER,
    ),
    **dict.fromkeys(
        ("util_gpu", "dram_bw_util", "sm_clock_mhz", "throttled_share", "temperature_c",
         "power_w", "ecc_sbe_per_s", "ecc_dbe_per_s", "xid_samples"),
        GPU,
    ),
    **dict.fromkeys(("spec_acceptance_rate", "spec_accept_length"), SPECULATIVE),
    **dict.fromkeys(("kv_transfer_mean", "kv_transfer_p90", "prefill_queue_mean"), DISAGGREGATED),
    **dict.fromkeys(
        ("client_pairs", "client_ttft_p90", "client_e2e_p90", "gap_ttft_p50", "gap_ttft_p90",
         "gap_e2e_p50", "gap_e2e_p90"),
        CLIENT,
    ),
}  # fmt: skip
#: Each family as the evidence of its absence names it ("no GPU samples for vllm-8b-0: …").
FAMILIES: Final[Mapping[str, str]] = {
    REQUESTS: "requests",
    STAGES: "stage spans",
    SERVER: "engine /metrics samples",
    GPU: "GPU samples",
    CLIENT: "client calls joined by trace id",
    SPECULATIVE: "speculative-decoding counters",
    DISAGGREGATED: "disaggregated (P/D) requests",
}


def families_of(values: Mapping[str, float]) -> frozenset[str]:
    """The families that have at least one signal in ``values``."""
    return frozenset(FAMILY_OF[name] for name in values if name in FAMILY_OF)


@dataclass(frozen=True, slots=True)
class InstanceSignals:
    """The signals of one instance over one window. ``available``: the signal families the
    source had data for (default: those with a signal in ``values``); a family can be
    available with some of its signals absent (an exposition without a KV-cache gauge)."""

    instance: str
    model: str = ""
    values: Mapping[str, float] = field(default_factory=dict)
    available: frozenset[str] | None = None
    #: A decode instance's disaggregated requests: the mean KV-transfer time (s) by the
    #: prefill instance (the P/D proxy's prefill target) each came from, at most
    #: ``MAX_KV_SOURCES`` of them — which prefill → decode pair a slow transfer is on.
    kv_sources: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.kv_sources) > MAX_KV_SOURCES:
            raise InvalidInput(f"at most {MAX_KV_SOURCES} KV sources per instance")
        for source, value in self.kv_sources.items():
            check_label("kv source", source)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise InvalidInput("a KV-transfer time is a finite number ≥ 0")
        object.__setattr__(self, "kv_sources", dict(self.kv_sources))
        if not self.instance:
            raise InvalidInput("instance signals need an instance")
        check_label("instance", self.instance)
        check_label("model", self.model)
        unknown = set(self.values) - set(SIGNALS)
        if unknown:
            raise InvalidInput("unknown signals", details={"signals": sorted(unknown)})
        for name, value in self.values.items():
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise InvalidInput("a signal is a finite number ≥ 0", details={name: repr(value)})
        object.__setattr__(self, "values", dict(self.values))
        available = families_of(self.values) if self.available is None else self.available
        available = frozenset(available)
        if not available <= set(FAMILIES):
            raise InvalidInput("unknown signal families", details={"families": sorted(available)})
        if not families_of(self.values) <= available:
            raise InvalidInput("a signal of a family marked unavailable")
        object.__setattr__(self, "available", available)

    def get(self, name: str) -> float | None:
        return self.values.get(name)

    def has(self, family: str) -> bool:
        """Whether the source had data of ``family`` for this instance in the window."""
        return self.available is not None and family in self.available


@dataclass(frozen=True, slots=True)
class WindowSignals:
    """The signals of every instance in a scope over one window."""

    window: Window
    instances: tuple[InstanceSignals, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "instances", tuple(self.instances))
        names = [s.instance for s in self.instances]
        if len(names) != len(set(names)):
            raise InvalidInput("an instance appears twice in one window's signals")

    def by_instance(self) -> dict[str, InstanceSignals]:
        return {s.instance: s for s in self.instances}
