"""A demo plays into a store of its own: what a store already holds, and ``--fresh``.

A demo backfills healthy history, captures its baseline from it and announces the incidents it
sees open. On a store that already holds a demo's (or anyone's) data, none of that is true any
more: the backfill is skipped or doubles the traffic, the baseline spans the earlier run's
faults, and incidents still open from before are announced as new (issue 35). So ``infersight
demo`` refuses a store that holds requests, incidents or load-test runs, and says how to go on:
``--fresh`` moves a SQLite store aside (the file and its ``-wal`` / ``-shm`` companions, renamed
with the time, never deleted) and starts a new one; a PostgreSQL store is never emptied or
moved by a demo: give it an empty database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from infersight.core.errors import InvalidInput
from infersight.storage.engine import redact
from infersight.storage.tables import incidents, loadtest_runs, requests

#: The files SQLite keeps beside a database in WAL mode.
_COMPANIONS = ("", "-wal", "-shm", "-journal")


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


def held(engine: Engine) -> Held:
    """What ``engine``'s store holds (nothing, where it has no schema yet)."""
    try:
        with engine.connect() as connection:
            count, first, last = connection.execute(
                select(func.count(), func.min(requests.c.start), func.max(requests.c.start))
            ).one()
            opened = connection.execute(select(func.count()).select_from(incidents)).scalar_one()
            runs = connection.execute(select(func.count()).select_from(loadtest_runs)).scalar_one()
    except DBAPIError:
        return Held(0, None, None, 0, 0)  # no schema (a new store): nothing to mix with
    return Held(int(count), first, last, int(opened), int(runs))


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL (``None``: PostgreSQL, or SQLite in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return Path(database)


def refuse_held(url: str, what: Held) -> InvalidInput:
    """The refusal of a store that holds data, with the ways on."""
    path = sqlite_path(url)
    way = (
        "infersight demo --fresh moves it aside (renamed with the time, kept) and starts a "
        "new one; or give another --store"
        if path is not None
        else "give the demo an empty database (--store); a demo never empties or moves a "
        "PostgreSQL store"
    )
    return InvalidInput(
        f"the store {redact(url)} already holds {what.describe()}: a demo needs a store of its "
        f"own, or its backfill, baseline and incidents would mix with what is there. {way}",
        details={"store": redact(url)},
    )


def move_aside(url: str, now: datetime) -> Path:
    """Rename the SQLite store of ``url`` (and its companions) to ``NAME.YYYYMMDDTHHMMSSZ``;
    the new name of the database file."""
    path = sqlite_path(url)
    if path is None:
        raise InvalidInput(
            f"--fresh moves a SQLite store aside; {redact(url)} is not one: give the demo an "
            "empty database instead (a demo never empties or moves a PostgreSQL store)"
        )
    stamp = f"{_utc(now):%Y%m%dT%H%M%SZ}"
    target = path.with_name(f"{path.name}.{stamp}")
    if any(Path(f"{target}{suffix}").exists() for suffix in _COMPANIONS):
        raise InvalidInput(f"cannot move the store aside: {target} already exists")
    for suffix in _COMPANIONS:
        source = Path(f"{path}{suffix}")
        if source.exists():
            source.rename(f"{target}{suffix}")
    return target
