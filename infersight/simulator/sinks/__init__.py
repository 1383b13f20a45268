"""Where a simulated fleet's output goes: the ``Sink`` protocol and an in-memory sink.

Concrete sinks speak the real formats: ``store`` (the infersight store through
``storage.writer``), ``otlp`` (spans through the real opentelemetry-sdk exporters) and
``prometheus`` (vLLM-style and dcgm-exporter-style ``/metrics``).
"""

from __future__ import annotations

from typing import Protocol

from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.simulator.events import Batch, Completion


class Sink(Protocol):
    def write(self, batch: Batch) -> None: ...

    def close(self) -> None: ...


class MemorySink:
    """Keeps everything (for tests and small runs)."""

    def __init__(self) -> None:
        self.completions: list[Completion] = []
        self.server_samples: list[ServerSample] = []
        self.gpu_samples: list[GpuSample] = []
        self.closed = False

    def write(self, batch: Batch) -> None:
        self.completions.extend(batch.completions)
        self.server_samples.extend(batch.server_samples)
        self.gpu_samples.extend(batch.gpu_samples)

    def close(self) -> None:
        self.closed = True

    @property
    def records(self) -> list[RequestRecord]:
        return [c.record for c in self.completions]


class CountingSink:
    """Counts what passes through (for benchmarks and progress)."""

    def __init__(self) -> None:
        self.requests = 0
        self.samples = 0

    def write(self, batch: Batch) -> None:
        self.requests += len(batch.completions)
        self.samples += len(batch.server_samples) + len(batch.gpu_samples)

    def close(self) -> None:
        return None
