"""Telemetry into the store: the writer a sidecar's shipper, the simulator's store sink, the
demo's backfill and central ingest write request records and samples through."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from infersight.core.accept import AcceptWindow
    from infersight.core.write import Sink
    from infersight.storage.seam import Store


def open_writer(
    store: Store, accept: AcceptWindow | None = None, clock: Callable[[], datetime] | None = None
) -> Sink:
    """A ``core.write.Sink`` into ``store`` that refuses timestamps outside ``accept``; each
    batch commits whole, and a batch written again changes nothing."""
    return store.ingest.open_writer(accept, clock)
