"""Attribution from the trace, the store's side: gateway and client spans joined to requests.

A request's engine span names no tenant, team or workload; its trace's gateway or client span
does (``core.attribution``). The two reach the store in either order, through different
sidecars or central ingest, so the store joins them whichever comes second, exactly once per
request and dimension:

* ``trace_attributions`` keeps one row per gateway or client span (``store``): what it named,
  when it ran. The rows of one trace are merged when read, the earliest span first for each
  dimension (``TraceSpans.dimensions``).
* A request fits its trace's span when it started within that span (``JOIN_SKEW`` either
  side: the hosts' clocks differ). Its labels are ``core.attribution.fill``'s: each dimension
  its own span left empty, filled; the engine's own value always wins.
* **Requests first** (``storage.writer``): records are filled before they are inserted from
  the rows already stored (``lookup``), so an attributed trace costs the rollups nothing
  more. **Attributions first**: the writer stores the rows, commits, then fills the stored
  requests of those traces (``join_window``).
* **Both at once.** Each side commits its own rows first and then looks for the other's in a
  new transaction (the writer's ``write_requests`` and ``write_attributions``): of two
  concurrent writers, the later look sees the other's commit, so no request is missed.
  The fill itself reads the requests it changes locked (``FOR UPDATE`` on PostgreSQL; SQLite's
  ``BEGIN IMMEDIATE`` holds its one write lock) and changes only dimensions still empty, so a
  request both sides fill is filled once; its rollups are corrected in the same transaction
  (``storage.rollup.correction``: the request leaves its old series, joins its new one).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from operator import attrgetter
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Connection,
    String,
    Table,
    and_,
    any_,
    bindparam,
    case,
    exists,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY

from infersight.core.attribution import DIMENSIONS, JOIN_SKEW, Attribution, fill
from infersight.core.records import RECORD_FIELDS, RequestRecord
from infersight.storage.partitions import ensure_partitions
from infersight.storage.sql import insert_for
from infersight.storage.tables import trace_attributions

#: Trace ids per ``IN`` list.
_CHUNK: Final = 500
_VALUES: Final = attrgetter(*RECORD_FIELDS)
#: How long before a request its trace's gateway or client span may have started, at most,
#: for the request to be filled from it (a span longer than this fills none of its trace's
#: requests past it). Bounds the partitions a lookup reads.
LOOKBACK: Final = timedelta(hours=6)
#: Requests whose start lies further apart than this are looked for in separate reads.
_CLUSTER_GAP: Final = timedelta(minutes=5)

Key = tuple[datetime, str, str]


@dataclass(frozen=True, slots=True)
class Span:
    """One stored gateway or client span of a trace: when it ran, what it named."""

    start: datetime
    span_id: str
    duration_s: float
    dimensions: Mapping[str, str]

    def covers(self, start: datetime) -> bool:
        """Whether a request that started at ``start`` fits this span."""
        end = self.start + timedelta(seconds=self.duration_s)
        return self.start - JOIN_SKEW <= start <= end + JOIN_SKEW


@dataclass(frozen=True, slots=True)
class TraceSpans:
    """The stored gateway and client spans of one trace, earliest first."""

    spans: tuple[Span, ...]

    def dimensions(self, start: datetime) -> dict[str, str]:
        """What the spans a request started at ``start`` fits name, the earliest span first
        per dimension (empty where none names it)."""
        out = dict.fromkeys(DIMENSIONS, "")
        for span in self.spans:
            if span.covers(start):
                for name in DIMENSIONS:
                    out[name] = out[name] or span.dimensions.get(name, "")
        return out

    def windows(self) -> list[tuple[datetime, datetime]]:
        return [
            (s.start - JOIN_SKEW, s.start + timedelta(seconds=s.duration_s) + JOIN_SKEW)
            for s in self.spans
        ]


def _utc(ts: datetime) -> datetime:
    return ts.astimezone(UTC)


def _chunks(connection: Connection, values: list[str]) -> Iterable[list[str]]:
    """``values`` in ``IN`` lists of ``_CHUNK`` (SQLite), or whole as one array (PostgreSQL:
    ``= ANY(…)``, one parameter however many)."""
    if connection.dialect.name == "postgresql":
        return [values] if values else []
    return (values[i : i + _CHUNK] for i in range(0, len(values), _CHUNK))


def _among(column: Any, values: list[str], array: bool) -> ColumnElement[bool]:
    if array:
        return column == any_(bindparam(None, values, type_=ARRAY(String)))  # type: ignore[no-any-return]
    return column.in_(values)  # type: ignore[no-any-return]


def store(connection: Connection, items: Sequence[Attribution], oldest: Any = None) -> int:
    """Insert ``items``, merging a span stored before (each dimension keeps the first value
    named for it); how many spans were new."""
    if not items:
        return 0
    by_key = {(_utc(a.start), a.trace_id, a.span_id): a for a in items}
    rows = [
        {
            "start": a.start,
            "trace_id": a.trace_id,
            "span_id": a.span_id,
            "duration_s": a.duration_s,
            **a.dimensions,
            "source": a.source,
        }
        for a in by_key.values()
    ]
    days = {start.date() for start, _, _ in by_key}
    ensure_partitions(connection, trace_attributions.name, days, oldest=oldest)
    c = trace_attributions.c
    keys = list(by_key)
    fresh = insert_for(connection, trace_attributions).on_conflict_do_nothing()
    inserted = {
        (_utc(start), trace, span)
        for start, trace, span in connection.execute(
            fresh.returning(c.start, c.trace_id, c.span_id), rows
        )
    }
    again = [row for key, row in zip(keys, rows, strict=True) if key not in inserted]
    if again:
        # The same span named twice (a client record's own tenant, and what the mapping read
        # of it; a replay): merged, the first value of each dimension kept.
        statement = insert_for(connection, trace_attributions)
        merged = statement.on_conflict_do_update(
            index_elements=[c.start, c.trace_id, c.span_id],
            set_={d: case((c[d] == "", statement.excluded[d]), else_=c[d]) for d in DIMENSIONS},
        )
        connection.execute(merged, again)
    return len(inserted)


def any_between(connection: Connection, low: datetime, high: datetime) -> bool:
    """Whether any gateway or client span started in [``low``, ``high``]: when none did, no
    request of that time can be filled, and the lookups are skipped."""
    c = trace_attributions.c
    query = select(exists().where(c.start >= low, c.start <= high))
    return bool(connection.execute(query).scalar())


def lookup(
    connection: Connection, trace_ids: Iterable[str], low: datetime, high: datetime
) -> dict[str, TraceSpans]:
    """The stored spans of ``trace_ids`` that started in [``low``, ``high``]."""
    c = trace_attributions.c
    wanted = sorted(set(trace_ids))
    found: dict[str, list[Span]] = defaultdict(list)
    # By trace id (its index). PostgreSQL is also told the time range, which prunes its daily
    # partitions; SQLite would take the range for the primary key's and scan every span of
    # it for each chunk, so there the range is checked here.
    ranged = connection.dialect.name == "postgresql"
    low, high = _utc(low), _utc(high)
    for chunk in _chunks(connection, wanted):
        where: list[ColumnElement[bool]] = [_among(c.trace_id, chunk, ranged)]
        if ranged:
            where += [c.start >= low, c.start <= high]
        query = select(
            c.trace_id, c.start, c.span_id, c.duration_s, *(c[d] for d in DIMENSIONS)
        ).where(*where)
        for row in connection.execute(query):
            start = _utc(row.start)
            if not low <= start <= high:
                continue
            found[row.trace_id].append(
                Span(
                    start,
                    row.span_id,
                    float(row.duration_s),
                    {d: getattr(row, d) for d in DIMENSIONS},
                )
            )
    return {
        trace: TraceSpans(tuple(sorted(spans, key=lambda s: (s.start, s.span_id))))
        for trace, spans in found.items()
    }


def lookup_for(connection: Connection, records: Sequence[RequestRecord]) -> dict[str, TraceSpans]:
    """The stored spans the ``records`` could be filled from (none when no span started in
    their time)."""
    if not records:
        return {}
    starts = [r.start for r in records]
    low, high = min(starts) - LOOKBACK, max(starts) + JOIN_SKEW
    if not any_between(connection, low, high):
        return {}
    return lookup(connection, (r.trace_id for r in records), low, high)


def needs_fill(record: RequestRecord) -> bool:
    """Whether the tenant, team or workload of ``record`` is still empty (its adapter is
    filled alongside them: an empty adapter is a base model's request, the common case)."""
    return not (record.tenant and record.team and record.workload)


def filled(record: RequestRecord, traces: Mapping[str, TraceSpans]) -> RequestRecord:
    """``record`` with the dimensions its trace's spans name where its own are empty."""
    spans = traces.get(record.trace_id)
    if spans is None:
        return record
    labels = {d: getattr(record, d) for d in DIMENSIONS}
    changes = fill(labels, spans.dimensions(_utc(record.start)))
    if not changes:
        return record
    # The record was validated, and the labels were, as an ``Attribution``'s (at most
    # ``MAX_LABEL_LEN`` characters): only they change.
    own = zip(RECORD_FIELDS, _VALUES(record), strict=True)
    values = [changes.get(name, value) for name, value in own]
    return RequestRecord.trusted(values)


def _fillable(table: Table) -> Any:
    return or_(*(table.c[d] == "" for d in DIMENSIONS))


def _record(row: Mapping[str, Any]) -> RequestRecord:
    return RequestRecord(**{name: row[name] for name in RECORD_FIELDS})


def _locked(connection: Connection, query: Any) -> Any:
    if connection.dialect.name == "postgresql":
        query = query.with_for_update()
    return connection.execute(query).mappings()


def rows_by_key(connection: Connection, table: Table, keys: Sequence[Key]) -> list[RequestRecord]:
    """The stored rows of ``keys`` with a dimension still empty, locked for the fill."""
    c = table.c
    wanted = sorted(set(keys))
    out: list[RequestRecord] = []
    for i in range(0, len(wanted), _CHUNK):
        query = (
            select(table)
            .where(
                tuple_(c.start, c.trace_id, c.span_id).in_(wanted[i : i + _CHUNK]),
                _fillable(table),
            )
            .order_by(c.start, c.trace_id, c.span_id)
        )
        out += [_record(row) for row in _locked(connection, query)]
    return out


def rows_of_traces(
    connection: Connection, table: Table, traces: Mapping[str, TraceSpans]
) -> list[RequestRecord]:
    """The stored rows of ``traces`` that started within one of their spans and have a
    dimension still empty, locked for the fill: one read per cluster of nearby windows."""
    c = table.c
    windows = sorted(
        (low, high, trace) for trace, spans in traces.items() for low, high in spans.windows()
    )
    clusters: list[tuple[datetime, datetime, set[str]]] = []
    for low, high, trace in windows:
        if clusters and low <= clusters[-1][1] + _CLUSTER_GAP:
            first, last, ids = clusters[-1]
            ids.add(trace)
            clusters[-1] = (first, max(last, high), ids)
        else:
            clusters.append((low, high, {trace}))
    seen: set[tuple[datetime, str, str]] = set()
    out: list[RequestRecord] = []
    postgres = connection.dialect.name == "postgresql"
    for low, high, ids in clusters:
        for chunk in _chunks(connection, sorted(ids)):
            query = (
                select(table)
                .where(
                    c.start >= low,
                    c.start <= high,
                    _among(c.trace_id, chunk, postgres),
                    _fillable(table),
                )
                .order_by(c.start, c.trace_id, c.span_id)
            )
            for row in _locked(connection, query):
                record = _record(row)
                key = (_utc(record.start), record.trace_id, record.span_id)
                if key not in seen:
                    seen.add(key)
                    out.append(record)
    return out


def changed(
    stored: Sequence[RequestRecord], traces: Mapping[str, TraceSpans]
) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """The stored records the spans fill, before and after."""
    olds: list[RequestRecord] = []
    news: list[RequestRecord] = []
    for record in stored:
        new = filled(record, traces)
        if new is not record:
            olds.append(record)
            news.append(new)
    return olds, news


def rewrite(connection: Connection, table: Table, records: Sequence[RequestRecord]) -> None:
    """Write the filled dimensions of ``records`` into their stored rows (by key): on
    PostgreSQL one ``UPDATE … FROM unnest(…)`` of arrays, on SQLite one statement per row
    (in process, and under its write lock)."""
    if not records:
        return
    if connection.dialect.name == "postgresql":
        _rewrite_arrays(connection, table, records)
        return
    c = table.c
    key = ("start", "trace_id", "span_id")
    statement = (
        update(table)
        .where(and_(*(c[name] == bindparam(f"k_{name}") for name in key)))
        .values({d: bindparam(f"v_{d}") for d in DIMENSIONS})
    )
    rows = []
    for record in records:
        row: dict[str, Any] = {f"k_{name}": getattr(record, name) for name in key}
        for d in DIMENSIONS:
            value = getattr(record, d)
            row[f"v_{d}"] = value.value if isinstance(value, Enum) else value
        rows.append(row)
    connection.execute(statement, rows)


def begin_write(connection: Connection) -> None:
    """On SQLite, take the write lock before the first read (``BEGIN IMMEDIATE``), so that the
    rows read cannot change before they are written; PostgreSQL locks the rows it reads."""
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")


__all__ = [
    "LOOKBACK",
    "Span",
    "TraceSpans",
    "any_between",
    "begin_write",
    "changed",
    "filled",
    "lookup",
    "lookup_for",
    "needs_fill",
    "rewrite",
    "rows_by_key",
    "rows_of_traces",
    "store",
]


def _rewrite_arrays(connection: Connection, table: Table, records: Sequence[RequestRecord]) -> None:
    names = ", ".join(DIMENSIONS)
    sets = ", ".join(f"{d} = v.{d}" for d in DIMENSIONS)
    arrays = ", ".join(f"%(v_{d})s::text[]" for d in DIMENSIONS)
    statement = (
        f"UPDATE {table.name} AS r SET {sets} "
        f"FROM unnest(%(k_start)s::timestamptz[], %(k_trace)s::text[], %(k_span)s::text[], "
        f"{arrays}) AS v(start, trace_id, span_id, {names}) "
        "WHERE r.start = v.start AND r.trace_id = v.trace_id AND r.span_id = v.span_id"
    )
    values: dict[str, Any] = {
        "k_start": [r.start for r in records],
        "k_trace": [r.trace_id for r in records],
        "k_span": [r.span_id for r in records],
        **{f"v_{d}": [getattr(r, d) for r in records] for d in DIMENSIONS},
    }
    connection.exec_driver_sql(statement, values)
