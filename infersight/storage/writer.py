"""Idempotent bulk writers for request records and samples.

Each batch is stored and rolled up in one transaction, and only the rows actually stored are
rolled up, so a replayed or concurrently shipped batch stores each request once and counts it
once in the rollups.

- PostgreSQL: a new batch (the common case) is streamed by binary ``COPY`` straight into
  ``requests`` inside a savepoint, a slice at a time, its rollup inputs converted while the
  server inserts each slice; if it meets an existing key the savepoint is rolled back and the
  batch is copied into a session-temporary staging table and inserted with ``ON CONFLICT DO
  NOTHING``, answering with how many it stored and the keys of the smaller side (stored or
  skipped). After such a batch the next goes to staging directly, until one is all new
  (replays come in runs). Daily partitions are created on demand.
- SQLite: one ``executemany`` of ``INSERT … ON CONFLICT DO NOTHING`` straight into ``requests``
  (WAL mode). The transaction holds SQLite's one write lock, so the rows stored are the
  statement's ``rowcount`` rows with the highest rowids: all of a new batch, read back by rowid
  only for a batch that met stored keys.

On the staging paths the rollup deltas of a batch are computed in a worker thread while the
database works.

A writer given an ``AcceptWindow`` refuses records and samples whose timestamp lies outside it
(counted in ``WriteResult.refused``, logged, never stored) and never creates a partition outside
it; without one it accepts any timestamp the record allows (backfills, imports, simulations),
and ``storage.partitions`` still refuses partitions beyond its horizon.

Expected failures are results or ``Unavailable`` (the database cannot be reached: retry later);
``InvalidInput`` is raised for data the database refuses (a bug upstream: do not retry).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import fields
from datetime import UTC, date, datetime
from enum import Enum
from itertools import islice, repeat
from typing import Any, Final

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    bindparam,
    delete,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError

from infersight.core.accept import AcceptWindow
from infersight.core.attribution import Attribution, usable
from infersight.core.client import CLIENT_FIELDS, ClientRecord
from infersight.core.errors import InvalidInput, Unavailable
from infersight.core.records import DURATION_FIELDS, RECORD_FIELDS, RequestRecord, Role
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.sequences import LateSequence, fold_late_sequence
from infersight.core.write import Sink, WriteResult
from infersight.storage import attribution, gpu_rollup, rollup
from infersight.storage.batch import Batch, days_of
from infersight.storage.partitions import ensure_partitions
from infersight.storage.sql import insert_for
from infersight.storage.tables import (
    client_requests,
    gpu_samples,
    request_parts,
    request_sequences,
    requests,
    server_engine_samples,
    server_samples,
)

log = logging.getLogger(__name__)

_format_row_binary: Callable[..., None] | None
try:  # psycopg's binary row encoder (C with psycopg[binary]); internal, hence the fallback
    from psycopg._copy_base import _binary_signature as _BINARY_SIGNATURE
    from psycopg._copy_base import _binary_trailer as _BINARY_TRAILER
    from psycopg._copy_base import format_row_binary as _encoder

    _format_row_binary = _encoder
except ImportError:  # pragma: no cover - another psycopg layout
    _format_row_binary = None
#: Keys per ``IN`` list when looking rows up by key.
_KEY_CHUNK: Final = 500
#: Rows encoded per write to the connection: about 0.5 MiB of request rows.
_ROWS_PER_WRITE: Final = 2048

_COLUMNS: Final = ", ".join(f'"{name}"' for name in RECORD_FIELDS)
_PG_TYPES: Final = {
    "trace_id": "text",
    "span_id": "text",
    "start": "timestamptz",
    "input_tokens": "int4",
    "output_tokens": "int4",
    "cached_tokens": "int4",
}
_GPU_FIELDS: Final = tuple(column.name for column in gpu_samples.columns)
_SERVER_COLUMNS: Final = tuple(column.name for column in server_samples.columns)
_GPU_COLUMNS: Final = ", ".join(f'"{name}"' for name in _GPU_FIELDS)
#: PostgreSQL types of a record row, for binary COPY.
COPY_TYPES: Final = [
    _PG_TYPES.get(name, "float8" if name in DURATION_FIELDS else "text") for name in RECORD_FIELDS
]


def open_writer(
    engine: Engine,
    accept: AcceptWindow | None = None,
    clock: Callable[[], datetime] | None = None,
) -> Sink:
    """The writer for ``engine``'s database, refusing timestamps outside ``accept``."""
    if engine.dialect.name == "postgresql":
        return PostgresWriter(engine, accept, clock)
    if engine.dialect.name == "sqlite":
        return SqliteWriter(engine, accept, clock)
    raise InvalidInput(f"unsupported database: {engine.dialect.name}")


