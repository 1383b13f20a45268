"""A demo plays into a store of its own: what a store already holds, and ``--fresh``.

A demo backfills healthy history, captures its baseline from it and announces the incidents it
sees open. On a store that already holds a demo's (or anyone's) data, none of that is true any
more: the backfill is skipped or doubles the traffic, the baseline spans the earlier run's
faults, and incidents still open from before are announced as new (issue 35). So ``infersight
demo`` refuses a store that holds requests, incidents or load-test runs, and says how to go on:
``--fresh`` moves a SQLite store aside (renamed with the time, never deleted) and starts a new
one; a PostgreSQL store is never emptied or moved by a demo: give it an empty database.

``--fresh`` moves only a store a demo created: a demo marks the SQLite file it plays into
(``PRAGMA application_id``, in the file's header), and a store without the mark, someone's
real data, is refused even with ``--fresh``. Nor is a store moved while another process has
it open (a ``serve`` on another port, a sidecar): renaming a SQLite file in use can lose what
that process writes next. The move first takes the file for itself (no busy wait: switching
it out of WAL, which SQLite allows only to its one connection, folds the WAL into the file;
then ``BEGIN EXCLUSIVE``), lets go and renames it; any other connection, and the move is
refused.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sqlalchemy.exc import DBAPIError

from infersight.core.errors import InvalidInput
from infersight.service.admin import contents, redact, sqlite_file

if TYPE_CHECKING:
    from infersight.service.store import Store

#: The files SQLite keeps beside a database in WAL mode.
_COMPANIONS = ("", "-wal", "-shm", "-journal")
#: ``PRAGMA application_id`` of a SQLite store a demo created ("IfDm").
DEMO_APPLICATION_ID: Final = 0x4966446D


@dataclass(frozen=True, slots=True)
class Held:
    """What a store holds that a demo would mix with its own."""

    requests: int
    first: datetime | None
    last: datetime | None
    incidents: int
    runs: int

    @property
    def empty(self) -> bool:
        return not (self.requests or self.incidents or self.runs)

    def describe(self) -> str:
        parts = []
        if self.requests:
            span = ""
            if self.first is not None and self.last is not None:
                span = f" ({_utc(self.first):%Y-%m-%d %H:%M}–{_utc(self.last):%H:%M} UTC)"
            parts.append(f"{self.requests:,} requests{span}")
        if self.incidents:
            parts.append(f"{self.incidents:,} incident{'s' if self.incidents != 1 else ''}")
        if self.runs:
            parts.append(f"{self.runs:,} load-test run{'s' if self.runs != 1 else ''}")
        return ", ".join(parts)


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def held(store: Store) -> Held:
    """What the store holds (nothing, where it has no schema yet: ``service.admin.contents``).
    A store that cannot be read (locked by another process, say) is refused, never taken for
    empty."""
    try:
        found = contents(store)
    except DBAPIError as exc:
        text = str(exc.orig)
        shown = store.describe()  # the URL, its password hidden
        raise InvalidInput(
            f"cannot tell what the store {shown} holds ({text.splitlines()[0] if text else exc}): "
            "a demo needs a store of its own; stop what holds it or give another --store",
            details={"store": shown},
        ) from None
    return Held(found.requests, found.first, found.last, found.incidents, found.runs)


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL (``None``: PostgreSQL, SQLite in memory or a ``file:``
    URI): ``service.admin.sqlite_file``, the store's own reading."""
    return sqlite_file(url)


def mark_demo_store(store: Store) -> None:
    """Mark the store's SQLite file as a demo's (``--fresh`` moves only such a store)."""
    if store.dialect != "sqlite":
        return
    with store.engine.begin() as connection:
        connection.exec_driver_sql(f"PRAGMA application_id = {DEMO_APPLICATION_ID}")


def demo_made(path: Path) -> bool:
    """Whether the SQLite file at ``path`` carries a demo's mark."""
    try:
        with _probe(path) as connection:
            (found,) = connection.execute("PRAGMA application_id").fetchone()
    except sqlite3.Error:
        return False
    return bool(found == DEMO_APPLICATION_ID)


def _probe(path: Path) -> closing[sqlite3.Connection]:
    """A plain connection to ``path`` that waits for no lock (closed on leaving)."""
    return closing(sqlite3.connect(path, timeout=0, isolation_level=None))


def _in_use(path: Path) -> str | None:
    """Why ``path`` cannot be moved now (another connection has it open), or ``None``: the
    file taken for this one connection (out of WAL, its WAL folded in; an exclusive
    transaction begun and ended), then let go."""
    try:
        with _probe(path) as connection:
            (mode,) = connection.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() == "wal":
                (mode,) = connection.execute("PRAGMA journal_mode = DELETE").fetchone()
                if str(mode).lower() == "wal":
                    return "it stays in WAL mode: another connection has it open"
            connection.execute("BEGIN EXCLUSIVE")
            connection.execute("ROLLBACK")
    except sqlite3.OperationalError as exc:
        return str(exc)
    return None


def refuse_held(url: str, what: Held) -> InvalidInput:
    """The refusal of a store that holds data, with the ways on."""
    path = sqlite_path(url)
    if path is not None and demo_made(path):
        way = (
            "infersight demo --fresh moves it aside (renamed with the time, kept) and starts "
            "a new one; or give another --store"
        )
    elif path is not None:
        way = (
            "give the demo another --store (--fresh moves aside only a store a demo "
            "created, and this one was not)"
        )
    else:
        way = (
            "give the demo an empty database (--store); a demo never empties or moves a "
            "PostgreSQL store"
        )
    return InvalidInput(
        f"the store {redact(url)} already holds {what.describe()}: a demo needs a store of its "
        f"own, or its backfill, baseline and incidents would mix with what is there. {way}",
        details={"store": redact(url)},
    )


def move_aside(url: str, now: datetime) -> Path:
    """Rename the SQLite store of ``url`` (and its companions) to ``NAME.YYYYMMDDTHHMMSSZ``;
    the new name of the database file. Only a store a demo created, and only while no other
    process has it open (the module's doc): else ``InvalidInput``, nothing moved."""
    path = sqlite_path(url)
    if path is None:
        raise InvalidInput(
            f"--fresh moves a SQLite store aside; {redact(url)} is not one: give the demo an "
            "empty database instead (a demo never empties or moves a PostgreSQL store)"
        )
    if not demo_made(path):
        raise InvalidInput(
            f"--fresh moves aside only a store a demo created; {redact(url)} was not (it holds "
            "someone's data): nothing was moved. Give the demo another --store"
        )
    stamp = f"{_utc(now):%Y%m%dT%H%M%SZ}"
    target = path.with_name(f"{path.name}.{stamp}")
    if any(Path(f"{target}{suffix}").exists() for suffix in _COMPANIONS):
        raise InvalidInput(f"cannot move the store aside: {target} already exists")
    busy = _in_use(path)
    if busy is not None:
        raise InvalidInput(
            f"cannot move the store {redact(url)} aside: another process has it open ({busy}; "
            "a serve on another port, a sidecar or a demo?): stop it first; nothing was moved"
        )
    for suffix in _COMPANIONS:
        source = Path(f"{path}{suffix}")
        if source.exists():
            source.rename(f"{target}{suffix}")
    return target
