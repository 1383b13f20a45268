"""Injected faults: what each one does to a simulated server, per instance and time range.

A fault is data (kind, instance, start, end, magnitude); its effect on the engine is a set of
multiplicative factors (``Effects``) that the engine reads at every step and the arrival stream
reads per arrival. Each fault moves the signals its real cause moves and no others; the
expected diagnosis of each kind is recorded as ground truth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from infersight.core.errors import InvalidInput


class FaultKind(StrEnum):
    ARRIVAL_SURGE = "arrival_surge"
    SLOW_TOKENIZER = "slow_tokenizer"
    LONG_PROMPT_FLOOD = "long_prompt_flood"
    THERMAL_THROTTLE = "thermal_throttle"
    KV_PRESSURE = "kv_pressure"
    DEGRADED_INSTANCE = "degraded_instance"
    CPU_STARVED = "cpu_starved"
    SPEC_DECODE_COLLAPSE = "spec_decode_collapse"
    KV_TRANSFER_SLOW = "kv_transfer_slow"
    PREFILL_POOL_OVERLOAD = "prefill_pool_overload"
    DECODE_POOL_OVERLOAD = "decode_pool_overload"


#: Faults of a disaggregated deployment's pool: one names any instance of its pool (its
#: ground truth's instance) and acts on every instance of that pool.
POOL_FAULTS: Final = {
    FaultKind.PREFILL_POOL_OVERLOAD: "prefill",
    FaultKind.DECODE_POOL_OVERLOAD: "decode",
}
#: Faults that only a disaggregated deployment's instance of this role can have.
ROLE_FAULTS: Final = {**POOL_FAULTS, FaultKind.KV_TRANSFER_SLOW: "decode"}


#: The diagnosis (the cause vocabulary of ``alerts.rules.Cause``) each fault should lead to.
EXPECTED_CAUSE: Final = {
    FaultKind.ARRIVAL_SURGE: "overload",
    FaultKind.SLOW_TOKENIZER: "preprocessing_slow",
    FaultKind.LONG_PROMPT_FLOOD: "long_inputs",
    FaultKind.THERMAL_THROTTLE: "gpu_throttled",
    FaultKind.KV_PRESSURE: "kv_cache_pressure",
    FaultKind.DEGRADED_INSTANCE: "instance_degraded",
    FaultKind.CPU_STARVED: "host_bound",
    FaultKind.SPEC_DECODE_COLLAPSE: "spec_decode_collapse",
    FaultKind.KV_TRANSFER_SLOW: "kv_transfer_slow",
    FaultKind.PREFILL_POOL_OVERLOAD: "prefill_pool_saturated",
    FaultKind.DECODE_POOL_OVERLOAD: "decode_pool_saturated",
}

#: The diagnosis each fault should lead to without GPU telemetry (``--gpu-source none``): the
#: fallback the symptom pattern supports (``alerts/rules/default.yaml``'s ``fallbacks``), with
#: the missing evidence stated. A throttled and a degraded board both slow decode on one
#: instance; without clocks, clock-event reasons and ECC counters they look the same — the GPU
#: side, compute or bandwidth unknown (``decode_bound``). A starved host still shows in its
#: slow tokenizer together with slow decode steps (``host_bound``, its idle GPU unseen). The
#: others never needed GPU samples.
EXPECTED_CAUSE_WITHOUT_GPU: Final = {
    **EXPECTED_CAUSE,
    FaultKind.THERMAL_THROTTLE: "decode_bound",
    FaultKind.DEGRADED_INSTANCE: "decode_bound",
}

#: Magnitude used when a scenario gives none; its meaning depends on the kind (see ``effects``).
DEFAULT_MAGNITUDE: Final = {
    FaultKind.ARRIVAL_SURGE: 3.0,  # arrival-rate multiplier
    FaultKind.SLOW_TOKENIZER: 40.0,  # tokenizer CPU-time multiplier
    FaultKind.LONG_PROMPT_FLOOD: 8.0,  # input-length multiplier
    FaultKind.THERMAL_THROTTLE: 0.55,  # SM clock as a fraction of maximum
    FaultKind.KV_PRESSURE: 0.01,  # fraction of the KV cache left to this server
    FaultKind.DEGRADED_INSTANCE: 1.8,  # GPU-time multiplier
    FaultKind.CPU_STARVED: 25.0,  # host CPU-time multiplier
    FaultKind.SPEC_DECODE_COLLAPSE: 0.2,  # draft acceptance as a fraction of its healthy rate
    FaultKind.KV_TRANSFER_SLOW: 30.0,  # KV-transfer time multiplier (to one decode instance)
    FaultKind.PREFILL_POOL_OVERLOAD: 3.0,  # prefill compute-time multiplier (the prefill pool)
    FaultKind.DECODE_POOL_OVERLOAD: 2.5,  # decode step time × and batch slots ÷ (decode pool)
}


@dataclass(frozen=True, slots=True)
class Effects:
    """Multiplicative changes to a server's parameters; the identity means no fault."""

    rate_factor: float = 1.0
    input_factor: float = 1.0
    tokenizer_factor: float = 1.0
    cpu_factor: float = 1.0
    clock_scale: float = 1.0
    gpu_slowdown: float = 1.0
    kv_scale: float = 1.0
    ecc_sbe_per_s: float = 0.0
    thermal: bool = False
    #: The draft tokens' acceptance rate as a fraction of the deployment's own (speculative
    #: decoding only; the traffic changed under a draft model tuned for other prompts).
    spec_acceptance_scale: float = 1.0
    #: Disaggregated serving: the KV transfers into this (decode) instance take this much
    #: longer, and this share of them fails (the request errors on the decode instance).
    kv_transfer_factor: float = 1.0
    kv_failure_share: float = 0.0
    #: Prefill compute per token (a prefill pool with less capacity than it had).
    prefill_factor: float = 1.0
    #: Decode steps take this much longer, and only this share of ``max_num_seqs`` is usable
    #: (a decode pool with less capacity than it had: fewer, slower slots).
    decode_factor: float = 1.0
    seq_scale: float = 1.0

    @property
    def gpu_factor(self) -> float:
        """How much longer a GPU forward pass takes."""
        return self.gpu_slowdown / self.clock_scale


