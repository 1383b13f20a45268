"""Attribution in ClickHouse: gateway and client spans joined to requests, whichever comes
first, each request counted once in its attributed series (the SQL store's
``storage.attribution``, on ClickHouse's tables: ``attribution_schema``).

* **Spans** go to ``attributions`` (``store``); a trace's spans are read merged, the earliest
  span first for each dimension, a span named twice keeping the first value written of each
  dimension (``spans``).
* **Spans first**: a request whose own span left a dimension empty is filled from the stored
  spans before it is inserted (``fill``), so it is stored and rolled up under its attributed
  labels, and costs the reads nothing more.
* **Requests first**: a stored request cannot be rewritten (its row's minute rollups would
  count it again) and its rollups cannot take it back out (``min`` and ``max``). Instead the
  request's attributed state is written to ``request_moves`` (``settle``): its row under the
  attributed labels and the labels it was stored under. Raw reads read ``requests`` through
  the ``requests_attributed`` view; rollup reads add the ``request_moves_<res>`` views' rows
  (the request out of its stored series, into its attributed one) to the rollups' (``reads``).
  A move is a state computed from the stored row and all its trace's spans, not a delta:
  written twice (a replay, the other side racing), it is one row after ``FINAL``.
* **Both at once**: each side stores its own rows first, then looks for the other's
  (``HybridSink``), so of two concurrent writers the later look sees the other's rows.

As the SQL store: a request fits a span when it started within it (``JOIN_SKEW`` either side);
the engine's own value of a dimension always wins (``core.attribution.fill``); a request is
filled before insert only when its tenant, team or workload is empty; spans are looked for up
to ``LOOKBACK`` before a request.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from infersight.core.attribution import DIMENSIONS, JOIN_SKEW, Attribution, fill
from infersight.core.records import DURATION_FIELDS, GROUP_LABELS, RECORD_FIELDS, RequestRecord
from infersight.storage_clickhouse.attribution_schema import ROW_COLUMNS
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.transport import Transport, quote
from infersight.storage_clickhouse.writer import micros, payload

#: How long before a request its trace's span may have started (``storage.attribution``'s).
LOOKBACK: Final = timedelta(hours=6)
#: Trace ids per statement.
_CHUNK: Final = 2_000
_ATTRIBUTION_COLUMNS: Final = (
    "trace_id",
    "start",
    "span_id",
    "duration_s",
    *DIMENSIONS,
    "source",
    "written",
)
#: The columns of ``request_marks``.
MARK_COLUMNS: Final = (
    "start",
    "trace_id",
    "span_id",
    *GROUP_LABELS,
    *DURATION_FIELDS,
)
#: The columns of ``request_moves`` the writer fills.
MOVE_COLUMNS: Final = (*ROW_COLUMNS, *(f"was_{d}" for d in DIMENSIONS), "version")
_DIMENSION_AT: Final = {d: ROW_COLUMNS.index(d) for d in DIMENSIONS}
_START_AT: Final = ROW_COLUMNS.index("start")
_TRACE_AT: Final = ROW_COLUMNS.index("trace_id")
_SPAN_AT: Final = ROW_COLUMNS.index("span_id")


def _text(ts: datetime) -> str:
    return f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class _Span:
    start: datetime
    span_id: str
    duration_s: float
    dimensions: Mapping[str, str]

    def covers(self, start: datetime) -> bool:
        end = self.start + timedelta(seconds=self.duration_s)
        return self.start - JOIN_SKEW <= start <= end + JOIN_SKEW


def dimensions_at(spans: Sequence[_Span], start: datetime) -> dict[str, str]:
    """What the spans (earliest first) a request started at ``start`` fits name, the earliest
    span first per dimension (``storage.attribution.TraceSpans.dimensions``)."""
    out = dict.fromkeys(DIMENSIONS, "")
    for span in spans:
        if span.covers(start):
            for name in DIMENSIONS:
                out[name] = out[name] or span.dimensions.get(name, "")
    return out


def _needs_fill(record: RequestRecord) -> bool:
    return not (record.tenant and record.team and record.workload)


def _filled(record: RequestRecord, traces: Mapping[str, Sequence[_Span]]) -> RequestRecord:
    spans = traces.get(record.trace_id)
    if not spans:
        return record
    labels = {d: getattr(record, d) for d in DIMENSIONS}
    changes = fill(labels, dimensions_at(spans, record.start.astimezone(UTC)))
    if not changes:
        return record
    values = [changes.get(name, getattr(record, name)) for name in RECORD_FIELDS]
    return RequestRecord.trusted(values)


class AttributionWriter:
    """Spans into ``attributions``; requests filled from them, before insert or after
    (``request_moves``)."""

    def __init__(
        self, transport: Transport, layout: Layout, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.transport = transport
        self.layout = layout
        self.clock = clock or (lambda: datetime.now(UTC))

    # -- spans -------------------------------------------------------------------------------

    def store(self, items: Sequence[Attribution]) -> None:
        """Insert the spans (a span already stored with the same values is one row after
        merges; with other values, both are kept and merged when read)."""
        if not items:
            return
        written = _text(datetime.now(UTC))
        rows = [
            [
                a.trace_id,
                _text(a.start),
                a.span_id,
                float(a.duration_s),
                *(getattr(a, d) for d in DIMENSIONS),
                a.source,
                written,
            ]
            for a in items
        ]
        self.transport.insert(
            self.layout.table("attributions"), _ATTRIBUTION_COLUMNS, payload(rows), {}
        )

    def spans(
        self, trace_ids: Iterable[str], low: datetime, high: datetime
    ) -> dict[str, list[_Span]]:
        """The stored spans of ``trace_ids`` that started in [``low``, ``high``], earliest
        first; a span named twice merged (each dimension its first value written)."""
        wanted = sorted(set(trace_ids))
        found: dict[str, list[_Span]] = defaultdict(list)
        dims = ", ".join(f"argMinIf({d}, written, {d} != '')" for d in DIMENSIONS)
        for i in range(0, len(wanted), _CHUNK):
            ids = ", ".join(quote(t) for t in wanted[i : i + _CHUNK])
            rows = self.transport.rows(
                f"SELECT trace_id, start, span_id, argMin(duration_s, written), {dims}"
                f" FROM {self.layout.table('attributions')}"
                f" WHERE trace_id IN ({ids}) AND start >= {quote(_text(low))}"
                f" AND start <= {quote(_text(high))} GROUP BY trace_id, start, span_id"
            )
            for trace, start, span, duration, *values in rows:
                found[trace].append(
                    _Span(
                        _parse(start),
                        span,
                        float(duration),
                        dict(zip(DIMENSIONS, (str(v or "") for v in values), strict=True)),
                    )
                )
        return {t: sorted(s, key=lambda x: (x.start, x.span_id)) for t, s in found.items()}

    def _spans_for(self, records: Sequence[RequestRecord]) -> dict[str, list[_Span]]:
        if not records:
            return {}
        starts = [r.start for r in records]
        return self.spans(
            (r.trace_id for r in records), min(starts) - LOOKBACK, max(starts) + JOIN_SKEW
        )

    # -- requests ----------------------------------------------------------------------------

    def fill(self, records: Sequence[RequestRecord]) -> Sequence[RequestRecord]:
        """``records`` with what their traces' stored spans name where their own spans left
        a dimension empty (only those whose tenant, team or workload is empty)."""
        wanting = [r for r in records if _needs_fill(r)]
        traces = self._spans_for(wanting)
        if not traces:
            return records
        return [_filled(r, traces) if _needs_fill(r) else r for r in records]

    def join_late(self, records: Sequence[RequestRecord], before: Sequence[RequestRecord]) -> int:
        """After ``before`` (``records`` as filled before their insert) were stored: settle
        those whose traces' spans fill them more now (spans stored meanwhile: a concurrent
        ``write_attributions`` may not have seen the rows). How many moves were written."""
        wanting = [r for r in records if _needs_fill(r)]
        if not wanting:
            return 0
        traces = self._spans_for(wanting)
        if not traces:
            return 0
        was = {(r.start, r.trace_id, r.span_id): r for r in before}
        late = [
            r for r in wanting if _filled(r, traces) != was.get((r.start, r.trace_id, r.span_id), r)
        ]
        if not late:
            return 0
        starts = [r.start for r in late]
        return self.settle({r.trace_id for r in late}, min(starts), max(starts), traces=traces)

    def settle_spans(self, items: Sequence[Attribution]) -> int:
        """After ``items`` were stored: move the stored requests of their traces that their
        spans fill (how many moves were written)."""
        if not items:
            return 0
        ids = {a.trace_id for a in items}
        low = min(a.start for a in items) - LOOKBACK
        high = max(a.end for a in items) + LOOKBACK
        traces = self.spans(ids, low, high)
        windows = [
            (s.start - JOIN_SKEW, s.start + timedelta(seconds=s.duration_s) + JOIN_SKEW)
            for spans in traces.values()
            for s in spans
        ]
        if not windows:
            return 0
        return self.settle(
            set(traces), min(w[0] for w in windows), max(w[1] for w in windows), traces=traces
        )

    def settle(
        self,
        trace_ids: Iterable[str],
        low: datetime,
        high: datetime,
        *,
        traces: Mapping[str, Sequence[_Span]],
    ) -> int:
        """Write the attributed state of the stored requests of ``trace_ids`` that started in
        [``low``, ``high``] with a dimension still empty as stored, where ``traces`` fill it
        and no move says so already: how many moves were written."""
        wanted = sorted(set(trace_ids))
        empty = " OR ".join(f"{d} = ''" for d in DIMENSIONS)
        moves: list[list[Any]] = []
        marks: list[list[Any]] = []
        version = micros(self.clock())
        for i in range(0, len(wanted), _CHUNK):
            ids = ", ".join(quote(t) for t in wanted[i : i + _CHUNK])
            where = (
                f"trace_id IN ({ids}) AND start >= {quote(_text(low))}"
                f" AND start <= {quote(_text(high))}"
            )
            rows = self.transport.rows(
                f"SELECT {', '.join(ROW_COLUMNS)} FROM {self.layout.table('requests')} FINAL"
                f" WHERE {where} AND ({empty})"
            )
            if not rows:
                continue
            current = {
                (start, trace, span): list(values)
                for start, trace, span, *values in self.transport.rows(
                    f"SELECT start, trace_id, span_id, {', '.join(DIMENSIONS)}"
                    f" FROM {self.layout.table('request_moves')} FINAL WHERE {where}"
                )
            }
            for row in rows:
                spans = traces.get(row[_TRACE_AT])
                if not spans:
                    continue
                stored = {d: str(row[at] or "") for d, at in _DIMENSION_AT.items()}
                changes = fill(stored, dimensions_at(spans, _parse(row[_START_AT])))
                if not changes:
                    continue
                wanted_labels = [changes.get(d, stored[d]) for d in DIMENSIONS]
                key = (row[_START_AT], row[_TRACE_AT], row[_SPAN_AT])
                now = current.get(key)
                if now == wanted_labels:
                    continue
                if now is not None:
                    # Moved before, into a series it leaves now: that series keeps its
                    # values' minimum and maximum, as the SQL store's does.
                    passed = dict(zip(DIMENSIONS, now, strict=True))
                    marks.append(
                        [
                            *key,
                            *(passed.get(n, row[ROW_COLUMNS.index(n)]) for n in GROUP_LABELS),
                            *(row[ROW_COLUMNS.index(f)] for f in DURATION_FIELDS),
                        ]
                    )
                moved = list(row)
                for d, at in _DIMENSION_AT.items():
                    moved[at] = changes.get(d, stored[d])
                moves.append([*moved, *(stored[d] for d in DIMENSIONS), version])
        if marks:
            # Before the moves: a failure in between leaves marks whose series the request
            # still is in (its minimum and maximum already hold the values), and a replay
            # writes the same marks again (one row each after ``FINAL``).
            self.transport.insert(
                self.layout.table("request_marks"), MARK_COLUMNS, payload(marks), {}
            )
        if moves:
            self.transport.insert(
                self.layout.table("request_moves"), MOVE_COLUMNS, payload(moves), {}
            )
        return len(moves)


__all__ = ["LOOKBACK", "MOVE_COLUMNS", "AttributionWriter", "dimensions_at"]
