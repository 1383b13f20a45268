"""A fake NVML with pynvml's interface (names, constants, error classes), for tests: the
GPU state is plain data, and XID events are queued by the test."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    util: tuple[int, int] = (87, 40)
    memory: tuple[int, int] = (60 * 2**30, 80 * 2**30)
    power_mw: int = 612_500
    power_limit_mw: int | None = 700_000
    energy_mj: int = 1_234_567
    temperature_c: int = 71
    clocks: tuple[int, int] = (1755, 2619)
    reasons: int = 0x4 | 0x20
    ecc: tuple[int, int] = (3, 0)
    gpm: dict[int, float] | None = field(
        default_factory=lambda: {
            pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 63.0,
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 41.5,
            pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 55.0,
        }
    )
    migs: list[FakeMig] | None = None
    """MIG mode on, with these MIG devices; ``None``: MIG mode off."""


@dataclass
class FakeMig:
    """A MIG device of a ``FakeGpu`` in MIG mode (what NVML reports of it)."""

    profile: str = "3g.40gb"
    gpu_instance_id: int = 1
    compute_instance_id: int = 0
    slices: int = 3
    uuid: str = "MIG-00000000-0000-0000-0000-000000000001"
    util: tuple[int, int] | None = None  # NVML: not supported on a MIG device
    memory: tuple[int, int] = (20 * 2**30, 40 * 2**30)


class _MetricsGet:
    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]


def _error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class FakeNvml:
    NVMLError = pynvml.NVMLError
    c_nvmlGpmMetricsGet_t = _MetricsGet

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVML_", "nvmlEventType")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.init_error = init_error
        self.xids: queue.Queue[tuple[int, int]] = queue.Queue()
        self.initialised = False

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _error(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    # MIG: a MIG device's handle is ("mig", gpu, index)
    def _mig(self, h: Any) -> FakeMig | None:
        if isinstance(h, tuple):
            return (self.gpus[h[1]].migs or [])[h[2]]
        return None

    def _whole(self, h: Any) -> int:
        if isinstance(h, tuple):
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(h)

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        on = self.gpus[self._whole(h)].migs is not None
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if on else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return 7 if self.gpus[self._whole(h)].migs is not None else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, index: int) -> Any:
        migs = self.gpus[self._whole(h)].migs or []
        if index >= len(migs):
            raise _error(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", h, index)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: Any) -> int:
        return int(h[1])

    def nvmlDeviceGetGpuInstanceId(self, h: Any) -> int:
        mig = self._mig(h)
        if mig is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, h: Any) -> int:
        mig = self._mig(h)
        if mig is None:
            raise _error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return mig.compute_instance_id

    def nvmlDeviceGetAttributes(self, h: Any) -> Any:
        mig = self._mig(h)
        slices = 7 if mig is None else mig.slices
        return SimpleNamespace(gpuInstanceSliceCount=slices, computeInstanceSliceCount=slices)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: int, profile: int) -> Any:
        self._whole(h)
        if profile != pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(sliceCount=7)

    def nvmlDeviceGetName(self, h: Any) -> str:
        mig = self._mig(h)
        if mig is not None:
            return f"{self.gpus[h[1]].name} MIG {mig.profile}"
        return self.gpus[h].name

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        mig = self._mig(h)
        return mig.uuid if mig is not None else self.gpus[h].uuid

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        mig = self._mig(h)
        util = self.gpus[self._whole(h)].util if mig is None else mig.util
        if util is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        gpu, memory = util
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        mig = self._mig(h)
        used, total = mig.memory if mig is not None else self.gpus[h].memory
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self.gpus[self._whole(h)].power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        limit = self.gpus[self._whole(h)].power_limit_mw
        if limit is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return limit

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return self.gpus[self._whole(h)].energy_mj

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self.gpus[self._whole(h)].temperature_c

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        sm, mem = self.gpus[self._whole(h)].clocks
        return sm if clock == pynvml.NVML_CLOCK_SM else mem

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self.gpus[self._whole(h)].reasons

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        assert counter == pynvml.NVML_AGGREGATE_ECC
        sbe, dbe = self.gpus[self._whole(h)].ecc
        return sbe if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else dbe

    # GPM
    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self.gpus[self._whole(h)].gpm is not None))

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(device=None)

    def nvmlGpmSampleGet(self, h: int, sample: Any) -> Any:
        sample.device = h
        return sample

    def nvmlGpmMetricsGet(self, request: _MetricsGet) -> _MetricsGet:
        values = self.gpus[request.sample2.device].gpm or {}
        for metric in request.metrics[: request.numMetrics]:
            metric.value = values[metric.metricId]
        return request

    # XID events
    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, types: int, events: str) -> None:
        assert types & pynvml.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> Any:
        try:
            device, xid = self.xids.get(timeout=min(timeout_ms, 50) / 1000)
        except queue.Empty:
            time.sleep(0)
            raise _error(pynvml.NVML_ERROR_TIMEOUT) from None
        return SimpleNamespace(
            device=device, eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=xid
        )

    def nvmlEventSetFree(self, events: str) -> None:
        return None
