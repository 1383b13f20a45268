"""The durable local spool: an append-only SQLite WAL file that holds everything the sidecar
acknowledged until the shipper has stored it.

Durability contract: ``append`` returns a future that resolves only after the entries are
committed with ``synchronous=FULL`` (the WAL is fsynced). One committer thread owns the
writes and commits every pending append in one transaction (group commit); in ``group`` mode
consecutive commits are at least ``group_window_s`` apart, so fsyncs are bounded while
concurrent exports share them; ``always`` commits each append on its own.

The spool is bounded by bytes: above ``max_bytes`` appends are refused with ``Unavailable``
(the receivers answer 503 + Retry-After). A full disk is the same refusal, never a crash.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final, NamedTuple

from infersight.core.errors import ConfigurationError, Unavailable

log = logging.getLogger(__name__)

SPOOL_FILE: Final = "spool.sqlite"
ROW_OVERHEAD: Final = 64  # bytes a row costs beyond its payload (key, index entry, header)
#: SQLite page cache of the spool connection (KiB). Appends and the shipper's reads touch the
#: newest pages only; the default 2 MiB would mostly hold pages that are never read again.
CACHE_KIB: Final = 512
MAX_GROUP_WINDOW_S: Final = 0.2

#: The one kind of entry looked up by trace id (``collector.codec.Kind.STAGE``: stage
#: fragments waiting for their request). Only these are indexed: indexing every entry by a
#: random trace id made each append dirty an index page per row, most of an append's cost.
TRACE_INDEXED_KIND: Final = 2
#: The kinds of periodic samples (``collector.codec.Kind.GPU`` and ``SERVER``): few rows, but
#: looked up on every shipping pass; their own index keeps that from scanning a spool full of
#: records (a backlog after an outage) to find that there are none.
SAMPLE_KINDS: Final = (3, 4)

_SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS entries (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        kind INTEGER NOT NULL,
        trace_id TEXT NOT NULL,
        ready_at REAL NOT NULL,
        payload BLOB NOT NULL)""",
    "DROP INDEX IF EXISTS entries_trace",  # spools written before the partial index
    f"""CREATE INDEX IF NOT EXISTS entries_stage_trace ON entries (trace_id)
        WHERE kind = {TRACE_INDEXED_KIND}""",
    f"""CREATE INDEX IF NOT EXISTS entries_samples ON entries (seq)
        WHERE kind IN ({", ".join(map(str, SAMPLE_KINDS))})""",
)


def _kinds(kinds: Sequence[int]) -> str:
    """Kinds spelled as literals, so that SQLite can match a partial index to the query."""
    return ", ".join(str(kind) for kind in sorted({int(kind) for kind in kinds}))


class FsyncMode(StrEnum):
    GROUP = "group"
    ALWAYS = "always"


@dataclass(frozen=True, slots=True)
class SpoolConfig:
    directory: Path
    max_bytes: int = 1 << 30
    fsync: FsyncMode = FsyncMode.GROUP
    group_window_s: float = 0.02
    #: SQLite's max_page_count: a hard cap on the file, below the disk's own (tests use it).
    max_pages: int | None = None

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ConfigurationError("spool max_bytes must be positive")
        if not 0.0 <= self.group_window_s <= MAX_GROUP_WINDOW_S:
            raise ConfigurationError(f"group commit window must be in [0, {MAX_GROUP_WINDOW_S}] s")


class Entry(NamedTuple):
    """One entry to append. A ``NamedTuple`` in the spool's column order: the ingestor makes
    one per span received, and the committer hands the tuples to SQLite as they are."""

    kind: int
    trace_id: str
    ready_at: float
    payload: bytes

    @property
    def size(self) -> int:
        return len(self.payload) + ROW_OVERHEAD


class Stored(NamedTuple):
    """One entry read back (a ``NamedTuple``, like ``Entry``: the shipper reads thousands)."""

    seq: int
    kind: int
    trace_id: str
    ready_at: float
    payload: bytes


@dataclass
class _Pending:
    entries: Sequence[Entry]
    size: int
    future: Future[None]


