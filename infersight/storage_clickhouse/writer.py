"""The request sink for ClickHouse: large inserts, each request stored and counted once.

A batch is split by day (one partition each: ClickHouse commits an insert of one block into one
partition atomically) and into chunks of at most ``CHUNK`` rows. A request row carries its
latency values' sketch bucket keys (``ttft_key``, …, computed by ``core.sketch``, so they equal
PostgreSQL's to the bit) and its insert's token (``insert_token``); the minute rollups are a
materialized view over ``requests`` (``schema``, step 4) and the hour and day rollups views over
the minutes. For each chunk:

1. the keys (start, trace id, span id) already stored are read, with their rows' insert tokens,
   and dropped;
2. each insert those stored rows came from is run again: its rows read back and inserted under
   its own token (``insert_deduplication_token`` with
   ``deduplicate_blocks_in_dependent_materialized_views``). ClickHouse recognises the rows as
   done and runs the views, each of which stores its rollups only if it has not stored that
   token's yet. An insert commits the rows before its views run, so a failure in between
   (an error in a view, a lost connection, a kill -9) leaves rows without rollups; this
   finishes it, however many other records the replay carries (the sidecar's spool reads its
   oldest ready entries up to its batch size, and more became ready since);
3. the rest is inserted, rows and rollups in one statement, under a token made from its keys.

The batch is acknowledged (returned) only when all of it is stored; an error raises
``Unavailable`` and the sidecar keeps its spool.

What this does not cover: two writers racing on the same key at the same moment (the raw row
is then stored twice until a merge, and reads use ``FINAL``; its rollups would count it twice).
One sidecar ships its own instance's spans one batch at a time, so its keys are never raced.
A token is remembered for the last ``schema.DEDUP_WINDOW`` inserts on one server
(``replicated_deduplication_window`` on a cluster): step 2 for a failure older than that would
count the failed insert's requests twice.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime, timedelta
from operator import attrgetter
from typing import Any, Final, TypeVar

import numpy as np

try:
    import orjson
except ImportError:  # pragma: no cover - orjson comes with the sidecar and server extras
    orjson = None  # type: ignore[assignment]

from infersight.core.accept import AcceptWindow
from infersight.core.errors import InvalidInput
from infersight.core.records import (
    DURATION_FIELDS,
    RECORD_FIELDS,
    RequestRecord,
    Role,
)
from infersight.core.sketch import DEFAULT_RELATIVE_ACCURACY, MIN_VALUE, QuantileSketch
from infersight.core.write import WriteResult
from infersight.storage_clickhouse.schema import Layout, key_columns
from infersight.storage_clickhouse.transport import Transport, quote

T = TypeVar("T")

log = logging.getLogger(__name__)

#: Rows per insert (one block, one part): large, as ClickHouse wants them, and bounded.
CHUNK: Final = 200_000
#: Keys looked up per statement (about 40 bytes each in the statement's text).
LOOKUP: Final = 2_000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)
#: Bucket keys fit in ±2**20 (``core.sketch``'s bound on keys; a key column is an Int32).
_KEY_BOUND: Final = 1 << 20


def micros(ts: datetime) -> int:
    """``ts`` as microseconds since the epoch (exact)."""
    return (ts - _EPOCH) // _MICRO


def _text(ts: datetime) -> str:
    return f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"


def _key(record: RequestRecord) -> tuple[int, str, str]:
    return micros(record.start), record.trace_id, record.span_id


_START: Final = RECORD_FIELDS.index("start")


_FIELDS: Final = attrgetter(*RECORD_FIELDS)


def raw_rows(records: Iterable[RequestRecord]) -> list[list[Any]]:
    """``records`` as rows of ``requests`` (``RECORD_FIELDS`` order)."""
    out = []
    for record in records:
        row: list[Any] = list(_FIELDS(record))
        row[_START] = _text(record.start)
        out.append(row)
    return out


def payload(rows: Iterable[Sequence[Any]]) -> bytes:
    """Rows as ``JSONCompactEachRow`` (floats written so that they read back to the bit)."""
    if orjson is not None:
        return b"\n".join(map(orjson.dumps, rows)) + b"\n"
    return "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows).encode()


def key_columns_of(records: Sequence[RequestRecord]) -> list[list[int | None]]:
    """Per latency field (``schema.key_columns`` order), its records' sketch bucket keys:
    ``QuantileSketch.keys_for`` of each value, ``None`` for no value or one the sketch counts as
    zero."""
    template = QuantileSketch(DEFAULT_RELATIVE_ACCURACY)
    columns: list[list[int | None]] = []
    for field in DURATION_FIELDS:
        values = np.fromiter(
            (np.nan if (v := getattr(r, field)) is None else v for r in records),
            dtype=np.float64,
            count=len(records),
        )
        positive = values >= MIN_VALUE  # NaN compares false
        keys = np.zeros(len(records), dtype=np.int64)
        if positive.any():
            keys[positive] = template.keys_for(values[positive])
            if keys.min() <= -_KEY_BOUND or keys.max() >= _KEY_BOUND:
                raise InvalidInput(f"{field} holds a value outside the sketch's range")
        column = keys.astype(object)
        column[~positive] = None
        columns.append(column.tolist())
    return columns


#: The columns the writer inserts into ``requests``.
STORED_FIELDS: Final = (*RECORD_FIELDS, *key_columns(), "insert_token")
#: The columns the writer inserts into ``request_parts`` (prefill legs: no bucket keys).
PART_FIELDS: Final = (*RECORD_FIELDS, "insert_token")


def stored_rows(records: Sequence[RequestRecord], token: str) -> list[list[Any]]:
    """``records`` as the writer stores them (``STORED_FIELDS`` order)."""
    keys = key_columns_of(records)
    return [[*row, *k, token] for row, *k in zip(raw_rows(records), *keys, strict=True)]


def _token(records: Iterable[RequestRecord]) -> str:
    digest = hashlib.sha256()
    for key in sorted(_key(r) for r in records):
        digest.update(f"{key[0]}/{key[1]}/{key[2]};".encode())
    return "q" + digest.hexdigest()


class AcceptingWriter:
    """What every ClickHouse writer holds: the database, and the window of times it accepts
    (``None``: any) by its clock."""

    def __init__(
        self,
        transport: Transport,
        layout: Layout,
        accept: AcceptWindow | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.transport = transport
        self.layout = layout
        self.accept = accept
        self.clock = clock or (lambda: datetime.now(UTC))

    def accepted(self, items: Sequence[T], when: Callable[[T], datetime]) -> Sequence[T]:
        """``items`` whose time (``when``) lies in the accepted window now."""
        if self.accept is None:
            return items
        low, high = self.accept.bounds(self.clock())
        return [item for item in items if low <= when(item) <= high]


#: ``AcceptingWriter.accepted``'s time of a record or span, and of a sample.
STARTED: Final = attrgetter("start")
SAMPLED: Final = attrgetter("ts")


class ClickHouseWriter(AcceptingWriter):
    """Request records into ClickHouse: ``core.write.Sink``'s ``write_requests`` (the other
    kinds have writers of their own, ``hybrid.HybridSink``)."""

    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult:
        """Store the user requests of ``records`` in ``requests`` and their prefill legs
        (``Role.PREFILL``, disaggregated serving) in ``request_parts``, each key once per table
        (as the SQL store keeps them). The answer counts user requests only, as the SQL
        store's does: ``inserted + duplicates + refused == received``."""
        legs = [r for r in records if r.role is Role.PREFILL]
        users_in = [r for r in records if r.role is not Role.PREFILL] if legs else records
        received = len(users_in)
        users = self.accepted(users_in, STARTED)
        refused = received - len(users)
        inserted = self._store_all(users, "requests")
        if legs:
            # Users' requests first: a failure here leaves them stored, and the replay finds
            # them (duplicates) and stores the legs.
            self._store_all(self.accepted(legs, STARTED), "request_parts")
        return WriteResult(received, inserted, len(users) - inserted, refused)

    def _store_all(self, records: Sequence[RequestRecord], table: str) -> int:
        """Store ``records`` in ``table`` a day and a chunk at a time: how many were new."""
        unique: dict[tuple[int, str, str], RequestRecord] = {}
        for record in records:
            unique.setdefault(_key(record), record)
        by_day: dict[date, list[RequestRecord]] = defaultdict(list)
        for record in unique.values():
            by_day[record.start.astimezone(UTC).date()].append(record)
        inserted = 0
        for day in sorted(by_day):
            rows = sorted(by_day[day], key=_key)
            for i in range(0, len(rows), CHUNK):
                if table == "requests":
                    inserted += self._store_chunk(day, rows[i : i + CHUNK])
                else:
                    inserted += self._store_legs(rows[i : i + CHUNK])
        return inserted

    def _stored_keys(
        self, records: Sequence[RequestRecord], table: str = "requests"
    ) -> dict[tuple[int, str, str], str]:
        """The keys of ``records`` (sorted by key) already stored, each with its row's insert
        token, looked up ``LOOKUP`` keys a statement (a statement stays far below ClickHouse's
        ``max_query_size``), each within its keys' time range, models and instances (the
        table's order)."""
        out: dict[tuple[int, str, str], str] = {}
        if not self._any_stored(records, table):
            return out
        for i in range(0, len(records), LOOKUP):
            part = records[i : i + LOOKUP]
            models = ", ".join(quote(m) for m in sorted({r.model for r in part}))
            instances = ", ".join(quote(m) for m in sorted({r.instance for r in part}))
            spans = ", ".join(f"({quote(r.trace_id)}, {quote(r.span_id)})" for r in part)
            rows = self.transport.rows(
                "SELECT toUnixTimestamp64Micro(start), trace_id, span_id, insert_token"
                f" FROM {self.layout.table(table)}"
                f" WHERE model IN ({models}) AND instance IN ({instances})"
                f" AND start >= {quote(_text(part[0].start))}"
                f" AND start <= {quote(_text(part[-1].start))}"
                f" AND (trace_id, span_id) IN ({spans})"
            )
            out.update(((int(m), t, s), token) for m, t, s, token in rows)
        return out

    def _any_stored(self, ordered: Sequence[RequestRecord], table: str = "requests") -> bool:
        """Whether any request of the records' models and instances is stored in their time
        range (one cheap count; a sidecar's fresh batch usually meets none)."""
        models = ", ".join(quote(m) for m in sorted({r.model for r in ordered}))
        instances = ", ".join(quote(m) for m in sorted({r.instance for r in ordered}))
        rows = self.transport.rows(
            f"SELECT count() FROM {self.layout.table(table)}"
            f" WHERE model IN ({models}) AND instance IN ({instances})"
            f" AND start >= {quote(_text(ordered[0].start))}"
            f" AND start <= {quote(_text(ordered[-1].start))}"
        )
        return bool(rows and rows[0][0])

    def _settings(self, token: str) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "insert_deduplication_token": token,
            "deduplicate_blocks_in_dependent_materialized_views": 1,
            "input_format_parallel_parsing": 0,
            "max_insert_block_size": CHUNK * 2,
            "min_insert_block_size_rows": 0,
            "min_insert_block_size_bytes": 0,
        }
        if self.layout.cluster:
            settings["distributed_foreground_insert"] = 1
        return settings

    def _finish(self, day: date, token: str) -> None:
        """Run the insert ``token`` again: its rows, read back in the order it inserted them,
        under its token, so that each view stores what it has not stored yet."""
        rows = self.transport.rows(
            f"SELECT {', '.join(STORED_FIELDS)} FROM {self.layout.table('requests')} FINAL"
            f" WHERE toDate(start) = {quote(day.isoformat())}"
            f" AND insert_token = {quote(token)} ORDER BY start, trace_id, span_id"
        )
        if rows:
            self.transport.insert(
                self.layout.table("requests"), STORED_FIELDS, payload(rows), self._settings(token)
            )

    def _store_chunk(self, day: date, records: Sequence[RequestRecord]) -> int:
        stored = self._stored_keys(records)
        # Rows stored before schema step 4 have no token: that writer stored their rollups.
        for token in sorted({t for t in stored.values() if t}):
            self._finish(day, token)
        fresh = [r for r in records if _key(r) not in stored] if stored else list(records)
        if not fresh:
            return 0
        token = _token(fresh)
        self.transport.insert(
            self.layout.table("requests"),
            STORED_FIELDS,
            payload(stored_rows(fresh, token)),
            self._settings(token),
        )
        return len(fresh)

    def _store_legs(self, records: Sequence[RequestRecord]) -> int:
        """Prefill legs (sorted by key, one day) into ``request_parts``: the keys already
        stored dropped, the rest inserted under a token made from their keys (no views hang on
        this table, so an insert that failed left nothing behind to finish)."""
        stored = self._stored_keys(records, "request_parts")
        fresh = [r for r in records if _key(r) not in stored] if stored else list(records)
        if not fresh:
            return 0
        token = _token(fresh)
        rows = [[*row, token] for row in raw_rows(fresh)]
        self.transport.insert(
            self.layout.table("request_parts"), PART_FIELDS, payload(rows), self._settings(token)
        )
        return len(fresh)
