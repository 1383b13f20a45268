"""From a decoded OTLP export to durable spool entries: decode spans, map them, count every
outcome, append records and trace pieces to the spool.

Records wait in the spool for the reassembly window (their ``ready_at``) so that stage spans
of the same trace, arriving later or in other exports, are merged before shipping. Each
record keeps its place in the trace (parent span, start, end); every span that is neither a
request nor a stage is kept as a link (its ids, its service, its kind), so that the shipper
can tell a request's own stages from its client's (``collector.assembly``).
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector import validation
from collector.codec import Kind, encode_fragment, encode_link, encode_record
from collector.mapping import Link, MappingContext, Place, Skipped, StageFragment, map_span
from collector.metrics import CollectorMetrics
from collector.otlp import Limits, span_views
from collector.spool import Entry, Spool
from core.accept import AcceptWindow
from core.errors import InvalidInput
from core.records import RequestRecord


@dataclass(frozen=True, slots=True)
class Ingested:
    """What one export became; ``durable`` resolves when it may be acknowledged."""

    durable: Future[None]
    spans: int
    stored: int
    rejected: int
    message: str


class Ingestor:
    def __init__(
        self,
        spool: Spool,
        context: MappingContext,
        metrics: CollectorMetrics,
        limits: Limits,
        window_s: float = 2.0,
        clock: Callable[[], float] | None = None,
        accept: AcceptWindow | None = None,
    ) -> None:
        if window_s < 0:
            raise InvalidInput("the reassembly window must not be negative")
        self.spool = spool
        self.context = context
        self.metrics = metrics
        self.limits = limits
        self.window_s = window_s
        self._clock = clock or spool.now
        #: Starts outside it are refused (``None``: any plausible start, for replays).
        self.accept = accept

    def ingest(self, message: ExportTraceServiceRequest) -> Ingested:
        """Map and queue the export; raises ``TooLarge`` / ``Unavailable`` to refuse it."""
        decoded = span_views(message, self.limits)
        self.metrics.spans_received.inc(len(decoded.spans))
        if decoded.dropped_attributes:
            self.metrics.attributes_dropped.inc(decoded.dropped_attributes)
        now = self._clock()
        entries: list[Entry] = []
        rejected: Tally[str] = Tally()
        for view in decoded.spans:
            outcome = validation.check(map_span(view, self.context), view, now, self.accept)
            if isinstance(outcome, RequestRecord):
                place = Place(view.parent_span_id, view.start_ns, view.end_ns)
                payload = encode_record(outcome, place)
                entries.append(Entry(Kind.RECORD, outcome.trace_id, now + self.window_s, payload))
            elif isinstance(outcome, StageFragment):
                entries.append(Entry(Kind.STAGE, outcome.trace_id, now, encode_fragment(outcome)))
            elif isinstance(outcome, Skipped) and outcome.rejected:
                rejected[outcome.reason] += 1
            else:
                self.metrics.spans_unmapped.labels(outcome.engine, outcome.reason).inc()
                link = Link.of(view)
                if link is not None:
                    entries.append(Entry(Kind.STAGE, link.trace_id, now, encode_link(link)))
        for reason, count in rejected.items():
            self.metrics.spans_rejected.labels(reason).inc(count)
        durable = self.spool.append(entries)
        total_rejected = sum(rejected.values())
        message_text = ", ".join(f"{n} {reason}" for reason, n in sorted(rejected.items()))
        return Ingested(durable, len(decoded.spans), len(entries), total_rejected, message_text)

    def acknowledged(self, ingested: Ingested) -> None:
        self.metrics.spans_accepted.inc(ingested.spans - ingested.rejected)
        records, size = self.spool.stats()
        self.metrics.spool_records.set(records)
        self.metrics.spool_bytes.set(size)
