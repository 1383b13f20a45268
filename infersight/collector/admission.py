"""Admission of OTLP exports: how many are decoded at once, and how many may wait.

Both receivers share one ``Admission``. An export is admitted once its body is in (HTTP) or
before it is decoded (gRPC); when ``slots + waiting`` exports are already admitted it is
refused at once with ``Busy`` (HTTP 429 with ``Retry-After``, gRPC ``RESOURCE_EXHAUSTED`` with
retry info).

A body the HTTP receiver is still receiving holds no admission place, only the bytes it has
received so far (a ``Receipt``): so clients that send a request's headers and then their
body slowly, or never, cannot hold the places that exporters need. All bodies in memory,
being received or admitted, share one budget of ``max_bytes``: a body that would take it
past that is refused with ``Busy`` as its bytes arrive (or at once, by its declared length),
so memory for bodies stops growing before it grows. One body is always taken when no other
holds any bytes, whatever its size (up to the receiver's own cap).

Decoding, inflation included, runs in the ``slots`` worker threads of the admission's
executor, never on the HTTP event loop, so ``/healthz`` and ``/metrics`` answer whatever is
being decoded; and at most ``slots`` cores are spent on it, whatever arrives (the sidecar
shares its pod with a GPU server).
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
    #: Exports admitted beyond those, whose bodies (all in) wait for a slot.
    waiting: int = 7
    #: Bytes of body in memory at once, being received or admitted: two bodies of the
    #: default cap. One body is always taken when no other holds bytes, whatever its size.
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

    @property
    def bytes(self) -> int:
        """Bytes of body held now, being received or admitted."""
        return self._bytes

    def _busy(self) -> Busy:
        return Busy(
            "too many exports in flight, retry later",
            details={"limit": self._limit, "reason": "busy"},
        )

    def _over(self, size: int, own: int = 0) -> bool:
        """Whether ``size`` more bytes exceed the budget while others hold bytes (the caller
        holds the lock; ``own``: bytes the caller holds already)."""
        return self._bytes > own and self._bytes + size > self.config.max_bytes

    def enter(self, size: int = 0) -> None:
        """Take one place for an export of ``size`` bytes, or raise ``Busy`` when none is
        free (too many exports admitted, or too many bytes held, already)."""
        with self._lock:
            if self._admitted >= self._limit or self._over(size):
                raise self._busy()
            self._admitted += 1
            self._bytes += size

    def receipt(self, declared: int = 0) -> Receipt:
        """Room for a body about to be received: ``Busy`` at once when its ``declared``
        length would not fit beside the bytes others hold (nothing is reserved by it)."""
        with self._lock:
            if self._over(declared):
                raise self._busy()
        return Receipt(self)

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


class Receipt:
    """The bytes of one body being received, held against the admission's byte budget; no
    admission place. ``admit`` turns it into a place (keeping its bytes, given back by
    ``Admission.leave(receipt.held)``); ``release`` gives back what it still holds."""

    def __init__(self, gate: Admission) -> None:
        self._gate = gate
        self.held = 0
        self._admitted = False

    def add(self, size: int) -> None:
        """Hold ``size`` more bytes, or ``Busy`` when they do not fit beside others'."""
        gate = self._gate
        with gate._lock:
            if gate._over(size, self.held):
                raise gate._busy()
            gate._bytes += size
            self.held += size

    def admit(self) -> None:
        """Take an admission place for the body received, or ``Busy`` (its bytes are then
        still held, until ``release``)."""
        gate = self._gate
        with gate._lock:
            if gate._admitted >= gate._limit:
                raise gate._busy()
            gate._admitted += 1
            self._admitted = True

    def release(self) -> None:
        """Give back the bytes held, unless they went to an admission place."""
        if self._admitted:
            return
        with self._gate._lock:
            self._gate._bytes -= self.held
            self.held = 0
