"""Periodic samplers (server scrapes, GPU reads) on their own threads, appending to the
spool. A sampler that hangs or fails only delays its own next run, never trace ingest."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from infersight.collector.codec import Kind, encode_sample
from infersight.collector.spool import Entry, Spool
from infersight.core.errors import InfersightError, Unavailable
from infersight.core.samples import GpuSample, ServerSample

log = logging.getLogger(__name__)


class Sampler(Protocol):
    """Something read every ``interval_s``: returns samples, raises nothing it expects."""

    name: str
    interval_s: float

    def sample(self) -> Sequence[GpuSample | ServerSample]: ...


class PeriodicTask:
    def __init__(
        self,
        sampler: Sampler,
        spool: Spool,
        on_error: Callable[[str], None] | None = None,
        on_success: Callable[[int], None] | None = None,
    ) -> None:
        self.sampler = sampler
        self.spool = spool
        self.on_error = on_error or (lambda reason: None)
        self.on_success = on_success or (lambda count: None)
        self._last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=sampler.name, daemon=True)

    def start(self) -> PeriodicTask:
        self._thread.start()
        return self

    def run_once(self) -> int:
        samples = self.sampler.sample()
        entries = [
            Entry(
                Kind.GPU if isinstance(s, GpuSample) else Kind.SERVER,
                "",
                self.spool.now(),
                encode_sample(s),
            )
            for s in samples
        ]
        if entries:
            try:
                self.spool.append(entries).result(timeout=30)
            except Unavailable as exc:
                self.on_error("spool_full")
                log.warning("%s: samples not spooled: %s", self.sampler.name, exc.message)
        return len(entries)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.on_success(self.run_once())
            except InfersightError as exc:
                reason = str(exc.details.get("reason", exc.code))
                self.on_error(reason)
                if reason != self._last_error:
                    log.warning("%s: %s", self.sampler.name, exc.message)
                self._last_error = reason
            except Exception:  # a sampler bug must not end sampling for good
                self.on_error("unexpected")
                log.exception("%s failed", self.sampler.name)
            self._stop.wait(self.sampler.interval_s)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
