"""Capacity math: GPU memory budgets, physical latency floors and instance counts.

Pure arithmetic over the GPU and model tables of ``core.hardware``.

* **Memory budget** of one instance (a model on ``tensor_parallel`` GPUs of one kind):
  weights + KV cache (KV bytes per token × concurrency × context) + activations + one CUDA
  context per GPU must stay within ``limit`` (85 %) of the instance's GPU memory; the rest is
  the buffer that keeps a traffic peak from turning into an out-of-memory crash.
* **Floors**: a decode step streams every weight once, so TPOT ≥ weight bytes ÷ memory
  bandwidth (plus the KV bytes the batch reads); a prefill does ≈ 2·params·n + 2·layers·n²·d
  FLOPs (linear layers, then causal attention over ``d = heads × head_dim``), so TTFT ≥ those
  FLOPs ÷ dense 16-bit peak, and never less than one pass over the weights.
* **Instances**: peak QPS × (1 + headroom) ÷ measured per-instance capacity, rounded up; the
  headroom (30–50 %) absorbs bursts and the loss of an instance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from infersight.core.errors import InvalidInput
from infersight.core.hardware import GIB, Catalog, GpuSpec, ModelSpec, positive

# What other modules use (and the types its answers carry); the tuning constants and
# helpers left out are this module's own.
__all__ = [
    "DEFAULT_HEADROOM",
    "CapacityPlan",
    "Finding",
    "Floors",
    "InstancePlan",
    "MemoryBudget",
    "PlanInput",
    "check_targets",
    "floors",
    "instances_needed",
    "memory_budget",
    "plan",
    "plan_instances",
    "plan_to_dict",
    "scale_capacity",
]

DEFAULT_MEMORY_LIMIT: Final = 0.85
#: The 30–50 % of headroom the capacity method asks for; the midpoint is the default.
HEADROOM_RANGE: Final = (0.3, 0.5)
DEFAULT_HEADROOM: Final = 0.4
#: vLLM's default token budget of one engine step (chunked prefill), which sizes activations.
DEFAULT_BATCHED_TOKENS: Final = 8192
_MAX_TP: Final = 64


# -- memory ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """Where one instance's GPU memory goes, in bytes (all its GPUs together)."""

    capacity_bytes: float
    limit_fraction: float
    weights_bytes: float
    kv_bytes_per_token: float
    kv_cache_bytes: float
    activation_bytes: float
    cuda_context_bytes: float
    concurrency: int
    context_tokens: int

    @property
    def limit_bytes(self) -> float:
        return self.capacity_bytes * self.limit_fraction

    @property
    def total_bytes(self) -> float:
        parts = (self.weights_bytes, self.kv_cache_bytes, self.activation_bytes)
        return sum(parts) + self.cuda_context_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.limit_bytes

    @property
    def max_concurrency(self) -> int:
        """The most sequences of ``context_tokens`` whose KV cache fits under the limit."""
        free = self.limit_bytes - self.weights_bytes - self.activation_bytes
        free -= self.cuda_context_bytes
        per_sequence = self.kv_bytes_per_token * self.context_tokens
        return max(0, int(free // per_sequence)) if per_sequence > 0 else 0


def memory_budget(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    concurrency: int,
    context_tokens: int,
    tensor_parallel: int = 1,
    kv_dtype: str | None = None,
    activation_bytes: float | None = None,
    batched_tokens: int = DEFAULT_BATCHED_TOKENS,
    limit: float = DEFAULT_MEMORY_LIMIT,
) -> MemoryBudget:
    """The budget of ``concurrency`` sequences of ``context_tokens`` (input + output) each."""
    _check_tp(tensor_parallel)
    if concurrency < 1 or context_tokens < 1:
        raise InvalidInput("concurrency and context tokens must be ≥ 1")
    if not 0 < limit <= 1:
        raise InvalidInput("the memory limit is a fraction in (0, 1]", details={"limit": limit})
    kv_token = model.kv_bytes_per_token(kv_dtype)
    if activation_bytes is None:
        tokens = min(batched_tokens, concurrency * context_tokens)
        activation_bytes = model.activation_bytes(tokens, concurrency)
    return MemoryBudget(
        capacity_bytes=gpu.memory_bytes * tensor_parallel,
        limit_fraction=limit,
        weights_bytes=model.weight_bytes,
        kv_bytes_per_token=kv_token,
        kv_cache_bytes=kv_token * concurrency * context_tokens,
        activation_bytes=activation_bytes,
        cuda_context_bytes=gpu.cuda_context_bytes * tensor_parallel,
        concurrency=concurrency,
        context_tokens=context_tokens,
    )


def _check_tp(tensor_parallel: int) -> None:
    if not 1 <= tensor_parallel <= _MAX_TP:
        raise InvalidInput(f"tensor_parallel must be in [1, {_MAX_TP}]")


# -- floors ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Floors:
    """Latencies physics does not let an instance beat (seconds)."""

    tpot_s: float
    tpot_at_concurrency_s: float
    ttft_s: float
    prefill_flops: float


def floors(
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    input_tokens: int,
    tensor_parallel: int = 1,
    concurrency: int = 1,
    context_tokens: int = 0,
    kv_dtype: str | None = None,
) -> Floors:
    """TPOT and TTFT floors; tensor parallelism pools bandwidth and FLOPs (no comm cost)."""
    _check_tp(tensor_parallel)
    if input_tokens < 1 or concurrency < 1 or context_tokens < 0:
        raise InvalidInput("input tokens and concurrency must be ≥ 1, context ≥ 0")
    bandwidth = gpu.bandwidth_bytes_per_s * tensor_parallel
    # A dense model reads every weight each step; a mixture of experts the experts routed to.
    weights_pass = model.decode_weight_bytes(1) / bandwidth
    batch_pass = model.decode_weight_bytes(concurrency) / bandwidth
    prefill_pass = model.decode_weight_bytes(input_tokens) / bandwidth
    kv_read = concurrency * context_tokens * model.kv_bytes_per_token(kv_dtype)
    flops = model.prefill_flops(input_tokens)
    return Floors(
        tpot_s=weights_pass,
        tpot_at_concurrency_s=batch_pass + kv_read / bandwidth,
        ttft_s=max(flops / (gpu.dense_flops * tensor_parallel), prefill_pass),
        prefill_flops=flops,
    )


@dataclass(frozen=True, slots=True)
class Finding:
    """One sanity check of a target against physics or the memory budget."""

    check: str
    ok: bool
    message: str


def check_targets(
    fl: Floors, budget: MemoryBudget, *, ttft_target_s: float | None, tpot_target_s: float | None
) -> tuple[Finding, ...]:
    """Targets below the floors cannot be met by any software; an overfull budget crashes."""
    out = [
        Finding(
            "memory",
            budget.fits,
            f"{budget.total_bytes / GIB:.1f} GiB needed of {budget.limit_bytes / GIB:.1f} GiB "
            f"({budget.limit_fraction:.0%} of {budget.capacity_bytes / GIB:.1f} GiB); "
            f"at most {budget.max_concurrency} sequences of {budget.context_tokens} tokens fit",
        )
    ]
    for name, target, floor in (
        ("ttft", ttft_target_s, fl.ttft_s),
        ("tpot", tpot_target_s, fl.tpot_at_concurrency_s),
    ):
        if target is None:
            continue
        ok = target >= floor
        verdict = "above" if ok else "below"
        out.append(
            Finding(
                name,
                ok,
                f"{name.upper()} target {target * 1e3:.1f} ms is {verdict} the physical floor "
                f"{floor * 1e3:.1f} ms",
            )
        )
    return tuple(out)


# -- instances ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstancePlan:
    """How many instances carry a peak with headroom."""

    peak_qps: float
    capacity_rps: float
    headroom: float
    instances: int
    instances_low: int
    instances_high: int

    @property
    def utilisation_at_peak(self) -> float:
        return self.peak_qps / (self.instances * self.capacity_rps)


def instances_needed(peak_qps: float, capacity_rps: float, headroom: float) -> int:
    if not math.isfinite(peak_qps) or peak_qps < 0:
        raise InvalidInput("peak QPS must be ≥ 0", details={"peak_qps": peak_qps})
    positive("capacity", capacity_rps=capacity_rps)
    if not 0 <= headroom <= 4:
        raise InvalidInput("headroom is a fraction in [0, 4]", details={"headroom": headroom})
    # A tiny epsilon keeps an exact fit (e.g. 10 × 1.4 / 14 = 1.0000000002) from rounding up.
    return max(1, math.ceil(peak_qps * (1 + headroom) / capacity_rps - 1e-9))


def plan_instances(
    peak_qps: float, capacity_rps: float, headroom: float = DEFAULT_HEADROOM
) -> InstancePlan:
    low, high = HEADROOM_RANGE
    return InstancePlan(
        peak_qps=peak_qps,
        capacity_rps=capacity_rps,
        headroom=headroom,
        instances=instances_needed(peak_qps, capacity_rps, headroom),
        instances_low=instances_needed(peak_qps, capacity_rps, low),
        instances_high=instances_needed(peak_qps, capacity_rps, high),
    )


def scale_capacity(
    measured_rps: float, measured_output_tokens: float, planned_output_tokens: float
) -> float:
    """Per-instance request capacity at another output length.

    Decode dominates serving time, so what a measurement transfers to another workload is its
    output-token throughput: requests per second scale inversely with the output length.
    """
    positive(
        "capacity",
        measured_rps=measured_rps,
        measured_output_tokens=measured_output_tokens,
        planned_output_tokens=planned_output_tokens,
    )
    return measured_rps * measured_output_tokens / planned_output_tokens


# -- the whole plan -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlanInput:
    """What a capacity plan is asked: the deployment, the traffic and the targets."""

    model: str
    gpu: str
    peak_qps: float
    input_tokens: int
    output_tokens: int
    capacity_rps: float
    tensor_parallel: int = 1
    concurrency: int | None = None
    ttft_target_s: float | None = None
    tpot_target_s: float | None = None
    headroom: float = DEFAULT_HEADROOM
    kv_dtype: str | None = None
    capacity_source: str = "given"
    concurrency_source: str = "given"
    #: What was measured before any rescaling (``None``: the capacity was given).
    measured_capacity_rps: float | None = None
    #: Every step from what was measured (or given) to ``capacity_rps`` and the lengths planned
    #: with, in words: which level of which run, a rescale to another output length, another
    #: GPU than the one measured, a simulated measurement, lengths that are defaults.
    capacity_steps: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.input_tokens <= 10_000_000 or not 1 <= self.output_tokens <= 10_000_000:
            raise InvalidInput("input and output tokens must be between 1 and 10,000,000")
        for name in ("ttft_target_s", "tpot_target_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InvalidInput(f"{name} must be a positive number of seconds")


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    request: PlanInput
    instances: InstancePlan
    concurrency: int
    concurrency_source: str
    memory: MemoryBudget
    floors: Floors
    findings: tuple[Finding, ...]
    #: The catalogue entry the requested model resolved to (weights in its served dtype).
    spec: ModelSpec | None = None
    #: The catalogue entry the requested GPU resolved to.
    gpu_spec: GpuSpec | None = None

    @property
    def feasible(self) -> bool:
        return all(f.ok for f in self.findings)


def planned_concurrency(p: PlanInput, instances: int) -> tuple[int, str]:
    """Sequences in flight per instance at peak: given, else Little's law on the targets."""
    if p.concurrency is not None:
        if p.concurrency < 1:
            raise InvalidInput("concurrency must be ≥ 1")
        return p.concurrency, p.concurrency_source
    if p.ttft_target_s is None or p.tpot_target_s is None:
        raise InvalidInput(
            "give the concurrency per instance, or both latency targets to derive it from"
        )
    e2e = p.ttft_target_s + (p.output_tokens - 1) * p.tpot_target_s
    return max(1, math.ceil(p.peak_qps / instances * e2e)), "little's law at the targets"


def plan(catalog: Catalog, p: PlanInput) -> CapacityPlan:
    model, gpu = catalog.model(p.model), catalog.gpu(p.gpu)
    instances = plan_instances(p.peak_qps, p.capacity_rps, p.headroom)
    concurrency, source = planned_concurrency(p, instances.instances)
    context = p.input_tokens + p.output_tokens
    budget = memory_budget(
        model,
        gpu,
        concurrency=concurrency,
        context_tokens=context,
        tensor_parallel=p.tensor_parallel,
        kv_dtype=p.kv_dtype,
    )
    fl = floors(
        model,
        gpu,
        input_tokens=p.input_tokens,
        tensor_parallel=p.tensor_parallel,
        concurrency=concurrency,
        context_tokens=context,
        kv_dtype=p.kv_dtype,
    )
    findings = check_targets(
        fl, budget, ttft_target_s=p.ttft_target_s, tpot_target_s=p.tpot_target_s
    )
    if model.context_length and context > model.context_length:
        findings += (
            Finding(
                "context",
                False,
                f"{context} tokens a request exceed {model.name}'s context of "
                f"{model.context_length} tokens",
            ),
        )
    return CapacityPlan(p, instances, concurrency, source, budget, fl, findings, model, gpu)


def plan_to_dict(result: CapacityPlan) -> dict[str, Any]:
    """The JSON form the API answers and ``infersight capacity plan --json`` prints."""
    p, m, fl, n = result.request, result.memory, result.floors, result.instances
    return {
        "model": p.model,
        "catalogue_model": result.spec.name if result.spec else None,
        "weight_dtype": (result.spec.weight_dtype or result.spec.dtype) if result.spec else None,
        "expert_dtype": (result.spec.expert_dtype or None) if result.spec else None,
        "gpu": p.gpu,
        "catalogue_gpu": result.gpu_spec.name if result.gpu_spec else None,
        "tensor_parallel": p.tensor_parallel,
        "peak_qps": p.peak_qps,
        "input_tokens": p.input_tokens,
        "output_tokens": p.output_tokens,
        "feasible": result.feasible,
        "instances": {
            "count": n.instances,
            "headroom": n.headroom,
            "range": {"headroom_30": n.instances_low, "headroom_50": n.instances_high},
            "capacity_rps": n.capacity_rps,
            "capacity_source": p.capacity_source,
            "measured_capacity_rps": p.measured_capacity_rps,
            "capacity_steps": list(p.capacity_steps),
            "utilisation_at_peak": n.utilisation_at_peak,
            "gpus": n.instances * p.tensor_parallel,
        },
        "concurrency": {"per_instance": result.concurrency, "source": result.concurrency_source},
        "memory": {
            "capacity_bytes": m.capacity_bytes,
            "limit_bytes": m.limit_bytes,
            "limit_fraction": m.limit_fraction,
            "weights_bytes": m.weights_bytes,
            "kv_bytes_per_token": m.kv_bytes_per_token,
            "kv_cache_bytes": m.kv_cache_bytes,
            "activation_bytes": m.activation_bytes,
            "cuda_context_bytes": m.cuda_context_bytes,
            "total_bytes": m.total_bytes,
            "fits": m.fits,
            "max_concurrency": m.max_concurrency,
        },
        "floors": {
            "tpot_s": fl.tpot_s,
            "tpot_at_concurrency_s": fl.tpot_at_concurrency_s,
            "ttft_s": fl.ttft_s,
            "prefill_flops": fl.prefill_flops,
        },
        "targets": {"ttft_s": p.ttft_target_s, "tpot_s": p.tpot_target_s},
        "findings": [{"check": f.check, "ok": f.ok, "message": f.message} for f in result.findings],
    }
