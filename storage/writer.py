"""Idempotent bulk writers for request records and samples.

One shape on both databases: stage the batch, then ``INSERT … SELECT … ON CONFLICT DO NOTHING
RETURNING`` the keys that were really stored, and roll up exactly those records, all in one
transaction. A replayed or concurrently shipped batch therefore stores each request once and
counts it once in the rollups.

- PostgreSQL: binary ``COPY`` into a session-temporary staging table (``ON COMMIT DELETE ROWS``),
  daily partitions created on demand.
- SQLite: ``executemany`` into a temporary staging table, in WAL mode.

Expected failures are results or ``Unavailable`` (the database cannot be reached: retry later);
``InvalidInput`` is raised for data the database refuses (a bug upstream: do not retry).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime
from operator import attrgetter
from typing import Any, Final, Protocol

from sqlalchemy import Connection, Engine, Table
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from core.errors import InvalidInput, Unavailable
from core.records import RECORD_FIELDS, RequestRecord
from core.samples import GpuSample, ServerSample
from storage import rollup
from storage.partitions import ensure_partitions
from storage.tables import gpu_samples, server_samples

log = logging.getLogger(__name__)

_COLUMNS: Final = ", ".join(f'"{name}"' for name in RECORD_FIELDS)
_PG_TYPES: Final = {
    "trace_id": "text",
    "span_id": "text",
    "start": "timestamptz",
    "input_tokens": "int4",
    "output_tokens": "int4",
    "cached_tokens": "int4",
}
_FLOAT_FIELDS: Final = frozenset(f.name for f in fields(RequestRecord) if "float" in str(f.type))
_ROW: Final = attrgetter(*RECORD_FIELDS)
_ENGINE_AT: Final = RECORD_FIELDS.index("engine")
_STATUS_AT: Final = RECORD_FIELDS.index("status")
_START_AT: Final = RECORD_FIELDS.index("start")


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What a batch did: ``inserted + duplicates == received``."""

    received: int
    inserted: int
    duplicates: int


class Writer(Protocol):
    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult: ...
    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int: ...
    def write_server_samples(self, samples: Sequence[ServerSample]) -> int: ...


def open_writer(engine: Engine) -> Writer:
    """The writer for ``engine``'s database."""
    if engine.dialect.name == "postgresql":
        return PostgresWriter(engine)
    if engine.dialect.name == "sqlite":
        return SqliteWriter(engine)
    raise InvalidInput(f"unsupported database: {engine.dialect.name}")


