"""GPU readings through NVML (``pynvml`` from ``nvidia-ml-py``), the module injected so that
tests run against a fake NVML.

Units are converted here: mW → W, mJ → J, percent → ratio. Each field is read on its own: a
field the GPU does not support (``NVMLError``) is ``None``, never a failed sample. XID events
come from an event-set thread; on Hopper and newer the GPM metrics (SM occupancy, DRAM
bandwidth, tensor activity) are computed from two consecutive GPM samples.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from infersight.collector.scrape.flavours import throttle_flags
from infersight.core.errors import InvalidRecord, Unavailable
from infersight.core.samples import GpuSample

log = logging.getLogger(__name__)


class NvmlUnavailable(Unavailable):
    """No NVML library, no driver or no GPU."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Gpm:
    """GPM metrics of one device from consecutive samples (Hopper+)."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml
        self.handle = handle
        self.previous = nvml.nvmlGpmSampleGet(handle, nvml.nvmlGpmSampleAlloc())
        self.current = nvml.nvmlGpmSampleAlloc()
        self.ids = (
            nvml.NVML_GPM_METRIC_SM_OCCUPANCY,
            nvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
            nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        )

    def read(self) -> dict[str, float | None]:
        nvml = self.nvml
        nvml.nvmlGpmSampleGet(self.handle, self.current)
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.ids)
        request.sample1, request.sample2 = self.previous, self.current
        for i, metric_id in enumerate(self.ids):
            request.metrics[i].metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        self.previous, self.current = self.current, self.previous
        values = [
            None if m.nvmlReturn != 0 else min(1.0, max(0.0, m.value / 100.0))
            for m in list(request.metrics)[: len(self.ids)]
        ]
        return dict(zip(("sm_occupancy", "dram_bw_util", "tensor_util"), values, strict=True))


class NvmlSource:
    def __init__(
        self, nvml: Any, instance: str, on_xid: Callable[[int, int], None] | None = None
    ) -> None:
        self.nvml = nvml
        self.instance = instance
        count = nvml.nvmlDeviceGetCount()
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.names = [self._try(_text, nvml.nvmlDeviceGetName, h) or "" for h in self.handles]
        self.uuids = [self._try(_text, nvml.nvmlDeviceGetUUID, h) or "" for h in self.handles]
        self.gpm = [self._gpm(h) for h in self.handles]
        self.last_xid: dict[int, int] = {}
        self._on_xid = on_xid
        self._stop = threading.Event()
        self._xid_thread = threading.Thread(target=self._watch_xid, name="nvml-xid", daemon=True)
        self._xid_thread.start()

    @classmethod
    def open(
        cls,
        instance: str,
        nvml: Any | None = None,
        on_xid: Callable[[int, int], None] | None = None,
    ) -> NvmlSource:
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")  # from nvidia-ml-py
            except ImportError:
                raise NvmlUnavailable("nvidia-ml-py is not installed") from None
        assert nvml is not None
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, …
            raise NvmlUnavailable(f"NVML did not initialise ({exc})") from None
        try:
            if nvml.nvmlDeviceGetCount() == 0:
                raise NvmlUnavailable("NVML sees no GPU")
            return cls(nvml, instance, on_xid)
        except NvmlUnavailable:
            nvml.nvmlShutdown()
            raise

    def _try(self, convert: Callable[[Any], Any], fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return convert(fn(*args))
        except self.nvml.NVMLError:
            return None

    def _gpm(self, handle: Any) -> _Gpm | None:
        try:
            if not self.nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                return None
            return _Gpm(self.nvml, handle)
        except (self.nvml.NVMLError, AttributeError):
            return None

    def read(self, ts: datetime) -> list[GpuSample]:
        samples = []
        for index, handle in enumerate(self.handles):
            try:
                samples.append(self._read_one(ts, index, handle))
            except InvalidRecord as exc:
                log.warning("GPU %d gave an implausible reading: %s", index, exc.message)
        return samples

    def _read_one(self, ts: datetime, index: int, handle: Any) -> GpuSample:
        nvml, get = self.nvml, self._try
        util = get(lambda u: u, nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = get(lambda m: m, nvml.nvmlDeviceGetMemoryInfo, handle)
        reasons = get(int, nvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
        gpm: dict[str, float | None] = {}
        if self.gpm[index] is not None:
            try:
                gpm = self.gpm[index].read()  # type: ignore[union-attr]
            except nvml.NVMLError:
                gpm = {}
        return GpuSample(
            ts=ts,
            instance=self.instance,
            gpu_index=index,
            uuid=self.uuids[index],
            name=self.names[index],
            util_gpu=None if util is None else util.gpu / 100.0,
            util_memory=None if util is None else util.memory / 100.0,
            memory_used_bytes=None if memory is None else float(memory.used),
            memory_total_bytes=None if memory is None else float(memory.total),
            power_w=get(lambda mw: mw / 1000.0, nvml.nvmlDeviceGetPowerUsage, handle),
            power_limit_w=get(lambda mw: mw / 1000.0, nvml.nvmlDeviceGetEnforcedPowerLimit, handle),
            energy_j=get(lambda mj: mj / 1000.0, nvml.nvmlDeviceGetTotalEnergyConsumption, handle),
            temperature_c=get(
                float, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
            ),
            sm_clock_mhz=get(float, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
            memory_clock_mhz=get(float, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
            throttle_reasons=() if reasons is None else throttle_flags(reasons),
            ecc_sbe_total=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ecc_dbe_total=self._ecc(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            xid_last=self.last_xid.get(index),
            **gpm,
        )

    def _ecc(self, handle: Any, kind: int) -> float | None:
        nvml = self.nvml
        value: float | None = self._try(
            float, nvml.nvmlDeviceGetTotalEccErrors, handle, kind, nvml.NVML_AGGREGATE_ECC
        )
        return value

    def _watch_xid(self) -> None:
        nvml = self.nvml
        try:
            events = nvml.nvmlEventSetCreate()
            for handle in self.handles:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
        except nvml.NVMLError as exc:
            log.info("XID events not available: %s", exc)
            return
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(events, 500)
            except nvml.NVMLError:
                continue  # NVML_ERROR_TIMEOUT: nothing happened
            index = self._index_of(data.device)
            if index is not None:
                self.last_xid[index] = int(data.eventData)
                if self._on_xid is not None:
                    self._on_xid(index, int(data.eventData))
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlEventSetFree(events)

    def _index_of(self, device: Any) -> int | None:
        for index, handle in enumerate(self.handles):
            if handle == device:
                return index
        return None

    def close(self) -> None:
        self._stop.set()
        self._xid_thread.join(timeout=2)
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()
