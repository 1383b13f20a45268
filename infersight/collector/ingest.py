"""From a decoded OTLP export to durable spool entries: decode spans, map them, count every
outcome, append records and trace pieces to the spool.

Records wait in the spool for the reassembly window (their ``ready_at`` is
``Reassembly.due_at``) so that stage spans of the same trace, arriving later or in other
exports, are merged before shipping. Each record keeps its place in the trace (parent span,
start, end); every span that is neither a request nor a stage is kept as a link (its ids, its
service, its kind), so that the shipper can tell a request's own stages from its client's
(``collector.assembly``). A client instrumentation's span becomes a client record
(``core.client``), spooled ready at once, and a link as well. With an attribution mapping
(``MappingContext.attribution``), a gateway's or client's span that names who its trace's
requests are for becomes an attribution (``core.attribution``), spooled ready at once.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import repeat
from typing import Any, Final, Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from infersight.collector import otlp, otlp_wire, validation
from infersight.collector.assembly import Reassembly
from infersight.collector.body import inflate
from infersight.collector.codec import (
    Kind,
    encode_attribution,
    encode_client,
    encode_fragment,
    encode_link,
    encode_placed,
    encode_row,
)
from infersight.collector.mapping import (
    Link,
    MappingContext,
    RecordRow,
    Skipped,
    SpanView,
    StageFragment,
    map_row,
    place_of,
    requests,
)
from infersight.collector.mapping.gateways import GATEWAY_SPAN
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.otlp import Decoded, Limits, span_views
from infersight.collector.peers import FirstContacts, export_line
from infersight.collector.spool import Entry, Spool
from infersight.core.accept import AcceptWindow
from infersight.core.attribution import Attribution, AttributionMap
from infersight.core.client import ClientRecord
from infersight.core.errors import InvalidRecord
from infersight.core.records import Engine, Role


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
    # ``tuple.__new__`` of each row: ``Entry(…)`` runs a Python-level ``__new__`` per entry.
    entries = list(map(tuple.__new__, repeat(Entry), zip(*columns, strict=True))) if columns else []
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
    batch = _Batch(context, now, accept, reassembly)
    for view in decoded.spans:
        batch.add(view)
    return batch.prepared(len(decoded.spans), decoded.dropped_attributes)


def prepare_body(
    raw: bytes | bytearray,
    encoding: str,
    media: str,
    limits: Limits,
    context: MappingContext,
    now: float,
    accept: AcceptWindow | None,
    reassembly: Reassembly,
) -> Prepared:
    """``prepare`` of ``decode_body``: what a body as received becomes. A protobuf body is
    read in one pass (``prepare_protobuf``)."""
    body = inflate(raw, encoding, limits.max_body_bytes, limits.max_members,
                   limits.max_inflation_ratio)  # fmt: skip
    if media.split(";", 1)[0].strip().lower() == otlp.PROTOBUF:
        return prepare_protobuf(body, limits, context, now, accept, reassembly)
    return prepare(otlp.decode(body, media, limits), context, now, accept, reassembly)


def prepare_protobuf(
    body: bytes | bytearray,
    limits: Limits,
    context: MappingContext,
    now: float,
    accept: AcceptWindow | None,
    reassembly: Reassembly,
) -> Prepared:
    """``prepare`` of ``otlp.decode`` of a protobuf body, in one pass over the export: a
    vLLM-family request span is read from its attributes straight into its row
    (``mapping.requests``), any other span through its view, as ``prepare`` does."""

    def walk(message: Any) -> Prepared:
        return _prepare_wire(message, limits, context, now, accept, reassembly)

    def walk_parsed(message: ExportTraceServiceRequest) -> Prepared:
        return prepare(span_views(message, limits), context, now, accept, reassembly)

    return otlp.read_protobuf(body, limits, walk, walk_parsed)


def _prepare_wire(
    message: Any,
    limits: Limits,
    context: MappingContext,
    now: float,
    accept: AcceptWindow | None,
    reassembly: Reassembly,
) -> Prepared:
    batch = _Batch(context, now, accept, reassembly)
    add_row, refuse = batch.add_row, batch.refuse
    most, size = limits.max_attributes, limits.max_attribute_bytes
    # A limit below the names read drops some of them: such exports go the general way.
    direct = size >= requests.LONGEST_NAME and requests.plain_context(context)
    role = Role.PREFILL.value if context.role is Role.PREFILL else Role.UNIFIED.value
    table, bounds, slots = requests.LLM_REQUEST, requests.BOUNDS, requests.SLOTS
    request_name = requests.NAME
    read_slots, row_of, read = otlp_wire.read_slots, requests.row, otlp_wire.attributes
    timing_refusal, window = validation.timing_refusal, accept.refusal if accept else None
    zero_trace, zero_span, hex_id = otlp.ZERO_TRACE, otlp.ZERO_SPAN, otlp.hex_id
    encode, request_id = encode_placed, requests.request_id
    attributions: dict[tuple[str, str, Engine], tuple[str, str]] = {}
    spans = dropped = 0
    for resource_spans in message.resource_spans:
        resource = otlp.resource_attributes(resource_spans, most)
        service = resource.get("service.name")
        service = service if isinstance(service, str) else ""  # ``SpanView.service``
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                spans += 1
                if direct and span.name == request_name:
                    # Read in one pass (``mapping.requests``); ``None``: the general way.
                    values = read_slots(span.attributes, table, bounds, slots, size, most)
                    trace_id, span_id = span.trace_id, span.span_id
                    start, end = span.start_time_unix_nano, span.end_time_unix_nano
                    if (
                        values is not None
                        and len(trace_id) == 16 and trace_id != zero_trace
                        and len(span_id) == 8 and span_id != zero_span
                        and 0 < start <= end
                    ):  # fmt: skip
                        row = row_of(
                            values, trace_id.hex(), span_id.hex(), start, end, span.kind,
                            span.status.code, service, scope, context, role, attributions,
                        )  # fmt: skip
                        if row is not None:
                            # ``validation.check`` of a row, then ``_Batch.add``'s own steps.
                            reason = timing_refusal(row.e2e_s, row.ttft_s, row.queue_s,
                                                    row.prefill_s, row.decode_s)  # fmt: skip
                            if reason is None and window is not None:
                                reason = window(start / 1e9, now)
                            if reason is None:
                                parent = hex_id(span.parent_span_id, zero_span)
                                payload = encode(row, parent, start, end, request_id(values))
                                add_row(service, row, payload)
                            else:
                                refuse(service, reason)
                            continue
                view, lost = otlp.view_of(span, resource, scope, size, most, read)
                dropped += lost
                batch.add(view)
    return batch.prepared(spans, dropped)


_new_entry: Final = tuple.__new__  # ``Entry(…)`` without its Python-level ``__new__``
_RECORD: Final = Kind.RECORD
_STAGE: Final = Kind.STAGE
_CLIENT: Final = Kind.CLIENT


def _count(tally: dict[Any, int], key: Any) -> None:
    tally[key] = tally.get(key, 0) + 1


def attributed(view: SpanView, mapping: AttributionMap, client: bool) -> Attribution | None:
    """What a gateway's or client's span names of its trace under ``mapping``: for a client
    instrumentation's span, whatever it or its resource names; for any other span, only what
    its own attributes name (its resource names every span of its service). ``None`` for a
    span that names nothing, or that cannot be placed (no ids, no time)."""
    named, own = mapping.resolve(view.attributes, view.resource)
    if not named or not (own or client) or view.start_ns <= 0:
        return None
    try:
        return Attribution(
            view.trace_id,
            view.span_id,
            datetime.fromtimestamp(view.start_ns / 1e9, tz=UTC),
            view.duration_s or 0.0,
            source=mapping.source,
            **named,
        )
    except InvalidRecord:
        return None


class _Batch:
    """The entries and tallies of one export's spans, added in order."""

    def __init__(
        self,
        context: MappingContext,
        now: float,
        accept: AcceptWindow | None,
        reassembly: Reassembly,
    ) -> None:
        self.context, self.now, self.accept = context, now, accept
        self.due_at = reassembly.due_at(now)
        self.entries: list[Entry] = []
        self.rejected: dict[str, int] = {}
        self.unmapped: dict[tuple[str, str], int] = {}
        self.sources: dict[str, dict[str, int]] = {}

    def tally(self, service: str) -> dict[str, int]:
        """The tally of ``service``'s spans, this span counted."""
        tally = self.sources.get(service)
        if tally is None:
            tally = self.sources[service] = {"spans": 1}
        else:
            tally["spans"] += 1
        return tally

    def add_row(self, service: str, row: RecordRow, payload: bytes) -> None:
        """A request of ``service``'s, spooled as ``payload`` (its row and its place)."""
        tally = self.tally(service)
        key = "record:" + row.engine
        tally[key] = tally.get(key, 0) + 1
        self.entries.append(_new_entry(Entry, (_RECORD, row.trace_id, self.due_at, payload)))

    def refuse(self, service: str, reason: str) -> None:
        """A request of ``service``'s that breaks a rule (``validation``)."""
        tally = self.tally(service)
        tally["rejected"] = tally.get("rejected", 0) + 1
        _count(self.rejected, reason)

    def add(self, view: SpanView) -> None:
        now = self.now
        entries = self.entries
        outcome = validation.check(map_row(view, self.context), view, now, self.accept)
        if isinstance(outcome, RecordRow):  # a request, as the spool stores it
            self.add_row(view.service, outcome, encode_row(outcome, place_of(view)))
            return
        if isinstance(outcome, Skipped) and outcome.rejected:
            self.refuse(view.service, outcome.reason)
            return
        tally = self.tally(view.service)
        if isinstance(outcome, StageFragment):
            _count(tally, "stage")
            entries.append(Entry(_STAGE, outcome.trace_id, now, encode_fragment(outcome)))
        else:
            client = isinstance(outcome, ClientRecord)
            if isinstance(outcome, ClientRecord):
                _count(tally, "client")
                payload = encode_client(outcome)
                entries.append(Entry(_CLIENT, outcome.trace_id, now, payload))
            else:
                _count(self.unmapped, (outcome.engine, outcome.reason))
                if outcome.reason == GATEWAY_SPAN:
                    _count(tally, "gateway")
            # A client span is kept as a link too: the server's stages are told from the
            # client's by where they sit below it.
            link = Link.of(view)
            if link is not None:
                entries.append(Entry(_STAGE, link.trace_id, now, encode_link(link)))
            mapping = self.context.attribution
            if mapping is not None:
                named = attributed(view, mapping, client)
                if named is not None:
                    _count(tally, "attribution")
                    payload = encode_attribution(named)
                    entries.append(Entry(Kind.ATTRIBUTION, named.trace_id, now, payload))

    def prepared(self, spans: int, dropped_attributes: int) -> Prepared:
        return Prepared(
            self.entries, spans, dropped_attributes, self.unmapped, self.rejected, self.sources
        )


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
        *,
        decoder: Decoder | None = None,
        hold: Callable[[], None] = _nothing,
        holding: Callable[[], bool] = _never,
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
        self.decoder = decoder
        #: Services met so far, each announced once when its first export is acknowledged.
        self.peers = FirstContacts(clock=self._clock)
        #: Called before an export is mapped: the sidecar holds exports there while its role
        #: is pending (``collector.roles``).
        self.hold = hold
        #: Whether ``hold`` may wait now (such an export is not mapped on an event loop).
        self.holding = holding

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
            return self.ingest_here(raw, encoding, media)
        self.hold()
        now = self._clock()
        prepared = self.decoder.run(raw, encoding, media, now, self.context, self.reassembly)
        return self.commit(prepared)

    def ingest_here(self, raw: bytes | bytearray, encoding: str, media: str) -> Ingested:
        """Inflate, decode, map and queue a body in this thread (``prepare_body``)."""
        if self.holding():  # decoded before the export waits, as ever
            return self.ingest_decoded(decode_body(raw, encoding, media, self.limits))
        self.hold()
        prepared = prepare_body(raw, encoding, media, self.limits, self.context, self._clock(),
                                self.accept, self.reassembly)  # fmt: skip
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
