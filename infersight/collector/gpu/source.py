"""The GPU source protocol and the sampler that runs one on the periodic-task thread."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from fractions import Fraction
from typing import Protocol

from infersight.collector.gpu.nvml import NvmlSource, NvmlUnavailable
from infersight.collector.scrape.scraper import Scraper
from infersight.core.errors import ConfigurationError
from infersight.core.samples import GpuSample, ServerSample

log = logging.getLogger(__name__)


class GpuSource(Protocol):
    def read(self, ts: datetime) -> list[GpuSample]: ...
    def close(self) -> None: ...


class GpuSampler:
    name = "gpu"

    def __init__(
        self,
        source: GpuSource,
        interval_s: float = 2.0,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.source = source
        self.interval_s = interval_s
        self._now = now

    def sample(self) -> Sequence[GpuSample | ServerSample]:
        return self.source.read(self._now())

    def close(self) -> None:
        self.source.close()


def build_gpu_sampler(
    spec: str,
    instance: str,
    interval_s: float = 2.0,
    on_xid: Callable[[int, int], None] | None = None,
    nvml_module: object | None = None,
    share: Fraction | None = None,
) -> GpuSampler | Scraper | None:
    """``nvml`` | ``dcgm:URL`` | ``none``; ``None`` when there is nothing to sample.

    ``share``: the fraction of each whole GPU this instance holds when GPUs are time-sliced
    (``--gpu-share``; NVML sources only: dcgm-exporter's labels say nothing of it either)."""
    if spec == "none":
        return None
    if spec.startswith("dcgm:"):
        if share is not None:
            raise ConfigurationError("--gpu-share needs --gpu-source nvml")
        return Scraper(spec.removeprefix("dcgm:"), instance, interval_s, name="gpu-dcgm")
    if spec != "nvml":
        raise ConfigurationError(
            "--gpu-source must be nvml, dcgm:URL or none", details={"value": spec}
        )
    try:
        source = NvmlSource.open(instance, nvml_module, on_xid=on_xid, share=share)
    except NvmlUnavailable as exc:
        log.warning("no GPU sampling: %s (the sidecar keeps running without it)", exc.message)
        return None
    return GpuSampler(source, interval_s)