@contextmanager
def _translate_errors() -> Iterator[None]:
    try:
        yield
    except (IntegrityError, DataError) as exc:
        # A value the database cannot hold (a NUL in a label on PostgreSQL) is the batch's
        # fault, not the store's: refused, so a shipper isolates and drops the entry instead of
        # retrying the batch for ever.
        raise InvalidInput(f"the store refused the batch: {exc.orig}") from exc
    except OperationalError as exc:
        raise Unavailable(f"the store is unavailable: {exc.orig}") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise Unavailable(f"lost the connection to the store: {exc.orig}") from exc
        raise
    except Exception as exc:
        # The binary COPY runs on psycopg's own cursor, so its errors come unwrapped: SQLSTATE
        # class 22 (data exception) is the same refusal as SQLAlchemy's DataError above.
        if str(getattr(exc, "sqlstate", "") or "").startswith("22"):
            raise InvalidInput(f"the store refused the batch: {exc}") from exc
        raise


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _BaseWriter:
    staging_ddl: str

    def __init__(
        self,
        engine: Engine,
        accept: AcceptWindow | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.engine = engine
        self.accept = accept
        self.clock = clock or _utc_now
        #: The first day a partition may be created for (``None``: no bound but the horizon).
        self._oldest: date | None = None
        #: Whether the last batch of requests met rows already stored (a hint, not a rule).
        self._replaying = False

    def ping(self) -> None:
        """One cheap round trip to the store (``SELECT 1``, bounded by the engine's
        timeouts): the sidecar's probe while it has nothing to ship; ``Unavailable`` when
        the store does not answer."""
        with _translate_errors(), self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def _in_window(self, items: Sequence[Any], when: Callable[[Any], datetime], what: str) -> Any:
        """``items`` without those whose time lies outside the accepted window."""
        if self.accept is None:
            return items
        now = self.clock()
        low, high = self.accept.bounds(now)
        self._oldest = low.astimezone(UTC).date()
        kept = [item for item in items if low <= when(item) <= high]
        if len(kept) < len(items):
            log.warning(
                "refused %d %s outside the accepted window [%s, %s]",
                len(items) - len(kept),
                what,
                low.isoformat(timespec="seconds"),
                high.isoformat(timespec="seconds"),
            )
        return kept

    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult:
        """Store user requests in ``requests`` (rolled up) and prefill legs of disaggregated
        requests in ``request_parts`` (never rolled up, never counted as requests), both in
        one transaction, skipping keys already stored."""
        received = len(records)
        records = self._in_window(records, _start, "requests")
        if not records:
            return WriteResult(received, 0, 0, received)
        stored = kept = parts_stored = 0
        with _translate_errors(), self.engine.begin() as connection:
            records = self._attributed(connection, records)
            parts = [r for r in records if r.role is Role.PREFILL]
            users = [r for r in records if r.role is not Role.PREFILL] if parts else records
            if users:
                kept, stored, deltas = self._store_requests(connection, users)
                rollup.apply(connection, deltas)
            if parts:
                parts_stored = self._store_parts(connection, parts)
        # Duplicates come in runs (a spool replayed after a crash, a retried shipment): after
        # a batch that met some, the next is expected to meet some too.
        if users:
            self._replaying = stored < kept
        self._join_late(records)
        refused = received - len(records)
        inserted = stored + parts_stored
        return WriteResult(received, inserted, len(records) - inserted, refused)

    @staticmethod
    def _attributed(
        connection: Connection, records: Sequence[RequestRecord]
    ) -> Sequence[RequestRecord]:
        """``records`` with what their traces' stored gateway and client spans name, where
        their own spans left a dimension empty (``storage.attribution``), read in the
        transaction that stores them."""
        wanting = [r for r in records if attribution.needs_fill(r)]
        if not wanting:
            return records
        traces = attribution.lookup_for(connection, wanting)
        if not traces:
            return records
        return [attribution.filled(r, traces) for r in records]

    def _join_late(self, records: Sequence[RequestRecord]) -> None:
        """After the records' commit, fill the stored ones from gateway or client spans that
        were committed meanwhile (a concurrent ``write_attributions`` may not have seen
        them): of the two, the later look sees the other's rows."""
        wanting = [r for r in records if attribution.needs_fill(r)]
        if not wanting:
            return
        with _translate_errors(), self.engine.connect() as connection:
            traces = attribution.lookup_for(connection, wanting)
        fits = [r for r in wanting if attribution.filled(r, traces) is not r]
        if not fits:
            return
        keys = [(r.start, r.trace_id, r.span_id) for r in fits]
        with _translate_errors(), self.engine.begin() as connection:
            attribution.begin_write(connection)
            for table in (requests, request_parts):
                stored = attribution.rows_by_key(connection, table, keys)
                self._fill_stored(connection, table, stored, traces)

    @staticmethod
    def _fill_stored(
        connection: Connection,
        table: Table,
        stored: Sequence[RequestRecord],
        traces: Mapping[str, attribution.TraceSpans],
    ) -> int:
        """Fill ``stored`` (read locked) from ``traces`` and correct the rollups of the
        requests among them; how many changed."""
        olds, news = attribution.changed(stored, traces)
        if not news:
            return 0
        attribution.rewrite(connection, table, news)
        if table is requests:
            rollup.apply(connection, rollup.correction(Batch.of(olds), Batch.of(news)))
        return len(news)

    def write_attributions(self, items: Sequence[Attribution]) -> WriteResult:
        """Store what gateway and client spans named of their traces, then fill the stored
        requests of those traces that started within them (``storage.attribution``), their
        rollups corrected, each request and dimension once. The spans are committed before
        the requests are looked for: a ``write_requests`` committing meanwhile is seen, or
        sees these."""
        received = len(items)
        kept: Sequence[Attribution] = self._in_window(items, _attribution_start, "attributions")
        if not kept:
            return WriteResult(received, 0, 0, received)
        with _translate_errors(), self.engine.begin() as connection:
            inserted = attribution.store(connection, kept, self._oldest)
        ids = {a.trace_id for a in kept}
        low = min(a.start for a in kept) - attribution.LOOKBACK
        high = max(a.end for a in kept) + attribution.LOOKBACK
        with _translate_errors(), self.engine.begin() as connection:
            attribution.begin_write(connection)
            traces = attribution.lookup(connection, ids, low, high)
            for table in (requests, request_parts):
                stored = attribution.rows_of_traces(connection, table, traces)
                self._fill_stored(connection, table, stored, traces)
        refused = received - len(kept)
        return WriteResult(received, inserted, len(kept) - inserted, refused)

    def _store_parts(self, connection: Connection, parts: Sequence[RequestRecord]) -> int:
        """Insert prefill legs, skipping keys already stored: how many were stored. A plain
        conflict-ignoring insert: there is at most one per disaggregated request."""
        batch = Batch.of(parts)
        ensure_partitions(connection, request_parts.name, batch.days(), oldest=self._oldest)
        rows = [dict(zip(RECORD_FIELDS, row, strict=True)) for row in batch.rows()]
        statement = (
            insert_for(connection, request_parts)
            .on_conflict_do_nothing()
            .returning(request_parts.c.trace_id)
        )
        return len(connection.execute(statement, rows).all())

    def _store_requests(
        self, connection: Connection, records: Sequence[RequestRecord]
    ) -> tuple[int, int, list[rollup.RollupDelta]]:
        """Store ``records``, skipping keys already stored: how many distinct keys they hold,
        how many rows were stored, and the rollup deltas of those stored.

        The deltas of the whole batch are computed in a worker thread while the database
        stages and inserts the rows (waiting on it releases the GIL); they are recomputed for
        the subset only in the rare case that some rows were duplicates. While the last batch
        met duplicates, the next is not rolled up before it is known what it stored.
        """
        batch = Batch.of(records)
        with ThreadPoolExecutor(1, thread_name_prefix="rollup") as pool:
            optimistic = None if self._replaying else pool.submit(rollup.deltas_from_batch, batch)
            self._prepare(connection, batch.days())
            fresh = self._store(connection, batch)
            if optimistic is not None and fresh is batch:
                deltas = optimistic.result()
            else:
                deltas = rollup.deltas_from_batch(fresh)
        return len(batch), len(fresh), deltas

    def fold_sequences(self, late: Sequence[LateSequence]) -> WriteResult:
        """Fold parallel-sampling sequences that came after their request was stored into
        the stored row (``core.sequences.fold_late_sequence``), correcting its rollups, in
        one transaction; exactly once per sequence (``request_sequences``).

        A sequence already folded (a retry, a replay after a crash) is a duplicate; so is a
        record some of whose sequences were folded before (which part is new cannot be told
        apart: it is not added twice, and logged). A record whose request is not stored (or
        with which it would be implausible) is stored as a request of its own, as before
        there was a fold. ``inserted`` counts the records folded or so stored."""
        received = len(late)
        if not late:
            return WriteResult(0, 0, 0)
        folded = duplicates = 0
        alone: list[RequestRecord] = []
        with _translate_errors(), self.engine.begin() as connection:
            fresh = self._claim_sequences(connection, late)
            mine = [
                fold
                for fold in late
                if all((fold.record.trace_id, m) in fresh for m in fold.members)
            ]
            partial = [
                fold
                for fold in late
                if fold not in mine
                and any((fold.record.trace_id, m) in fresh for m in fold.members)
            ]
            duplicates = received - len(mine)
            if partial:
                log.warning(
                    "%d late sequence records partly folded before: not added again",
                    len(partial),
                )
            stored = self._stored_requests(connection, [fold.request for fold in mine])
            olds: dict[tuple[datetime, str, str], RequestRecord] = {}
            news: dict[tuple[datetime, str, str], RequestRecord] = {}
            for fold in mine:
                current = news.get(fold.request) or stored.get(fold.request)
                merged = None if current is None else fold_late_sequence(current, fold.record)
                if current is None or merged is None:
                    alone.append(fold.record)
                    continue
                olds.setdefault(fold.request, current)
                news[fold.request] = merged
                folded += 1
            if alone:
                self._release_sequences(connection, [f for f in mine if f.record in alone])
                _, stored_alone, deltas = self._store_requests(connection, alone)
                rollup.apply(connection, deltas)
                duplicates += len(alone) - stored_alone
                folded += stored_alone
            if news:
                self._update_requests(connection, list(news.values()))
                keys = list(news)
                rollup.apply(
                    connection,
                    rollup.correction(
                        Batch.of([olds[k] for k in keys]), Batch.of([news[k] for k in keys])
                    ),
                )
        return WriteResult(received, folded, duplicates)

    def folded(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``keys`` (trace id, span id) are sequences already folded into a stored
        request: a sidecar that restarted asks before shipping records it had spooled
        before, so that a sequence folded just before a crash is not stored again."""
        if not keys:
            return set()
        c = request_sequences.c
        out: set[tuple[str, str]] = set()
        with _translate_errors(), self.engine.connect() as connection:
            for i in range(0, len(keys), _KEY_CHUNK):
                chunk = list(keys[i : i + _KEY_CHUNK])
                query = select(c.trace_id, c.span_id).where(
                    tuple_(c.trace_id, c.span_id).in_(chunk)
                )
                out.update((t, s) for t, s in connection.execute(query))
        return out

    def _claim_sequences(
        self, connection: Connection, late: Sequence[LateSequence]
    ) -> set[tuple[str, str]]:
        """Insert one ``request_sequences`` row per sequence; the keys that were new."""
        rows = [
            {
                "trace_id": fold.record.trace_id,
                "span_id": member,
                "request_span_id": fold.request[2],
                "start": fold.request[0],
            }
            for fold in late
            for member in fold.members
        ]
        c = request_sequences.c
        statement = (
            insert_for(connection, request_sequences)
            .on_conflict_do_nothing()
            .returning(c.trace_id, c.span_id)
        )
        return {(t, s) for t, s in connection.execute(statement, rows)}

    def _release_sequences(self, connection: Connection, late: Sequence[LateSequence]) -> None:
        """Forget the sequences of records stored as requests of their own (their key in
        ``requests`` makes them idempotent there)."""
        c = request_sequences.c
        keys = [(fold.record.trace_id, m) for fold in late for m in fold.members]
        for i in range(0, len(keys), _KEY_CHUNK):
            connection.execute(
                delete(request_sequences).where(
                    tuple_(c.trace_id, c.span_id).in_(keys[i : i + _KEY_CHUNK])
                )
            )

    def _stored_requests(
        self, connection: Connection, keys: Sequence[tuple[datetime, str, str]]
    ) -> dict[tuple[datetime, str, str], RequestRecord]:
        """The stored requests of ``keys`` (start, trace id, span id), locked for the fold."""
        c = requests.c
        out: dict[tuple[datetime, str, str], RequestRecord] = {}
        wanted = sorted(set(keys))
        for i in range(0, len(wanted), _KEY_CHUNK):
            chunk = wanted[i : i + _KEY_CHUNK]
            query = select(requests).where(tuple_(c.start, c.trace_id, c.span_id).in_(chunk))
            if connection.dialect.name == "postgresql":
                query = query.with_for_update()
            for row in connection.execute(query).mappings():
                record = RequestRecord(**{name: row[name] for name in RECORD_FIELDS})
                out[(record.start, record.trace_id, record.span_id)] = record
        return out

    @staticmethod
    def _update_requests(connection: Connection, records: Sequence[RequestRecord]) -> None:
        """Rewrite stored rows with their folded values (the key is kept)."""
        c = requests.c
        key = ("start", "trace_id", "span_id")
        values = [name for name in RECORD_FIELDS if name not in key]
        statement = (
            update(requests)
            .where(
                and_(*(c[name] == bindparam(f"k_{name}") for name in key)),
            )
            .values({name: bindparam(f"v_{name}") for name in values})
        )
        rows = []
        for record in records:
            row = {f"k_{name}": getattr(record, name) for name in key}
            for name in values:
                value = getattr(record, name)
                row[f"v_{name}"] = value.value if isinstance(value, Enum) else value
            rows.append(row)
        connection.execute(statement, rows)

    def write_client_requests(self, records: Sequence[ClientRecord]) -> WriteResult:
        """Store client records, skipping keys already stored (a replayed span is one call).

        A plain conflict-ignoring insert on both databases: a client record has no rollups,
        and there is one per call a client traced, so the server records' COPY path would buy
        little here."""
        received = len(records)
        kept: Sequence[ClientRecord] = self._in_window(records, _client_start, "client records")
        if not kept:
            return WriteResult(received, 0, 0, received)
        by_key = {(r.start.astimezone(UTC), r.trace_id, r.span_id): r for r in kept}
        rows = [
            {
                **{name: getattr(r, name) for name in CLIENT_FIELDS},
                "status": r.status.value,
                "ttft_source": r.ttft_source.value,
            }
            for r in by_key.values()
        ]
        days = {start.date() for start, _, _ in by_key}
        with _translate_errors(), self.engine.begin() as connection:
            ensure_partitions(connection, client_requests.name, days, oldest=self._oldest)
            c = client_requests.c
            statement = (
                insert_for(connection, client_requests)
                .on_conflict_do_nothing()
                .returning(c.trace_id)
            )
            inserted = len(connection.execute(statement, rows).all())
        # A client span's own tenant names its trace's requests' tenant too (one with a
        # control character names none: ``core.attribution.usable``).
        named = [
            Attribution(
                r.trace_id, r.span_id, r.start, r.e2e_s or 0.0, tenant=r.tenant, source="client"
            )
            for r in by_key.values()
            if r.tenant and usable(r.tenant)
        ]
        if named:
            self.write_attributions(named)
        refused = received - len(kept)
        return WriteResult(received, inserted, len(kept) - inserted, refused)

    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int:
        """Store ``samples`` (skipping ones already stored) and roll up those it stored."""
        samples = self._in_window(samples, _ts, "GPU samples")
        if not samples:
            return 0
        # A key repeated within the batch keeps its last copy (as requests do), so the row
        # stored and the sample rolled up are the same one whichever the database keeps.
        samples = list(
            {(s.ts.astimezone(UTC), s.instance, s.gpu_index): s for s in samples}.values()
        )
        rows = [
            {
                **{f.name: getattr(s, f.name) for f in fields(GpuSample)},
                "throttle_reasons": ",".join(s.throttle_reasons),
            }
            for s in samples
        ]
        days = {s.ts.astimezone(UTC).date() for s in samples}
        with _translate_errors(), self.engine.begin() as connection:
            # The GPUs' rollup writers are serialised first, so that neighbouring samples
            # stored by another writer are either committed or not yet begun.
            gpu_rollup.lock(connection, ((s.instance, s.gpu_index) for s in samples))
            ensure_partitions(connection, gpu_samples.name, days, oldest=self._oldest)
            keys = {
                (ts.astimezone(UTC), i, int(g)) for ts, i, g in self._insert_gpu(connection, rows)
            }
            stored = [s for s in samples if (s.ts.astimezone(UTC), s.instance, s.gpu_index) in keys]
            gpu_rollup.apply_samples(connection, stored)
        return len(stored)

    def _insert_gpu(self, connection: Connection, rows: list[dict[str, Any]]) -> Sequence[Any]:
        """Insert GPU sample rows, skipping stored keys; the keys it stored."""
        c = gpu_samples.c
        statement = (
            insert_for(connection, gpu_samples)
            .on_conflict_do_nothing()
            .returning(c.ts, c.instance, c.gpu_index)
        )
        return connection.execute(statement, rows).all()

    def write_server_samples(self, samples: Sequence[ServerSample]) -> int:
        """Store ``samples`` (skipping ones already stored) with the engines of those stored,
        in one transaction: an instance's row and its engines' rows land together or not."""
        samples = self._in_window(samples, _ts, "server samples")
        if not samples:
            return 0
        by_key = {(s.ts.astimezone(UTC), s.instance): s for s in samples}
        rows = [{name: getattr(s, name) for name in _SERVER_COLUMNS} for s in by_key.values()]
        days = {ts.date() for ts, _ in by_key}
        with _translate_errors(), self.engine.begin() as connection:
            ensure_partitions(connection, server_samples.name, days, oldest=self._oldest)
            c = server_samples.c
            statement = (
                insert_for(connection, server_samples)
                .on_conflict_do_nothing()
                .returning(c.ts, c.instance)
            )
            stored = [
                by_key[(ts.astimezone(UTC), i)] for ts, i in connection.execute(statement, rows)
            ]
            engines = [
                {"ts": s.ts, "instance": s.instance, **dataclasses.asdict(e)}
                for s in stored
                for e in s.per_engine
            ]
            if engines:
                ensure_partitions(connection, server_engine_samples.name, days, oldest=self._oldest)
                connection.execute(
                    insert_for(connection, server_engine_samples).on_conflict_do_nothing(), engines
                )
        return len(stored)

    def _prepare(self, connection: Connection, days: set[date]) -> None:
        """Dialect hook run before storing rows of ``days`` (partitions on PostgreSQL)."""

    def _store(self, connection: Connection, batch: Batch) -> Batch:
        """Put ``batch`` into ``requests``, skipping existing keys; return what was stored."""
        connection.exec_driver_sql(self.staging_ddl)
        self._stage(connection, batch)
        return self._insert_skipping_duplicates(connection, batch)

    def _stage(self, connection: Connection, batch: Batch) -> None:
        raise NotImplementedError

    def _insert_skipping_duplicates(self, connection: Connection, batch: Batch) -> Batch:
        raise NotImplementedError


class PostgresWriter(_BaseWriter):
    staging_ddl = (
        "CREATE TEMP TABLE IF NOT EXISTS requests_staging "
        "(LIKE requests INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
    )
    # The insert's own RETURNING says what it stored. The statement answers with a row
    # holding the number stored, and the keys of the smaller side: those stored when at most
    # half the batch was new (a replay: usually none), else the staged keys it did *not*
    # store (a batch of new rows with a few old ones).
    insert_select = (
        f"WITH stored AS (INSERT INTO requests ({_COLUMNS}) SELECT {_COLUMNS} "
        "FROM requests_staging ON CONFLICT DO NOTHING RETURNING trace_id, span_id), "
        "n AS (SELECT count(*) AS stored FROM stored) "
        "SELECT n.stored, NULL::text, NULL::text FROM n "
        "UNION ALL SELECT NULL, trace_id, span_id FROM stored "
        "WHERE (SELECT stored FROM n) * 2 <= %(staged)s "
        "UNION ALL SELECT NULL, s.trace_id, s.span_id FROM requests_staging s "
        "LEFT JOIN stored USING (trace_id, span_id) "
        "WHERE stored.trace_id IS NULL AND (SELECT stored FROM n) * 2 > %(staged)s"
    )

    def __init__(
        self,
        engine: Engine,
        accept: AcceptWindow | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(engine, accept, clock)
        self._known_days: set[date] = set()

    def _prepare(self, connection: Connection, days: set[date]) -> None:
        if not days <= self._known_days:
            ensure_partitions(connection, "requests", days, oldest=self._oldest)
            self._known_days |= days

    def _store_requests(
        self, connection: Connection, records: Sequence[RequestRecord]
    ) -> tuple[int, int, list[rollup.RollupDelta]]:
        """A new batch (the common case) is streamed straight into ``requests`` by ``COPY``.

        A replayed or concurrently shipped batch meets the primary key: the COPY fails inside
        its savepoint, which is rolled back, and the batch takes the staging path, whose
        conflict-aware insert skips what exists. After such a batch, or for one repeating a
        key within itself, the staging path is taken straight away.
        """
        from psycopg.errors import CheckViolation, UniqueViolation  # noqa: PLC0415 (PostgreSQL only)

        if self._replaying:
            return super()._store_requests(connection, records)
        days = days_of(list(map(_start, records)))
        for attempt in range(2):
            self._prepare(connection, days)
            savepoint = connection.begin_nested()
            try:
                deltas = self._copy_streaming(connection, records)
            except UniqueViolation:
                # Keys stored before, or a key repeated within the batch: the staging path.
                savepoint.rollback()
                break
            except CheckViolation:
                # A day this writer had seen was dropped since (retention): forget what it
                # knows, create what is missing, and copy again.
                savepoint.rollback()
                if attempt:
                    raise
                self._known_days.clear()
                continue
            savepoint.commit()
            return len(records), len(records), deltas
        batch = Batch.of(records)
        fresh = self._store(connection, batch)
        return len(batch), len(fresh), rollup.deltas_from_batch(fresh)

    @staticmethod
    def _copy_streaming(
        connection: Connection, records: Sequence[RequestRecord]
    ) -> list[rollup.RollupDelta]:
        """``COPY`` ``records`` into ``requests`` a slice at a time; their rollup deltas.

        The client's per-row work (reading the records into columns, encoding them, and
        converting their rollup inputs) is about as long as the server's (inserting them
        into the partition and its primary key). Done one after the other, each side waits
        for the other; here each slice is read and encoded, handed to the server, and its
        rollup inputs converted while the server inserts it. The deltas are grouped before
        the ``COPY`` ends, while the server still inserts the last rows sent.
        """
        inputs = rollup.RollupInputs()
        with _copy_rows(connection, "requests") as stream:
            for i in range(0, len(records), _ROWS_PER_WRITE):
                part = Batch.verbatim(records[i : i + _ROWS_PER_WRITE])
                stream.write(part.rows())
                inputs.add(part.fields())
            return inputs.deltas()

    def _insert_gpu(self, connection: Connection, rows: list[dict[str, Any]]) -> Sequence[Any]:
        """COPY into a staging table, then insert what is new (far faster than VALUES lists)."""
        connection.exec_driver_sql(
            "CREATE TEMP TABLE IF NOT EXISTS gpu_samples_staging "
            "(LIKE gpu_samples INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        raw = connection.connection.driver_connection
        assert raw is not None
        with (
            raw.cursor() as cursor,
            cursor.copy(f"COPY gpu_samples_staging ({_GPU_COLUMNS}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row([row[name] for name in _GPU_FIELDS])
        return connection.exec_driver_sql(
            f"INSERT INTO gpu_samples ({_GPU_COLUMNS}) SELECT {_GPU_COLUMNS} "
            "FROM gpu_samples_staging ON CONFLICT DO NOTHING RETURNING ts, instance, gpu_index"
        ).all()

    def _insert_skipping_duplicates(self, connection: Connection, batch: Batch) -> Batch:
        staged = len(batch)
        stored = 0
        keys: set[tuple[str, str]] = set()
        for count, trace_id, span_id in connection.exec_driver_sql(
            self.insert_select, {"staged": staged}
        ):
            if count is None:
                keys.add((trace_id, span_id))
            else:
                stored = count
        if stored == staged:
            return batch
        if stored * 2 <= staged:
            return batch.only(keys)
        return batch.without(keys)

    def _stage(self, connection: Connection, batch: Batch) -> None:
        with _copy_rows(connection, "requests_staging") as stream:
            stream.write(batch.rows())


class SqliteWriter(_BaseWriter):
    # Straight into ``requests``: SQLite's one-writer lock makes the rows stored knowable
    # without a staging copy (``_store``).
    insert_direct = (
        f"INSERT INTO main.requests ({_COLUMNS}) "
        f"VALUES ({', '.join('?' for _ in RECORD_FIELDS)}) ON CONFLICT DO NOTHING"
    )
    stored_since = "SELECT trace_id, span_id FROM main.requests WHERE rowid > ? AND rowid <= ?"

    def _store(self, connection: Connection, batch: Batch) -> Batch:
        """Insert ``batch`` straight into ``requests``, skipping keys already stored; what
        it stored.

        From its first insert to its commit the transaction holds SQLite's write lock, and
        SQLite gives each new row the table's largest rowid plus one: the rows this
        statement stored are the ``rowcount`` rows up to ``last_insert_rowid()``. When that
        is every row (a new batch, the common case) nothing is read back; a batch that met
        stored keys reads the keys it did store by rowid. No staging copy is written.
        """
        stored = connection.exec_driver_sql(self.insert_direct, _sqlite_rows(batch)).rowcount
        if stored == len(batch):
            return batch
        if stored <= 0:
            return batch.only(set())
        last = connection.exec_driver_sql("SELECT last_insert_rowid()").scalar_one()
        keys = {
            (trace, span)
            for trace, span in connection.exec_driver_sql(self.stored_since, (last - stored, last))
        }
        if len(keys) != stored:  # pragma: no cover - only past 2**63 rowids
            raise InvalidInput(
                f"SQLite stored {stored} rows but their rowids hold {len(keys)}: "
                "the requests table's rowids are exhausted"
            )
        return batch.only(keys)


def _sqlite_rows(batch: Batch) -> list[tuple[Any, ...]]:
    """The batch's rows as SQLite takes them: no enums or aware datetimes, so those three
    columns are converted."""
    converted = {
        "start": list(map(sqlite_timestamp, batch.column("start"))),
        "engine": [engine.value for engine in batch.column("engine")],
        "status": [status.value for status in batch.column("status")],
    }
    columns = [
        converted.get(name, column)
        for name, column in zip(RECORD_FIELDS, batch.columns, strict=True)
    ]
    return list(zip(*columns, strict=True))


class BinaryRows:
    """Rows streamed into a binary ``COPY`` (types set), encoded by psycopg's own encoder.

    ``Copy.write_row`` runs two Python-level calls and a buffer check per row around the C
    encoder (``format_row_binary``); at a few hundred thousand rows a second those calls cost
    as much as the encoding. Here the encoder is driven from C (``map`` consumed by a
    zero-length ``deque``) into one buffer per ``_ROWS_PER_WRITE`` rows, framed with the
    binary format's signature (before the first row) and trailer (``close``). Without the
    encoder (a psycopg that moved it) the rows go through ``write_row``.
    """

    __slots__ = ("_buffer", "_copy")

    def __init__(self, copy: Any) -> None:
        self._copy = copy
        self._buffer = bytearray(_BINARY_SIGNATURE if _format_row_binary else b"")

    def write(self, rows: Iterable[Sequence[Any]]) -> None:
        if _format_row_binary is None:
            for row in rows:
                self._copy.write_row(row)
            return
        transformer = self._copy.formatter.transformer
        rows = iter(rows)
        while True:
            buffer = self._buffer
            before = len(buffer)
            chunk = islice(rows, _ROWS_PER_WRITE)
            deque(map(_format_row_binary, chunk, repeat(transformer), repeat(buffer)), maxlen=0)
            if len(buffer) == before:  # every row adds at least its field count
                return
            self._copy.write(buffer)
            self._buffer = bytearray()

    def close(self) -> None:
        """End the rows (the signature too, if no row came)."""
        if _format_row_binary is not None:
            self._copy.write(bytes(self._buffer) + _BINARY_TRAILER)


@contextmanager
def _copy_rows(connection: Connection, table: str) -> Iterator[BinaryRows]:
    """A binary ``COPY`` of request rows into ``table`` (PostgreSQL): rows written to what it
    yields; the ``COPY`` ends with the block (and is abandoned if the block raises)."""
    raw = connection.connection.driver_connection
    assert raw is not None
    with (
        raw.cursor() as cursor,
        cursor.copy(f"COPY {table} ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.set_types(COPY_TYPES)
        stream = BinaryRows(copy)
        yield stream
        stream.close()


def write_binary_rows(copy: Any, rows: Iterable[Sequence[Any]]) -> None:
    """Stream ``rows`` into a binary ``COPY`` (types set): all of them, then the end."""
    stream = BinaryRows(copy)
    stream.write(rows)
    stream.close()


def _start(record: RequestRecord) -> datetime:
    return record.start


def _client_start(record: ClientRecord) -> datetime:
    return record.start


def _attribution_start(item: Attribution) -> datetime:
    return item.start


def _ts(sample: GpuSample | ServerSample) -> datetime:
    return sample.ts


def sqlite_timestamp(ts: datetime) -> str:
    """How ``UTCDateTime`` stores a timestamp on SQLite (naive UTC, microseconds)."""
    # isoformat with microseconds always written is ``%Y-%m-%d %H:%M:%S.%f``, 3x faster.
    return ts.astimezone(UTC).replace(tzinfo=None).isoformat(" ", "microseconds")
