"""GPU telemetry of a simulated server: what NVML / dcgm-exporter would read off its boards.

Pure functions of the load over a sample interval (busy fraction), the active fault effects
and the profile. vLLM reserves its memory pool at start-up, so memory used is flat; clocks,
utilisation, power, energy and temperature follow the load.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from infersight.core.samples import GpuSample
from infersight.simulator.faults import Effects
from infersight.simulator.profiles import GIB, ModelProfile

#: CUDA context and NCCL buffers that sit outside vLLM's reserved pool.
_CONTEXT_BYTES = 0.6 * GIB


def gpu_uuid(instance: str, index: int) -> str:
    """A stable, realistic-looking GPU UUID for an instance's ``index``-th board."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"infersight-sim/{instance}/{index}"))


@dataclass(slots=True)
class GpuCounters:
    """Cumulative per-GPU counters that survive between samples."""

    energy_j: float = 0.0
    ecc_sbe: float = 0.0


def gpu_samples(
    *,
    ts: datetime,
    instance: str,
    profile: ModelProfile,
    busy: float,
    interval_s: float,
    fx: Effects,
    counters: list[GpuCounters],
    first_index: int = 0,
) -> list[GpuSample]:
    """One sample per GPU of the instance for an interval with busy fraction ``busy``.

    ``first_index`` numbers the boards: a data-parallel engine ``k`` of an instance with
    ``tp`` GPUs per engine owns GPUs ``k·tp … k·tp + tp − 1``.
    """
    gpu = profile.gpu
    busy = min(1.0, max(0.0, busy))
    active = busy > 0.0
    clock = gpu.sm_clock_max_mhz * fx.clock_scale if active else gpu.sm_clock_idle_mhz
    power = gpu.power_idle_w + gpu.power_max_dynamic_w * busy * fx.clock_scale
    temperature = gpu.temperature_ambient_c + gpu.temperature_per_w * power
    reasons: tuple[str, ...] = () if active else ("gpu_idle",)
    if fx.thermal:
        # A throttled board is hot: clocks are held down because of temperature, not power.
        temperature = max(temperature, 88.0)
        reasons = ("sw_thermal_slowdown", "hw_thermal_slowdown")
    memory_used = profile.reserved_bytes_per_gpu + _CONTEXT_BYTES
    memory_used = min(memory_used, gpu.memory_total_bytes)
    # Decode streams weights and KV from HBM: the memory controller is busy most of the time
    # the SMs are, tensor cores much less.
    dram = busy * 0.75
    out = []
    for offset, c in enumerate(counters):
        index = first_index + offset
        c.energy_j += power * interval_s
        c.ecc_sbe += fx.ecc_sbe_per_s * interval_s
        out.append(
            GpuSample(
                ts=ts,
                instance=instance,
                gpu_index=index,
                uuid=gpu_uuid(instance, index),
                name=gpu.product_name,
                util_gpu=busy,
                util_memory=dram,
                memory_used_bytes=memory_used,
                memory_total_bytes=gpu.memory_total_bytes,
                power_w=power,
                power_limit_w=gpu.power_limit_w,
                energy_j=c.energy_j,
                temperature_c=temperature,
                sm_clock_mhz=clock,
                memory_clock_mhz=gpu.memory_clock_mhz,
                throttle_reasons=reasons,
                ecc_sbe_total=float(int(c.ecc_sbe)),
                ecc_dbe_total=0.0,
                xid_last=63 if c.ecc_sbe >= 1.0 else None,
                sm_occupancy=busy * 0.55,
                dram_bw_util=dram,
                tensor_util=busy * 0.3,
            )
        )
    return out