class Spool:
    """Append, read what is ready, delete what was shipped; thread-safe."""

    def __init__(self, config: SpoolConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        config.directory.mkdir(parents=True, exist_ok=True)
        self.path = config.directory / SPOOL_FILE
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        if config.max_pages is not None:
            self._db.execute(f"PRAGMA max_page_count={int(config.max_pages)}")
        for statement in _SCHEMA:
            self._db.execute(statement)
        count, size = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM entries"
        ).fetchone()
        self._records = int(count)
        self._bytes = int(size) + ROW_OVERHEAD * int(count)
        self._reserved = 0
        self._lock = threading.Lock()  # guards the connection
        self._cond = threading.Condition()  # guards the pending queue and the counters
        self._pending: list[_Pending] = []
        self._closing = False
        self._last_commit = 0.0
        self._thread = threading.Thread(target=self._run, name="spool-commit", daemon=True)
        self._thread.start()

    # --- appending -----------------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> Future[None]:
        """Queue ``entries``; the future resolves once they are durable, or fails with
        ``Unavailable`` (spool full, disk full, closing)."""
        future: Future[None] = Future()
        size = sum(len(entry.payload) for entry in entries) + ROW_OVERHEAD * len(entries)
        with self._cond:
            if self._closing:
                raise Unavailable("the spool is closing")
            if self._bytes + self._reserved + size > self.config.max_bytes:
                raise Unavailable(
                    "the spool is over its high-water mark",
                    details={"bytes": self._bytes, "max_bytes": self.config.max_bytes},
                )
            if not entries:
                future.set_result(None)
                return future
            self._reserved += size
            self._pending.append(_Pending(entries, size, future))
            self._cond.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending:
                    return
            self._wait_window()
            with self._cond:
                if self.config.fsync is FsyncMode.ALWAYS:
                    batch = [self._pending.pop(0)]
                else:
                    batch, self._pending = self._pending, []
            self._commit(batch)

    def _wait_window(self) -> None:
        if self.config.fsync is FsyncMode.GROUP:
            remaining = self._last_commit + self.config.group_window_s - time.monotonic()
            if remaining > 0:
                time.sleep(remaining)

    def _commit(self, batch: list[_Pending]) -> None:
        rows = [entry for pending in batch for entry in pending.entries]  # already row tuples
        size = sum(pending.size for pending in batch)
        error: Exception | None = None
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                self._db.executemany(
                    "INSERT INTO entries (kind, trace_id, ready_at, payload) VALUES (?, ?, ?, ?)",
                    rows,
                )
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                error = exc
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
        self._last_commit = time.monotonic()
        with self._cond:
            self._reserved -= size
            if error is None:
                self._records += len(rows)
                self._bytes += size
        for pending in batch:
            if error is None:
                pending.future.set_result(None)
            else:
                log.warning("spool append failed: %s", error)
                pending.future.set_exception(
                    Unavailable("the spool cannot store more data", details={"error": str(error)})
                )

    # --- reading and deleting ------------------------------------------------------------

    def ready(self, now: float, kinds: Sequence[int], limit: int) -> list[Stored]:
        """Up to ``limit`` entries of ``kinds`` whose ``ready_at`` has passed, oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT seq, kind, trace_id, ready_at, payload FROM entries "
                f"WHERE kind IN ({_kinds(kinds)}) AND ready_at <= ? ORDER BY seq LIMIT ?",
                (now, limit),
            ).fetchall()
        return list(map(Stored._make, rows))

    def by_trace(
        self, trace_ids: Sequence[str], kind: int, per_trace: int | None = None
    ) -> list[Stored]:
        """Entries of ``kind`` for these traces (indexed for ``TRACE_INDEXED_KIND`` only), at
        most the oldest ``per_trace`` of each trace when given (memory stays bounded whatever
        one trace holds)."""
        out: list[Stored] = []
        columns = "seq, kind, trace_id, ready_at, payload"
        # The kind is spelled as a literal so that SQLite can use the partial index.
        kind_literal = int(kind)
        with self._lock:
            if (
                kind_literal == TRACE_INDEXED_KIND
                and not self._db.execute(
                    f"SELECT 1 FROM entries WHERE kind = {kind_literal} LIMIT 1"
                ).fetchone()
            ):
                return out  # none at all (engines without stage spans): one index probe
            for start in range(0, len(trace_ids), 500):
                chunk = trace_ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                query = (
                    f"SELECT {columns} FROM entries "
                    f"WHERE trace_id IN ({marks}) AND kind = {kind_literal}"
                )
                params: list[object] = list(chunk)
                if per_trace is not None:
                    query = (
                        f"SELECT {columns} FROM (SELECT {columns}, ROW_NUMBER() OVER "
                        f"(PARTITION BY trace_id ORDER BY seq) AS n FROM ({query})) WHERE n <= ?"
                    )
                    params.append(per_trace)
                out.extend(map(Stored._make, self._db.execute(query, params)))
        return out

    def oldest_ready_at(self, kinds: Sequence[int]) -> float | None:
        """``ready_at`` of the oldest entry of ``kinds`` (by append order: no full scan)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT ready_at FROM entries WHERE kind IN ({_kinds(kinds)}) ORDER BY seq LIMIT 1"
            ).fetchone()
        return None if row is None else float(row[0])

    def delete(self, seqs: Sequence[int]) -> None:
        """Forget shipped entries (only ever called after the store confirmed them)."""
        if not seqs:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                freed = removed = 0
                for start in range(0, len(seqs), 500):
                    chunk = list(seqs[start : start + 500])
                    marks = ",".join("?" * len(chunk))
                    (size, count) = self._db.execute(
                        f"SELECT COALESCE(SUM(LENGTH(payload)), 0), COUNT(*) FROM entries "
                        f"WHERE seq IN ({marks})",
                        chunk,
                    ).fetchone()
                    self._db.execute(f"DELETE FROM entries WHERE seq IN ({marks})", chunk)
                    freed += int(size) + ROW_OVERHEAD * int(count)
                    removed += int(count)
                self._db.execute("COMMIT")
            except sqlite3.Error:
                self._db.execute("ROLLBACK")
                raise
        with self._cond:
            self._bytes -= freed
            self._records -= removed

    def stats(self) -> tuple[int, int]:
        """Entries and bytes held."""
        with self._cond:
            return self._records, self._bytes

    def now(self) -> float:
        return self._clock()

    def close(self) -> None:
        """Commit what is pending, then close the file."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        with self._lock:
            self._db.close()
