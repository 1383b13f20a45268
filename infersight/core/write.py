"""Where records and samples are written: the ``Sink`` role and what a batch of requests did.

``storage.writer`` implements it against the store; the collector's shipper and the
simulator's ``StoreSink`` are handed one by their composition root (the CLI, the tests), so
neither of them imports the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from infersight.core.attribution import Attribution
from infersight.core.client import ClientRecord
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a batch did: ``inserted + duplicates + refused == received``."""

    received: int
    inserted: int
    duplicates: int
    #: Records outside the writer's accepted window, not stored.
    refused: int = 0


@runtime_checkable
class Sink(Protocol):
    """Writes request records (idempotently: a key already stored is a duplicate) and GPU
    and server samples (answering how many it stored)."""

    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult: ...
    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int: ...
    def write_server_samples(self, samples: Sequence[ServerSample]) -> int: ...


@runtime_checkable
class ClientSink(Protocol):
    """A sink that also stores client records (``core.client``), idempotently by key. Apart
    from ``Sink`` so that a sink for server records only (the simulator's) stays one."""

    def write_client_requests(self, records: Sequence[ClientRecord]) -> WriteResult: ...


@runtime_checkable
class AttributionSink(Protocol):
    """A sink that also stores what gateway and client spans named of their traces
    (``core.attribution``) and fills the traces' requests from it, idempotently by span."""

    def write_attributions(self, items: Sequence[Attribution]) -> WriteResult: ...
