"""A sink that writes a run into the infersight store through an injected writer.

The simulator depends on ``core`` only, so the writer comes from the composition root
(``storage.writer.open_writer(engine)`` in the CLI and the tests); any ``core.write.Sink``
works. Records are written in batches; an ``Unavailable`` store is retried with backoff a few
times before the error propagates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from infersight.core.errors import Unavailable
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.write import Sink
from infersight.simulator.events import Batch

_T = TypeVar("_T")


class StoreSink:
    def __init__(
        self,
        writer: Sink,
        *,
        batch_size: int = 5000,
        retries: int = 5,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._writer = writer
        self._batch_size = batch_size
        self._retries = retries
        self._sleep = sleep
        self._records: list[RequestRecord] = []
        self._server: list[ServerSample] = []
        self._gpu: list[GpuSample] = []
        self.inserted = 0
        self.duplicates = 0
        self.samples_written = 0

    def write(self, batch: Batch) -> None:
        self._records.extend(c.record for c in batch.completions)
        self._server.extend(batch.server_samples)
        self._gpu.extend(batch.gpu_samples)
        if len(self._records) + len(self._server) + len(self._gpu) >= self._batch_size:
            self.flush()

    def flush(self) -> None:
        for start in range(0, len(self._records), self._batch_size):
            chunk = self._records[start : start + self._batch_size]
            result = self._retry(partial(self._writer.write_requests, chunk))
            self.inserted += int(result.inserted)
            self.duplicates += int(result.duplicates)
        self._records.clear()
        if self._server:
            server = list(self._server)
            self.samples_written += self._retry(lambda: self._writer.write_server_samples(server))
            self._server.clear()
        if self._gpu:
            gpu = list(self._gpu)
            self.samples_written += self._retry(lambda: self._writer.write_gpu_samples(gpu))
            self._gpu.clear()

    def close(self) -> None:
        self.flush()

    def _retry(self, call: Callable[[], _T]) -> _T:
        delay = 0.2
        for _ in range(self._retries):
            try:
                return call()
            except Unavailable:
                self._sleep(delay)
                delay = min(delay * 2, 5.0)
        return call()
