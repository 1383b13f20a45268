"""Telemetry into the store: the writer a sidecar's shipper, the simulator's store sink, the
demo's backfill and central ingest write request records and samples through.

Central ingest (``POST /api/v1/ingest``: a sidecar ships its batches to the API instead of to
the database): ``store_batch`` decodes one batch in ``core.wire``'s format (gzip or not),
validates every entry as the sidecar's receivers do, and writes it in one transaction through
the store's writer, which refuses what the raw retention has already dropped and ignores keys it
already has, so a batch replayed after a lost answer is stored once. ``folded`` answers which
late sequences were folded already; ``ping`` is one round trip to the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from infersight.core.accept import AcceptWindow
from infersight.core.attribution import Attribution
from infersight.core.client import ClientRecord
from infersight.core.errors import InvalidInput
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.sequences import LateSequence
from infersight.core.wire import WireKind, decode_batch, inflate
from infersight.core.write import AttributionSink, ClientSink

if TYPE_CHECKING:
    from infersight.core.write import Sink
    from infersight.storage.seam import Store


def open_writer(
    store: Store, accept: AcceptWindow | None = None, clock: Callable[[], datetime] | None = None
) -> Sink:
    """A ``core.write.Sink`` into ``store`` that refuses timestamps outside ``accept``; each
    batch commits whole, and a batch written again changes nothing."""
    return store.ingest.open_writer(accept, clock)


def _retained(store: Store, raw_days: int, clock: Callable[[], datetime]) -> Sink:
    """The writer central ingest uses: refusing what the raw retention (``raw_days``) has
    already dropped."""
    return open_writer(store, AcceptWindow.of_days(raw_days), clock)


def store_batch(
    store: Store, body: bytes, encoding: str, raw_days: int, clock: Callable[[], datetime]
) -> dict[str, Any]:
    """Decode the batch ``body`` (``encoding``: ``gzip``, ``identity`` or none) and write it in
    one transaction: ``{"kind", "received"}`` with ``inserted``, ``duplicates`` and ``refused``
    (requests, client records, sequences) or ``stored`` (samples). ``InvalidInput`` for a
    malformed batch, and nothing of it is stored."""
    if encoding == "gzip":
        body = inflate(body)
    elif encoding not in ("", "identity"):
        raise InvalidInput(f"unsupported Content-Encoding {encoding!r} (gzip or none)")
    kind, items = decode_batch(body)
    writer = _retained(store, raw_days, clock)
    answer: dict[str, Any] = {"kind": kind.name.lower(), "received": len(items)}
    if kind is WireKind.RECORD:
        result = writer.write_requests([r for r in items if isinstance(r, RequestRecord)])
    elif kind is WireKind.CLIENT:
        assert isinstance(writer, ClientSink)
        result = writer.write_client_requests([r for r in items if isinstance(r, ClientRecord)])
    elif kind is WireKind.SEQUENCE:
        result = writer.fold_sequences(  # type: ignore[attr-defined]
            [f for f in items if isinstance(f, LateSequence)]
        )
    elif kind is WireKind.ATTRIBUTION:  # gateway and client spans joined to requests (#34)
        assert isinstance(writer, AttributionSink)
        result = writer.write_attributions([a for a in items if isinstance(a, Attribution)])
    elif kind is WireKind.GPU:
        answer["stored"] = writer.write_gpu_samples([s for s in items if isinstance(s, GpuSample)])
        return answer
    else:
        answer["stored"] = writer.write_server_samples(
            [s for s in items if isinstance(s, ServerSample)]
        )
        return answer
    answer.update(inserted=result.inserted, duplicates=result.duplicates, refused=result.refused)
    return answer


def folded(
    store: Store, keys: Sequence[tuple[str, str]], raw_days: int, clock: Callable[[], datetime]
) -> set[tuple[str, str]]:
    """Which of the (trace id, span id) ``keys`` were folded into stored requests already."""
    writer = _retained(store, raw_days, clock)
    done: set[tuple[str, str]] = writer.folded(keys)  # type: ignore[attr-defined]
    return done


def ping(store: Store, raw_days: int, clock: Callable[[], datetime]) -> None:
    """One round trip to the store (a sidecar's probe)."""
    _retained(store, raw_days, clock).ping()  # type: ignore[attr-defined]