NO_EFFECTS: Final = Effects()


@dataclass(frozen=True, slots=True)
class Fault:
    """One injected fault on one instance over ``[start_s, end_s)`` of scenario time."""

    kind: FaultKind
    instance: str
    start_s: float
    end_s: float
    magnitude: float
    #: ``kv_transfer_slow`` only: the share of the slowed transfers that fail, in [0, 1).
    failing: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.kind, FaultKind):
            try:
                object.__setattr__(self, "kind", FaultKind(str(self.kind)))
            except ValueError:
                allowed = ", ".join(k.value for k in FaultKind)
                raise InvalidInput(f"fault kind must be one of {allowed}") from None
        if not self.instance:
            raise InvalidInput("a fault needs an instance")
        if not (math.isfinite(self.start_s) and math.isfinite(self.end_s)):
            raise InvalidInput("fault times must be finite")
        if not 0.0 <= self.start_s < self.end_s:
            raise InvalidInput(
                "fault needs 0 ≤ start < end", details={"start": self.start_s, "end": self.end_s}
            )
        if not math.isfinite(self.magnitude) or self.magnitude <= 0:
            raise InvalidInput("fault magnitude must be positive")
        fractional = self.kind in (
            FaultKind.THERMAL_THROTTLE,
            FaultKind.KV_PRESSURE,
            FaultKind.SPEC_DECODE_COLLAPSE,
        )
        if fractional and self.magnitude > 1.0:
            raise InvalidInput(f"{self.kind} magnitude is a fraction in (0, 1]")
        if not fractional and self.magnitude < 1.0:
            raise InvalidInput(f"{self.kind} magnitude is a multiplier ≥ 1")
        if not (math.isfinite(self.failing) and 0.0 <= self.failing < 1.0):
            raise InvalidInput("a fault's failing share must be in [0, 1)")
        if self.failing and self.kind is not FaultKind.KV_TRANSFER_SLOW:
            raise InvalidInput("only kv_transfer_slow has a failing share")

    def active(self, t: float) -> bool:
        return self.start_s <= t < self.end_s

    def apply(self, fx: Effects) -> Effects:
        if self.kind is FaultKind.KV_TRANSFER_SLOW:
            return replace(
                fx,
                kv_transfer_factor=fx.kv_transfer_factor * self.magnitude,
                kv_failure_share=1.0 - (1.0 - fx.kv_failure_share) * (1.0 - self.failing),
            )
        return _APPLY[self.kind](fx, self.magnitude)


