"""The durable local spool: an append-only SQLite WAL file that holds everything the sidecar
acknowledged until the shipper has stored it.

Durability contract: ``append`` returns a future that resolves only after the entries are
committed with ``synchronous=FULL`` (the WAL is fsynced). One committer thread owns the
writes and commits every pending append in one transaction (group commit); in ``group`` mode
consecutive commits are at least ``group_window_s`` apart, so fsyncs are bounded while
concurrent exports share them; ``always`` commits each append on its own.

The spool is bounded by bytes: above ``max_bytes`` appends are refused with ``Unavailable``
(the receivers answer 503 + Retry-After, reason ``spool_max_bytes``). A full disk is the same
refusal (reason ``spool_disk_full``), never a crash, and never a spool that cannot drain:

- a reserve file (``spool.reserve``, ``reserve_bytes`` preallocated, by default a 16th of the
  filesystem within 256 KiB … 16 MiB) holds the space that deleting shipped entries and
  checkpointing the WAL need; it is released when a delete meets a full disk (or when the
  spool opens on a nearly full one) and taken again once the drain has made room;
- appends are refused before they would eat into that space: the free space of the spool's
  filesystem (``os.statvfs``, plus the pages SQLite holds free for reuse, minus a WAL
  checkpoint's worth and a missing reserve) must cover three times what is being appended;
- a delete that meets a full disk rolls back cleanly and is retried once the reserve is
  released, and while space is short every delete is followed by a ``TRUNCATE`` checkpoint so
  that the WAL gives its space back; on a small filesystem the WAL is checkpointed sooner.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cache
from itertools import chain
from pathlib import Path
from typing import Final, NamedTuple

from infersight.core.errors import ConfigurationError, Unavailable

log = logging.getLogger(__name__)

SPOOL_FILE: Final = "spool.sqlite"
#: The space kept for draining (see the module's docstring).
RESERVE_FILE: Final = "spool.reserve"
#: The automatic reserve: a 16th of the spool's filesystem, within these bounds.
MIN_RESERVE: Final = 256 * 1024
MAX_RESERVE: Final = 16 << 20
#: Most WAL pages before a checkpoint (SQLite's default), fewer on a small filesystem (a 64th
#: of it, at least MIN_WAL_PAGES).
MAX_WAL_PAGES: Final = 1000
MIN_WAL_PAGES: Final = 16
#: Disk bytes an append may take per byte it holds: the WAL frame, the page it is checkpointed
#: to and the pages' slack (the measured free space corrects the estimate after every commit).
DISK_FACTOR: Final = 3
#: Entries deleted per statement, and per transaction while disk space is short.
BULK_DELETE: Final = 500
TIGHT_DELETE: Final = 32
#: What ``refusal`` tries: an append of this many bytes.
PROBE_BYTES: Final = 64 * 1024
#: Refusal reasons (``Unavailable.details["reason"]``, the ``bodies_refused`` label).
DISK_FULL: Final = "spool_disk_full"
AT_MAX_BYTES: Final = "spool_max_bytes"
ROW_OVERHEAD: Final = 64  # bytes a row costs beyond its payload (key, index entry, header)
#: SQLite page cache of the spool connection (KiB). Appends and the shipper's reads touch the
#: newest pages only; the default 2 MiB would mostly hold pages that are never read again.
CACHE_KIB: Final = 512
MAX_GROUP_WINDOW_S: Final = 0.2
#: Entries inserted per statement (four values each, well below SQLite's variable limit).
INSERT_ROWS: Final = 128

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


#: The parallel-sampling groups the shipper stored lately (``load_groups``): a restarted
#: sidecar still recognises a late sequence of a request stored before. Bounded by the
#: memory's own bounds (15 minutes, 32,768 groups): a few MiB at most.
_GROUP_SCHEMA: Final = (
    "DROP TABLE IF EXISTS sequence_groups",  # its first form (no spans), never released
    """CREATE TABLE IF NOT EXISTS sequence_memory (
        trace_id TEXT NOT NULL,
        parent_span_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        remembered_at REAL NOT NULL,
        start_us INTEGER NOT NULL,
        span_id TEXT NOT NULL,
        spans TEXT NOT NULL,
        PRIMARY KEY (trace_id, parent_span_id, request_id)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS sequence_memory_at ON sequence_memory (remembered_at)",
)
_GROUP_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


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
    #: Bytes kept in the reserve file for draining (``None``: a 16th of the filesystem,
    #: within ``MIN_RESERVE`` … ``MAX_RESERVE``; 0: no reserve file).
    reserve_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ConfigurationError("spool max_bytes must be positive")
        if self.reserve_bytes is not None and self.reserve_bytes < 0:
            raise ConfigurationError("spool reserve_bytes must not be negative")
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
        self.reserve_path = config.directory / RESERVE_FILE
        total = self._filesystem_bytes()
        self.reserve_bytes = (
            min(MAX_RESERVE, max(MIN_RESERVE, total // 16))
            if config.reserve_bytes is None
            else config.reserve_bytes
        )
        wal_pages = min(MAX_WAL_PAGES, max(MIN_WAL_PAGES, total // 64 // 4096))
        #: What a WAL may still take, and its checkpoint add to the file, beyond the entries
        #: being appended: the checkpoint threshold and a commit past it.
        self.wal_allowance = 2 * wal_pages * 4096
        self._reserve_held = self._reserve_present()
        if self._reserve_held and self._disk_free() < self.wal_allowance:
            # Opening on a nearly full disk: the WAL's recovery and the drain get the reserve.
            self._release_reserve()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.execute(f"PRAGMA wal_autocheckpoint={wal_pages}")
        self._db.execute(f"PRAGMA journal_size_limit={self.wal_allowance}")
        if config.max_pages is not None:
            self._db.execute(f"PRAGMA max_page_count={int(config.max_pages)}")
        for statement in _SCHEMA:
            self._db.execute(statement)
        count, size = self._db.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM entries"
        ).fetchone()
        self._page_size = int(self._db.execute("PRAGMA page_size").fetchone()[0])
        self._records = int(count)
        self._bytes = int(size) + ROW_OVERHEAD * int(count)
        self._reserved = 0
        self._checkpoint()  # a WAL left by the last run gives its space back
        #: Disk bytes appends may still take (see ``_measure``), as of the last write.
        self._headroom = self._measure()
        self._lock = threading.Lock()  # guards the connection
        self._groups_ready = False  # the parallel-sampling groups' table exists
        self._groups_skipped = False  # the last save was skipped: space is short
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
                    details={
                        "bytes": self._bytes,
                        "max_bytes": self.config.max_bytes,
                        "reason": AT_MAX_BYTES,
                    },
                )
            if entries and not self._room_for(size):
                self._headroom = self._measure_disk()  # freed outside since the last write?
                if not self._room_for(size):
                    raise Unavailable(
                        "the spool's disk is full (the space kept for draining is not touched)",
                        details={"disk_headroom_bytes": self._headroom, "reason": DISK_FULL},
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
                self._insert(rows)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                error = exc
                self._rollback()
            headroom = self._measure()
        self._last_commit = time.monotonic()
        with self._cond:
            self._reserved -= size
            self._headroom = headroom
            if error is None:
                self._records += len(rows)
                self._bytes += size
        for pending in batch:
            if error is None:
                pending.future.set_result(None)
            else:
                log.warning("spool append failed: %s", error)
                details = {"error": str(error)}
                if _disk_full(error):
                    details["reason"] = DISK_FULL
                pending.future.set_exception(
                    Unavailable("the spool cannot store more data", details=details)
                )

    def _insert(self, rows: Sequence[Entry]) -> None:
        """Insert ``rows`` in order, ``INSERT_ROWS`` per statement (then the rest in pieces of
        64, 32, … 1 rows, so that every statement's text is one of a few, prepared once): an
        ``executemany`` costs a statement execution per row, and the ``AUTOINCREMENT``
        counter's update with each, about a third of the commit's CPU (the caller holds the
        lock, in a transaction)."""
        start, count = 0, len(rows)
        while start < count:
            size = min(INSERT_ROWS, count - start)
            if size < INSERT_ROWS:
                size = 1 << (size.bit_length() - 1)  # the largest power of two that fits
            self._db.execute(
                _insert_statement(size), list(chain.from_iterable(rows[start : start + size]))
            )
            start += size

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
        """Forget shipped entries (only ever called after the store confirmed them).

        Deleting rewrites the pages it empties, so it takes disk too: while space is short
        (the reserve released, or less headroom than the reserve) entries are deleted
        ``TIGHT_DELETE`` at a time, each followed by a ``TRUNCATE`` checkpoint, and a delete
        that meets a full disk releases the reserve and goes on that way: a drain always
        proceeds. A failure leaves the entries not yet deleted in place (shipped again later,
        which the store ignores)."""
        if not seqs:
            return
        freed = removed = 0
        try:
            with self._lock:
                # Without a reserve (reserve_bytes=0) space is short only once a delete
                # meets a full disk (below); small checkpointed steps would cost an fsync
                # each for nothing.
                tight = self.reserve_bytes > 0 and (
                    not self._reserve_held or self._headroom < self.reserve_bytes
                )
                start = 0
                while start < len(seqs):
                    step = TIGHT_DELETE if tight else BULK_DELETE
                    chunk = seqs[start : start + step]
                    try:
                        size, count = self._delete(chunk)
                    except sqlite3.Error as exc:
                        if not _disk_full(exc) or (tight and not self._reserve_held):
                            raise
                        log.warning("the spool's disk is full: its reserve is released to drain")
                        self._release_reserve()
                        self._checkpoint()
                        tight = True
                        continue
                    freed, removed, start = freed + size, removed + count, start + step
                    if tight:
                        self._checkpoint()
        finally:
            with self._lock:
                headroom = self._measure()
            with self._cond:
                self._bytes -= freed
                self._records -= removed
                self._headroom = headroom

    def _delete(self, seqs: Sequence[int]) -> tuple[int, int]:
        """Delete ``seqs`` in one transaction (the caller holds the lock): bytes and entries
        freed. A failure rolls back whatever SQLite has not rolled back itself."""
        try:
            self._db.execute("BEGIN IMMEDIATE")
            freed = removed = 0
            for start in range(0, len(seqs), BULK_DELETE):
                chunk = list(seqs[start : start + BULK_DELETE])
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
            self._rollback()
            raise
        return freed, removed

    def _rollback(self) -> None:
        """Roll back the open transaction, if SQLite has not already (it does on SQLITE_FULL:
        a plain ROLLBACK then fails with "no transaction is active" and hides the error)."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                log.exception("cannot roll back the spool's transaction")

    # --- disk space --------------------------------------------------------------------------

    def _room_for(self, size: int) -> bool:
        """Whether ``size`` more bytes fit beside those pending without touching the space
        kept for draining (the caller holds ``_cond``)."""
        return self._headroom >= DISK_FACTOR * (self._reserved + size)

    def refusal(self) -> str | None:
        """Why an append of ``PROBE_BYTES`` would be refused now (``AT_MAX_BYTES``,
        ``DISK_FULL``), or ``None``: for ``/healthz``."""
        with self._cond:
            if self._bytes + self._reserved + PROBE_BYTES > self.config.max_bytes:
                return AT_MAX_BYTES
            if not self._room_for(PROBE_BYTES):
                return DISK_FULL
        return None

    def disk(self) -> dict[str, int | bool]:
        """The spool's disk as the last write left it: for ``/healthz``."""
        with self._cond:
            return {
                "disk_headroom_bytes": max(0, self._headroom),
                "reserve_held": self._reserve_held,
            }

    def _filesystem_bytes(self) -> int:
        try:
            stat = os.statvfs(self.config.directory)
        except OSError:
            return 0
        return stat.f_blocks * stat.f_frsize

    def _disk_free(self) -> int:
        """Bytes free to this process on the spool's filesystem."""
        try:
            stat = os.statvfs(self.config.directory)
        except OSError:
            return 0
        return stat.f_bavail * stat.f_frsize

    def _measure(self) -> int:
        """Measure the headroom (the caller holds the lock, or the connection is not shared
        yet); takes the reserve again once there is room for it."""
        try:
            self._free_pages = int(self._db.execute("PRAGMA freelist_count").fetchone()[0])
        except sqlite3.Error:
            self._free_pages = 0
        room = 2 * self.reserve_bytes + self.wal_allowance
        if not self._reserve_held and self.reserve_bytes and self._disk_free() >= room:
            self._take_reserve()
        return self._measure_disk()

    def _measure_disk(self) -> int:
        """Disk bytes appends may take: the filesystem's free bytes and the file's free pages,
        less a WAL checkpoint's worth and, while it is not held, the reserve."""
        missing = 0 if self._reserve_held else self.reserve_bytes
        free = self._disk_free() + self._free_pages * self._page_size
        return free - self.wal_allowance - missing

    def _checkpoint(self) -> None:
        """Copy the WAL into the file and truncate it (its space back to the filesystem)."""
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("cannot checkpoint the spool's WAL yet: %s", exc)

    def _reserve_present(self) -> bool:
        try:
            stat = self.reserve_path.stat()
        except OSError:
            return False
        return self.reserve_bytes > 0 and stat.st_blocks * 512 >= self.reserve_bytes

    def _take_reserve(self) -> None:
        """Preallocate the reserve file (nothing happens if the disk cannot hold it)."""
        try:
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.reserve_bytes)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning(
                "cannot reserve %d bytes for draining the spool: %s", self.reserve_bytes, exc
            )
            self.reserve_path.unlink(missing_ok=True)
            return
        self._reserve_held = True

    def _release_reserve(self) -> None:
        self.reserve_path.unlink(missing_ok=True)
        self._reserve_held = False

    # --- parallel-sampling groups (``collector.assembly.SequenceMemory``'s store) ----------

    def _groups_table(self) -> None:
        """Create the groups' table once (under ``_lock``): spools written before it lack it."""
        if not self._groups_ready:
            for statement in _GROUP_SCHEMA:
                self._db.execute(statement)
            self._groups_ready = True

    def load_groups(
        self, since: float, limit: int
    ) -> list[tuple[tuple[str, str, str], float, tuple[datetime, str, str], tuple[str, ...]]]:
        """The newest ``limit`` groups remembered at or after ``since``, oldest first; none
        when they cannot be read (logged: late sequences are then stored apart)."""
        try:
            with self._lock:
                self._groups_table()
                rows = self._db.execute(
                    "SELECT trace_id, parent_span_id, request_id, remembered_at, start_us,"
                    " span_id, spans FROM sequence_memory WHERE remembered_at >= ?"
                    " ORDER BY remembered_at DESC LIMIT ?",
                    (since, limit),
                ).fetchall()
        except sqlite3.Error:
            log.exception("cannot read the remembered parallel-sampling groups")
            return []
        return [
            (
                (trace, parent, request),
                at,
                (_GROUP_EPOCH + timedelta(microseconds=us), trace, span),
                tuple(spans.split(",")),
            )
            for trace, parent, request, at, us, span, spans in reversed(rows)
        ]

    def save_groups(
        self,
        added: Sequence[
            tuple[tuple[str, str, str], float, tuple[datetime, str, str], tuple[str, ...]]
        ],
        dropped: Sequence[tuple[str, str, str]],
        horizon: float,
    ) -> None:
        """Keep ``added``, forget ``dropped`` and what was remembered before ``horizon``, in
        one transaction (fsynced, like appends). Draining must never wait on the memory, nor
        lose to it the disk its deletes need: while space is short (the reserve released, less
        headroom than the reserve, or too little for these rows beside pending appends) the
        save is skipped, and a failure (a full disk) is logged and rolled back, never raised;
        the groups not kept then last only as long as the process."""
        rows = [
            (
                g[0], g[1], g[2], at, (r[0] - _GROUP_EPOCH) // timedelta(microseconds=1), r[2],
                ",".join(spans),
            )
            for g, at, r, spans in added
        ]  # fmt: skip
        size = sum(ROW_OVERHEAD + sum(len(str(v)) for v in row) for row in rows)
        try:
            with self._lock:
                with self._cond:
                    short = (
                        self.reserve_bytes > 0
                        and (not self._reserve_held or self._headroom < self.reserve_bytes)
                    ) or not self._room_for(size)
                if short:
                    if not self._groups_skipped:
                        log.warning(
                            "the spool's disk is short of space: the parallel-sampling groups"
                            " are kept in memory only until it drains"
                        )
                    self._groups_skipped = True
                    return
                self._groups_skipped = False
                self._groups_table()
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.executemany(
                        "INSERT OR IGNORE INTO sequence_memory VALUES (?, ?, ?, ?, ?, ?, ?)", rows
                    )
                    self._db.executemany(
                        "DELETE FROM sequence_memory"
                        " WHERE trace_id = ? AND parent_span_id = ? AND request_id = ?",
                        dropped,
                    )
                    self._db.execute(
                        "DELETE FROM sequence_memory WHERE remembered_at < ?", (horizon,)
                    )
                    self._db.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
        except sqlite3.Error:
            log.exception("cannot keep the parallel-sampling groups in the spool")
        with self._lock:
            headroom = self._measure()
        with self._cond:
            self._headroom = headroom

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


@cache
def _insert_statement(rows: int) -> str:
    return "INSERT INTO entries (kind, trace_id, ready_at, payload) VALUES " + ",".join(
        ["(?, ?, ?, ?)"] * rows
    )


def _disk_full(error: BaseException) -> bool:
    """Whether a SQLite error says the disk (or the file's page cap) is full."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_FULL
