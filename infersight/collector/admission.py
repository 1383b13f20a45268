"""Admission of OTLP exports: how many are decoded at once, and how many may wait.

Both receivers share one ``Admission``. An export is admitted before its body is read (HTTP,
by its declared length) or decoded (gRPC); when ``slots + waiting`` exports, or ``max_bytes``
of bodies, are already admitted it is refused at once with ``Busy`` (HTTP 429 with
``Retry-After``, gRPC ``RESOURCE_EXHAUSTED`` with retry info), so memory for bodies stops
growing before it grows. Decoding, inflation included,
runs in the ``slots`` worker threads of the admission's executor, never on the HTTP event
loop, so ``/healthz`` and ``/metrics`` answer whatever is being decoded; and at most
``slots`` cores are spent on it, whatever arrives (the sidecar shares its pod with a GPU
server).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final, TypeVar

from infersight.core.errors import InvalidInput, Unavailable

T = TypeVar("T")
#: Seconds a refused client is asked to wait before retrying.
BUSY_RETRY_AFTER_S: Final = 1


class Busy(Unavailable):
    """Too many exports in flight: retry after ``BUSY_RETRY_AFTER_S``."""


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    #: Exports decoded at once (worker threads, so at most this many cores).
    slots: int = 1
    #: Exports admitted beyond those, whose bodies wait (read or being read) for a slot.
    waiting: int = 7
    #: Bytes of body (as declared or received) admitted at once: two bodies of the default
    #: cap. One export is always admitted when none is, whatever its size.
    max_bytes: int = 40 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.slots < 1 or self.waiting < 0 or self.max_bytes < 1:
            raise InvalidInput("admission needs at least one slot and no negative queue")


class Admission:
    def __init__(self, config: AdmissionConfig | None = None) -> None:
        self.config = config or AdmissionConfig()
        self._lock = threading.Lock()
        self._admitted = 0
        self._bytes = 0
        self._limit = self.config.slots + self.config.waiting
        self._executor = ThreadPoolExecutor(self.config.slots, thread_name_prefix="otlp-decode")

    @property
    def admitted(self) -> int:
        return self._admitted

    def enter(self, size: int = 0) -> None:
        """Take one place for an export of ``size`` bytes, or raise ``Busy`` when none is
        free (too many exports, or too many bytes, admitted already)."""
        with self._lock:
            over = self._admitted and self._bytes + size > self.config.max_bytes
            if self._admitted >= self._limit or over:
                raise Busy(
                    "too many exports in flight, retry later",
                    details={"limit": self._limit, "reason": "busy"},
                )
            self._admitted += 1
            self._bytes += size

    def leave(self, size: int = 0) -> None:
        """Give a place (and its bytes) back."""
        with self._lock:
            self._admitted -= 1
            self._bytes -= size

    @contextmanager
    def admit(self, size: int = 0) -> Iterator[None]:
        """A place for the duration of the block, or ``Busy``."""
        self.enter(size)
        try:
            yield
        finally:
            self.leave(size)

    def submit(self, work: Callable[..., T], *args: object) -> Future[T]:
        """Run ``work`` in a decode slot (queued behind the others)."""
        return self._executor.submit(work, *args)

    def run(self, work: Callable[..., T], *args: object) -> T:
        """``submit`` and wait: for callers that are threads already (the gRPC handlers)."""
        return self.submit(work, *args).result()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