def _degraded(fx: Effects, m: float) -> Effects:
    # A failing board: slower kernels (retries, row remapping) and correctable ECC errors.
    return replace(fx, gpu_slowdown=fx.gpu_slowdown * m, ecc_sbe_per_s=fx.ecc_sbe_per_s + 2.0)


def _cpu_starved(fx: Effects, m: float) -> Effects:
    # Noisy neighbours on the host: the scheduler loop and the tokenizer both slow down.
    return replace(fx, cpu_factor=fx.cpu_factor * m, tokenizer_factor=fx.tokenizer_factor * m)


_APPLY: Final[dict[FaultKind, Callable[[Effects, float], Effects]]] = {
    FaultKind.ARRIVAL_SURGE: lambda fx, m: replace(fx, rate_factor=fx.rate_factor * m),
    FaultKind.SLOW_TOKENIZER: lambda fx, m: replace(fx, tokenizer_factor=fx.tokenizer_factor * m),
    FaultKind.LONG_PROMPT_FLOOD: lambda fx, m: replace(fx, input_factor=fx.input_factor * m),
    FaultKind.THERMAL_THROTTLE: lambda fx, m: replace(
        fx, clock_scale=fx.clock_scale * m, thermal=True
    ),
    FaultKind.KV_PRESSURE: lambda fx, m: replace(fx, kv_scale=fx.kv_scale * m),
    FaultKind.DEGRADED_INSTANCE: _degraded,
    FaultKind.CPU_STARVED: _cpu_starved,
    FaultKind.SPEC_DECODE_COLLAPSE: lambda fx, m: replace(
        fx, spec_acceptance_scale=fx.spec_acceptance_scale * m
    ),
    FaultKind.PREFILL_POOL_OVERLOAD: lambda fx, m: replace(
        fx, prefill_factor=fx.prefill_factor * m
    ),
    FaultKind.DECODE_POOL_OVERLOAD: lambda fx, m: replace(
        fx, decode_factor=fx.decode_factor * m, seq_scale=fx.seq_scale / m
    ),
}


class FaultSchedule:
    """The faults of one instance, answering ``effects(t)`` cheaply for monotone ``t``."""

    __slots__ = ("_boundaries", "_faults", "_fx", "_hi", "_lo")

    def __init__(self, faults: Sequence[Fault]) -> None:
        self._faults = tuple(faults)
        points = {0.0, math.inf}
        for f in self._faults:
            points.update((f.start_s, f.end_s))
        self._boundaries = sorted(points)
        self._lo = math.inf
        self._hi = -math.inf
        self._fx = NO_EFFECTS

    @property
    def faults(self) -> tuple[Fault, ...]:
        return self._faults

    def effects(self, t: float) -> Effects:
        if self._lo <= t < self._hi:
            return self._fx
        if not self._faults:
            self._lo, self._hi = -math.inf, math.inf
            return NO_EFFECTS
        fx = NO_EFFECTS
        for fault in self._faults:
            if fault.active(t):
                fx = fault.apply(fx)
        lo, hi = -math.inf, math.inf
        for b in self._boundaries:
            if b <= t:
                lo = b
            else:
                hi = b
                break
        self._fx, self._lo, self._hi = fx, lo, hi
        return fx

    def stable_until(self, t: float) -> float:
        """The end of the stretch of time around ``t`` in which the effects do not change."""
        self.effects(t)
        return self._hi

    def max_rate_factor(self) -> float:
        """An upper bound of the arrival-rate factor over all time (for thinning)."""
        factor = 1.0
        for f in self._faults:
            if f.kind is FaultKind.ARRIVAL_SURGE:
                factor *= f.magnitude
        return factor
