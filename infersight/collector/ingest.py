"""From a decoded OTLP export to durable spool entries: decode spans, map them, count every
outcome, append records and trace pieces to the spool.

Records wait in the spool for the reassembly window (their ``ready_at`` is
``Reassembly.due_at``) so that stage spans of the same trace, arriving later or in other
exports, are merged before shipping. Each record keeps its place in the trace (parent span,
start, end); every span that is neither a request nor a stage is kept as a link (its ids, its
service, its kind), so that the shipper can tell a request's own stages from its client's
(``collector.assembly``). A client instrumentation's span becomes a client record
(``core.client``), spooled ready at once, and a link as well.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from infersight.collector import otlp, validation
from infersight.collector.assembly import Reassembly
from infersight.collector.body import inflate
from infersight.collector.codec import (
    Kind,
    encode_client,
    encode_fragment,
    encode_link,
    encode_row,
)
from infersight.collector.mapping import (
    Link,
    MappingContext,
    RecordRow,
    Skipped,
    StageFragment,
    map_row,
    place_of,
)
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.otlp import Decoded, Limits, span_views
from infersight.collector.peers import FirstContacts, export_line
from infersight.collector.spool import Entry, Spool
from infersight.core.accept import AcceptWindow
from infersight.core.client import ClientRecord


@dataclass(frozen=True, slots=True)
class Ingested:
    """What one export became; ``durable`` resolves when it may be acknowledged."""

    durable: Future[None]
    spans: int
    stored: int
    rejected: int
    message: str
    #: What each service's spans became (``Prepared.sources``).
    sources: dict[str, dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Prepared:
    """An export mapped into spool entries, with the tallies its metrics need: what a
    decoder process sends back (plain values, cheap to pickle)."""

    entries: list[Entry]
    spans: int
    dropped_attributes: int
    #: (engine, reason) → spans that are neither requests nor stages.
    unmapped: dict[tuple[str, str], int]
    #: reason → spans rejected as bad data (reported in ``partial_success``).
    rejected: dict[str, int]
    #: service.name → what its spans became: ``spans``, ``record:<engine>``, ``client``,
    #: ``stage``, ``rejected`` (for the first-contact line, ``collector.peers``). One entry
    #: per resource at most, so bounded by ``Limits.max_resources``.
    sources: dict[str, dict[str, int]] = field(default_factory=dict)

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        """Pickled with its entries as four columns: pickling each ``Entry`` (one per span)
        on its own cost four times as much as the rest of the trip back from a decoder."""
        columns = tuple(map(list, zip(*self.entries, strict=True)))
        fields = (self.spans, self.dropped_attributes, self.unmapped, self.rejected)
        return _unpickle_prepared, (columns, *fields, self.sources)


def _unpickle_prepared(
    columns: tuple[list[Any], ...],
    spans: int,
    dropped_attributes: int,
    unmapped: dict[tuple[str, str], int],
    rejected: dict[str, int],
    sources: dict[str, dict[str, int]],
) -> Prepared:
    entries = list(map(Entry, *columns)) if columns else []
    return Prepared(entries, spans, dropped_attributes, unmapped, rejected, sources)


class Decoder(Protocol):
    """Where bodies are decoded and mapped when not in the calling thread."""

    def run(
        self, raw: bytes | bytearray, encoding: str, media: str, now: float,
        context: MappingContext, reassembly: Reassembly | None = None,
    ) -> Prepared: ...  # fmt: skip


def _nothing() -> None:
    return None


def _never() -> bool:
    return False


def decode_body(raw: bytes | bytearray, encoding: str, media: str, limits: Limits) -> Decoded:
    """Inflate (bounded by ``limits``) and decode a body as received."""
    body = inflate(raw, encoding, limits.max_body_bytes, limits.max_members,
                   limits.max_inflation_ratio)  # fmt: skip
    return otlp.decode(body, media, limits)


def prepare(
    decoded: Decoded,
    context: MappingContext,
    now: float,
    accept: AcceptWindow | None,
    reassembly: Reassembly,
) -> Prepared:
    """Map and validate every span into spool entries (no I/O, no shared state)."""
    due_at = reassembly.due_at(now)
    entries: list[Entry] = []
    rejected: Tally[str] = Tally()
    unmapped: Tally[tuple[str, str]] = Tally()
    sources: dict[str, Tally[str]] = {}
    for view in decoded.spans:
        outcome = validation.check(map_row(view, context), view, now, accept)
        tally = sources.get(view.service)
        if tally is None:
            tally = sources[view.service] = Tally()
        tally["spans"] += 1
        if isinstance(outcome, RecordRow):  # a request, as the spool stores it
            tally["record:" + outcome.engine] += 1
            payload = encode_row(outcome, place_of(view))
            entries.append(Entry(Kind.RECORD, outcome.trace_id, due_at, payload))
        elif isinstance(outcome, StageFragment):
            tally["stage"] += 1
            entries.append(Entry(Kind.STAGE, outcome.trace_id, now, encode_fragment(outcome)))
        elif isinstance(outcome, Skipped) and outcome.rejected:
            tally["rejected"] += 1
            rejected[outcome.reason] += 1
        else:
            if isinstance(outcome, ClientRecord):
                tally["client"] += 1
                payload = encode_client(outcome)
                entries.append(Entry(Kind.CLIENT, outcome.trace_id, now, payload))
            else:
                unmapped[outcome.engine, outcome.reason] += 1
            # A client span is kept as a link too: the server's stages are told from the
            # client's by where they sit below it.
            link = Link.of(view)
            if link is not None:
                entries.append(Entry(Kind.STAGE, link.trace_id, now, encode_link(link)))
    return Prepared(
        entries, len(decoded.spans), decoded.dropped_attributes, dict(unmapped), dict(rejected),
        {service: dict(tally) for service, tally in sources.items()},
    )  # fmt: skip


class Ingestor:
    def __init__(
        self,
        spool: Spool,
        context: MappingContext,
        metrics: CollectorMetrics,
        limits: Limits,
        reassembly: Reassembly | None = None,
        clock: Callable[[], float] | None = None,
        accept: AcceptWindow | None = None,
    ) -> None:
        self.spool = spool
        self.context = context
        self.metrics = metrics
        self.limits = limits
        self.reassembly = reassembly or Reassembly()
        self._clock = clock or spool.now
        #: Starts outside it are refused (``None``: any plausible start, for replays).
        self.accept = accept
        #: Decoder processes for bodies (``ingest_body``); ``None``: decode in the caller.
        self.decoder: Decoder | None = None
        #: Services met so far, each announced once when its first export is acknowledged.
        self.peers = FirstContacts(clock=self._clock)
        #: Called before an export is mapped: the sidecar holds exports there while its role
        #: is pending (``collector.roles``).
        self.hold: Callable[[], None] = _nothing
        #: Whether ``hold`` may wait now (such an export is not mapped on an event loop).
        self.holding: Callable[[], bool] = _never

    def ingest(self, message: ExportTraceServiceRequest) -> Ingested:
        """Map and queue the export; raises ``TooLarge`` / ``Unavailable`` to refuse it."""
        return self.ingest_decoded(span_views(message, self.limits))

    def ingest_decoded(self, decoded: Decoded) -> Ingested:
        self.hold()
        prepared = prepare(decoded, self.context, self._clock(), self.accept, self.reassembly)
        return self.commit(prepared)

    def ingest_body(self, raw: bytes | bytearray, encoding: str, media: str) -> Ingested:
        """Inflate, decode, map and queue a body as received: in a decoder process when
        ``decoder`` is set (``collector.decoding``), here otherwise."""
        if self.decoder is None:
            return self.ingest_decoded(decode_body(raw, encoding, media, self.limits))
        self.hold()
        now = self._clock()
        prepared = self.decoder.run(raw, encoding, media, now, self.context, self.reassembly)
        return self.commit(prepared)

    def commit(self, prepared: Prepared) -> Ingested:
        """Count what an export became and append its entries to the spool."""
        metrics = self.metrics
        metrics.spans_received.inc(prepared.spans)
        if prepared.dropped_attributes:
            metrics.attributes_dropped.inc(prepared.dropped_attributes)
        for (engine, reason), count in prepared.unmapped.items():
            metrics.spans_unmapped.labels(engine, reason).inc(count)
        for reason, count in prepared.rejected.items():
            metrics.spans_rejected.labels(reason).inc(count)
        durable = self.spool.append(prepared.entries)
        rejected = prepared.rejected
        total_rejected = sum(rejected.values())
        message_text = ", ".join(f"{n} {reason}" for reason, n in sorted(rejected.items()))
        return Ingested(
            durable, prepared.spans, len(prepared.entries), total_rejected, message_text,
            prepared.sources,
        )  # fmt: skip

    def acknowledged(self, ingested: Ingested, transport: str = "", client: str = "") -> None:
        """Count an export as acknowledged (its entries are durable); announce each service
        met for the first time over ``transport`` from ``client`` (``collector.peers``)."""
        self.metrics.spans_accepted.inc(ingested.spans - ingested.rejected)
        for service, tally in ingested.sources.items():
            key = ("otlp", transport, service, client)
            if not self.peers.known(key):
                line = export_line(transport, service, client, tally)
                self.peers.announce(key, "otlp", line)
        records, size = self.spool.stats()
        self.metrics.spool_records.set(records)
        self.metrics.spool_bytes.set(size)
