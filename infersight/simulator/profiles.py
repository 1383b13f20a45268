"""Model and GPU profiles: the numbers that make a simulated server behave like a real one.

The values live in data files (``simulator/profiles/*.yaml``, with their calibration sources
cited there); this module holds the validated, immutable types and derived quantities such as
the KV-cache capacity in tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from infersight.core.errors import InvalidInput

MIB: Final = 1024 * 1024
GIB: Final = 1024 * MIB


def _positive(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not math.isfinite(value) or value <= 0:
            raise InvalidInput(f"{owner}.{name} must be a positive number", details={name: value})


def _nonnegative(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not math.isfinite(value) or value < 0:
            raise InvalidInput(f"{owner}.{name} must be ≥ 0", details={name: value})


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """One GPU model: memory, clocks and the power envelope."""

    name: str
    product_name: str
    memory_total_mib: float
    memory_bandwidth_gbps: float
    sm_clock_max_mhz: float
    sm_clock_idle_mhz: float
    memory_clock_mhz: float
    power_idle_w: float
    power_limit_w: float
    power_max_dynamic_w: float
    temperature_ambient_c: float
    temperature_per_w: float

    def __post_init__(self) -> None:
        _positive(
            "gpu",
            memory_total_mib=self.memory_total_mib,
            memory_bandwidth_gbps=self.memory_bandwidth_gbps,
            sm_clock_max_mhz=self.sm_clock_max_mhz,
            sm_clock_idle_mhz=self.sm_clock_idle_mhz,
            memory_clock_mhz=self.memory_clock_mhz,
            power_limit_w=self.power_limit_w,
        )
        _nonnegative(
            "gpu",
            power_idle_w=self.power_idle_w,
            power_max_dynamic_w=self.power_max_dynamic_w,
            temperature_per_w=self.temperature_per_w,
        )
        if self.power_idle_w + self.power_max_dynamic_w > self.power_limit_w:
            raise InvalidInput("gpu idle + dynamic power exceeds the power limit")

    @property
    def memory_total_bytes(self) -> float:
        return self.memory_total_mib * MIB


@dataclass(frozen=True, slots=True)
class StepCosts:
    """Time of one engine step: CPU scheduling, then a GPU forward pass over the batch.

    ``gpu = decode_base + decode_per_seq·seqs + decode_per_kv_token·kv + prefill_per_token·p``
    """

    cpu_overhead_s: float
    decode_base_s: float
    decode_per_seq_s: float
    decode_per_kv_token_s: float
    prefill_per_token_s: float

    def __post_init__(self) -> None:
        _nonnegative(
            "step",
            cpu_overhead_s=self.cpu_overhead_s,
            decode_per_seq_s=self.decode_per_seq_s,
            decode_per_kv_token_s=self.decode_per_kv_token_s,
        )
        _positive(
            "step", decode_base_s=self.decode_base_s, prefill_per_token_s=self.prefill_per_token_s
        )

    def gpu_time(self, seqs: int, kv_tokens: float, prefill_tokens: int) -> float:
        return (
            self.decode_base_s
            + self.decode_per_seq_s * seqs
            + self.decode_per_kv_token_s * kv_tokens
            + self.prefill_per_token_s * prefill_tokens
        )


@dataclass(frozen=True, slots=True)
class TokenizerCosts:
    """CPU time to tokenize and assemble one prompt (one frontend worker, FIFO)."""

    base_s: float
    per_token_s: float

    def __post_init__(self) -> None:
        _nonnegative("tokenizer", base_s=self.base_s, per_token_s=self.per_token_s)

    def time(self, input_tokens: int) -> float:
        return self.base_s + self.per_token_s * input_tokens


@dataclass(frozen=True, slots=True)
class SpeculativeDecoding:
    """A draft model (or n-gram / EAGLE head) proposing ``num_speculative_tokens`` tokens a
    step, of which the target model accepts ``acceptance_rate`` on average (#30).

    A verification step yields its accepted drafts plus the target model's own token, so
    ``1 + k·a`` tokens; its cost is the profile's decode step (the costs are measured with
    speculation healthy). When acceptance falls, every step yields fewer tokens and the time
    per output token rises by the ratio of the two lengths: speculation pays only while its
    drafts are accepted."""

    num_speculative_tokens: int
    acceptance_rate: float

    def __post_init__(self) -> None:
        if not 1 <= self.num_speculative_tokens <= 64:
            raise InvalidInput("speculative.num_speculative_tokens must be in [1, 64]")
        if not 0.0 <= self.acceptance_rate <= 1.0:
            raise InvalidInput("speculative.acceptance_rate must be in [0, 1]")

    def rate(self, scale: float = 1.0) -> float:
        """The acceptance rate with a fault's scale applied."""
        return min(1.0, self.acceptance_rate * scale)

    def accept_length(self, scale: float = 1.0) -> float:
        """Tokens one verification step yields."""
        return 1.0 + self.num_speculative_tokens * self.rate(scale)

    def slowdown(self, scale: float) -> float:
        """How much longer each output token takes than with healthy acceptance."""
        return self.accept_length() / self.accept_length(scale)


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """One model served by vLLM on ``tensor_parallel`` GPUs of one kind."""

    name: str
    model_name: str
    gpu: GpuProfile
    tensor_parallel: int
    weights_gib: float
    activation_reserve_gib: float
    kv_bytes_per_token: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    step: StepCosts
    tokenizer: TokenizerCosts

    def __post_init__(self) -> None:
        if not 1 <= self.tensor_parallel <= 64:
            raise InvalidInput("tensor_parallel must be in [1, 64]")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise InvalidInput("gpu_memory_utilization must be in (0, 1]")
        _positive("model", weights_gib=self.weights_gib, kv_bytes=self.kv_bytes_per_token)
        _nonnegative("model", activation_reserve_gib=self.activation_reserve_gib)
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise InvalidInput(f"model.{name} must be ≥ 1")
        if self.kv_cache_tokens < self.max_model_len:
            raise InvalidInput(
                "the KV cache cannot hold one max_model_len sequence",
                details={"kv_cache_tokens": self.kv_cache_tokens},
            )

    @property
    def reserved_bytes_per_gpu(self) -> float:
        """What vLLM reserves on each GPU at start-up (weights, activations, KV pool)."""
        return self.gpu.memory_total_bytes * self.gpu_memory_utilization

    @property
    def kv_cache_tokens(self) -> int:
        """KV-cache capacity: the reserved memory left after weights and activations."""
        pool = self.reserved_bytes_per_gpu * self.tensor_parallel
        free = pool - (self.weights_gib + self.activation_reserve_gib) * GIB
        return max(0, int(free // self.kv_bytes_per_token))
