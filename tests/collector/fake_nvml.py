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

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.gpus[h].name

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.gpus[h].uuid

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        gpu, memory = self.gpus[h].util
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        used, total = self.gpus[h].memory
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self.gpus[h].power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        limit = self.gpus[h].power_limit_mw
        if limit is None:
            raise _error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return limit

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return self.gpus[h].energy_mj

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self.gpus[h].temperature_c

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        sm, mem = self.gpus[h].clocks
        return sm if clock == pynvml.NVML_CLOCK_SM else mem

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self.gpus[h].reasons

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        assert counter == pynvml.NVML_AGGREGATE_ECC
        sbe, dbe = self.gpus[h].ecc
        return sbe if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else dbe

    # GPM
    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        return SimpleNamespace(isSupportedDevice=int(self.gpus[h].gpm is not None))

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