def _unique(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The batch without repeats of a natural key (the first copy wins)."""
    seen: dict[tuple[str, str], RequestRecord] = {}
    for record in records:
        seen.setdefault((record.trace_id, record.span_id), record)
    return list(seen.values())


def _row(record: RequestRecord) -> list[Any]:
    row = list(_ROW(record))
    row[_ENGINE_AT] = record.engine.value
    row[_STATUS_AT] = record.status.value
    return row


@contextmanager
def _translate_errors() -> Iterator[None]:
    try:
        yield
    except IntegrityError as exc:
        raise InvalidInput(f"the store refused the batch: {exc.orig}") from exc
    except OperationalError as exc:
        raise Unavailable(f"the store is unavailable: {exc.orig}") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated:
            raise Unavailable(f"lost the connection to the store: {exc.orig}") from exc
        raise


class _BaseWriter:
    staging_ddl: str
    insert_select: str

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult:
        if not records:
            return WriteResult(0, 0, 0)
        batch = _unique(records)
        with _translate_errors(), self.engine.begin() as connection:
            self._prepare(connection, batch)
            connection.exec_driver_sql(self.staging_ddl)
            self._stage(connection, batch)
            stored = {
                (trace_id, span_id)
                for trace_id, span_id in connection.exec_driver_sql(self.insert_select)
            }
            fresh = (
                batch
                if len(stored) == len(batch)
                else [r for r in batch if (r.trace_id, r.span_id) in stored]
            )
            rollup.apply(connection, rollup.deltas_from_records(fresh))
        return WriteResult(len(records), len(fresh), len(records) - len(fresh))

    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int:
        rows = [
            {
                **{f.name: getattr(s, f.name) for f in fields(GpuSample)},
                "throttle_reasons": ",".join(s.throttle_reasons),
            }
            for s in samples
        ]
        return self._insert_samples(gpu_samples, rows, [s.ts for s in samples])

    def write_server_samples(self, samples: Sequence[ServerSample]) -> int:
        rows = [{f.name: getattr(s, f.name) for f in fields(ServerSample)} for s in samples]
        return self._insert_samples(server_samples, rows, [s.ts for s in samples])

    def _insert_samples(
        self, table: Table, rows: list[dict[str, Any]], times: list[datetime]
    ) -> int:
        if not rows:
            return 0
        insert: Callable[[Table], Any] = (
            pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        )
        with _translate_errors(), self.engine.begin() as connection:
            ensure_partitions(connection, table.name, {t.astimezone(UTC).date() for t in times})
            statement = insert(table).on_conflict_do_nothing().returning(table.c.ts)
            stored = connection.execute(statement, rows).all()
        return len(stored)

    def _prepare(self, connection: Connection, batch: Sequence[RequestRecord]) -> None:
        """Dialect hook run before staging (partition creation on PostgreSQL)."""

    def _stage(self, connection: Connection, batch: Sequence[RequestRecord]) -> None:
        raise NotImplementedError


class PostgresWriter(_BaseWriter):
    staging_ddl = (
        "CREATE TEMP TABLE IF NOT EXISTS requests_staging "
        "(LIKE requests INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
    )
    insert_select = (
        f"INSERT INTO requests ({_COLUMNS}) SELECT {_COLUMNS} FROM requests_staging "
        "ON CONFLICT DO NOTHING RETURNING trace_id, span_id"
    )

    def _prepare(self, connection: Connection, batch: Sequence[RequestRecord]) -> None:
        days: set[date] = {r.start.astimezone(UTC).date() for r in batch}
        ensure_partitions(connection, "requests", days)

    def _stage(self, connection: Connection, batch: Sequence[RequestRecord]) -> None:
        raw = connection.connection.driver_connection
        assert raw is not None
        types = [
            _PG_TYPES.get(name, "float8" if name in _FLOAT_FIELDS else "text")
            for name in RECORD_FIELDS
        ]
        with (
            raw.cursor() as cursor,
            cursor.copy(f"COPY requests_staging ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy,
        ):
            copy.set_types(types)
            for record in batch:
                copy.write_row(_row(record))


class SqliteWriter(_BaseWriter):
    staging_ddl = (
        "CREATE TEMP TABLE IF NOT EXISTS requests_staging AS SELECT * FROM main.requests WHERE 0"
    )
    # "WHERE true" keeps SQLite's parser from reading ON CONFLICT as part of the SELECT.
    insert_select = (
        f"INSERT INTO main.requests ({_COLUMNS}) SELECT {_COLUMNS} FROM temp.requests_staging "
        "WHERE true ON CONFLICT DO NOTHING RETURNING trace_id, span_id"
    )

    def _stage(self, connection: Connection, batch: Sequence[RequestRecord]) -> None:
        connection.exec_driver_sql("DELETE FROM temp.requests_staging")
        placeholders = ", ".join("?" for _ in RECORD_FIELDS)
        rows = []
        for record in batch:
            row = _row(record)
            row[_START_AT] = sqlite_timestamp(record.start)
            rows.append(tuple(row))
        connection.exec_driver_sql(
            f"INSERT INTO temp.requests_staging ({_COLUMNS}) VALUES ({placeholders})", rows
        )


def sqlite_timestamp(ts: datetime) -> str:
    """How ``UTCDateTime`` stores a timestamp on SQLite (naive UTC, microseconds)."""
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
