"""GPU readings through NVML (``pynvml`` from ``nvidia-ml-py``), the module injected so that
tests run against a fake NVML.

Units are converted here: mW → W, mJ → J, percent → ratio. Each field is read on its own: a
field the GPU does not support (``NVMLError``) is ``None``, never a failed sample. XID events
come from an event-set thread; on Hopper and newer the GPM metrics (SM occupancy, DRAM
bandwidth, tensor activity) are computed from two consecutive GPM samples.

MIG (issue 34): a GPU whose current MIG mode is enabled is not sampled itself; each of its MIG
devices is, as its own ``gpu_index`` (devices are numbered in NVML's order: GPU 0's slices, then
GPU 1's, …), with its parent's UUID, its GPU instance id and its slice: the profile from its
name (``NVIDIA A100-SXM4-80GB MIG 3g.40gb``) and the fraction of the parent it holds — its
GPU-instance slice count (``nvmlDeviceGetAttributes``) over the parent's full GPU-instance
profile's (7, or 4 on an A30). A time-sliced share cannot be seen from NVML: ``share``
(``--gpu-share``) declares the fraction of each whole GPU this instance holds.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from infersight.collector.scrape.flavours import throttle_flags
from infersight.core.errors import InvalidRecord, Unavailable
from infersight.core.gpu_slice import SHARE, GpuSlice, mig_slice, profile_of_name
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


@dataclass(slots=True)
class _Device:
    """What is sampled: a whole GPU, or one MIG device of a GPU in MIG mode."""

    handle: Any
    parent: Any
    name: str
    uuid: str
    gpu_slice: str = ""
    parent_uuid: str = ""
    gpu_instance_id: int | None = None


class NvmlSource:
    def __init__(
        self,
        nvml: Any,
        instance: str,
        on_xid: Callable[[int, int], None] | None = None,
        share: Fraction | None = None,
    ) -> None:
        self.nvml = nvml
        self.instance = instance
        self.share = share
        count = nvml.nvmlDeviceGetCount()
        self.parents = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.devices: list[_Device] = []
        for handle in self.parents:
            self.devices += self._devices_of(handle)
        self.handles = [d.handle for d in self.devices]
        self.names = [d.name for d in self.devices]
        self.uuids = [d.uuid for d in self.devices]
        self.gpm = [self._gpm(d.handle) if not d.parent_uuid else None for d in self.devices]
        self.last_xid: dict[int, int] = {}
        self._on_xid = on_xid
        self._stop = threading.Event()
        self._xid_thread = threading.Thread(target=self._watch_xid, name="nvml-xid", daemon=True)
        self._xid_thread.start()

    def _devices_of(self, handle: Any) -> list[_Device]:
        """The GPU itself, or its MIG devices when its MIG mode is on."""
        nvml = self.nvml
        name = self._try(_text, nvml.nvmlDeviceGetName, handle) or ""
        uuid = self._try(_text, nvml.nvmlDeviceGetUUID, handle) or ""
        whole = _Device(handle, handle, name, uuid)
        if self.share is not None:
            whole.gpu_slice = GpuSlice(SHARE, self.share).text
            whole.parent_uuid = uuid
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except (nvml.NVMLError, AttributeError):
            return [whole]  # no MIG on this GPU (or an NVML without it)
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return [whole]
        if self.share is not None:
            log.warning("GPU %s is in MIG mode: --gpu-share is ignored for its slices", uuid)
        total = self._parent_slices(handle)
        out = []
        for i in range(self._try(int, nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except nvml.NVMLError:
                continue  # NVML_ERROR_NOT_FOUND: no MIG device at this index
            mig_name = self._try(_text, nvml.nvmlDeviceGetName, mig) or ""
            attributes = self._try(lambda a: a, nvml.nvmlDeviceGetAttributes, mig)
            slices = None if attributes is None else int(attributes.gpuInstanceSliceCount)
            profile = profile_of_name(mig_name)
            if not profile:
                log.warning(
                    "MIG device %d of GPU %s has no profile in its name %r", i, uuid, mig_name
                )
                continue
            out.append(
                _Device(
                    mig,
                    handle,
                    mig_name,
                    self._try(_text, nvml.nvmlDeviceGetUUID, mig) or "",
                    mig_slice(profile, name, slices or None, total).text,
                    uuid,
                    self._try(int, nvml.nvmlDeviceGetGpuInstanceId, mig),
                )
            )
        return out

    def _parent_slices(self, handle: Any) -> int | None:
        """The slice count of the GPU's full GPU-instance profile (7, or 4 on an A30)."""
        nvml = self.nvml
        for profile in ("NVML_GPU_INSTANCE_PROFILE_7_SLICE", "NVML_GPU_INSTANCE_PROFILE_4_SLICE"):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, getattr(nvml, profile))
                return int(info.sliceCount)
            except (nvml.NVMLError, AttributeError):
                continue
        return None

    @classmethod
    def open(
        cls,
        instance: str,
        nvml: Any | None = None,
        on_xid: Callable[[int, int], None] | None = None,
        share: Fraction | None = None,
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
            return cls(nvml, instance, on_xid, share)
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
            gpu_slice=self.devices[index].gpu_slice,
            parent_uuid=self.devices[index].parent_uuid,
            gpu_instance_id=self.devices[index].gpu_instance_id,
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
            for handle in self.parents:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
        except nvml.NVMLError as exc:
            log.info("XID events not available: %s", exc)
            return
        while not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(events, 500)
            except nvml.NVMLError:
                continue  # NVML_ERROR_TIMEOUT: nothing happened
            for index in self._indices_of(data.device):
                self.last_xid[index] = int(data.eventData)
                if self._on_xid is not None:
                    self._on_xid(index, int(data.eventData))
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlEventSetFree(events)

    def _indices_of(self, device: Any) -> list[int]:
        """The sampled devices an event of GPU ``device`` concerns (a GPU's MIG slices)."""
        return [i for i, d in enumerate(self.devices) if device in (d.handle, d.parent)]

    def close(self) -> None:
        self._stop.set()
        self._xid_thread.join(timeout=2)
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()
