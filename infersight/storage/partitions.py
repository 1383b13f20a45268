"""Daily range partitions of the raw tables on PostgreSQL, and retention on both databases.

Partitions are named ``<table>_pYYYYMMDD`` and cover one UTC day. The writer creates the ones a
batch needs before it copies; the maintenance job creates days ahead and drops whole partitions
older than the retention period (retention is a catalog operation, not a mass ``DELETE``). On
SQLite the same retention is a ``DELETE`` of old rows.

Every partition is a catalog entry that the planner considers for every query of its table, so
their number is bounded: no partition is ever created more than ``MAX_DAYS_AHEAD`` days after
today (UTC, by this host's clock), nor before ``oldest`` when the caller gives one; and
``drop_after`` removes the far-future ones an older version let client clocks create.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta
from typing import Final

from sqlalchemy import Connection, delete, text

from infersight.core.errors import InvalidInput
from infersight.storage.tables import PARTITIONED, metadata

_NAME: Final = re.compile(r"^(?P<table>[a-z_]+)_p(?P<day>\d{8})$")
#: The furthest day after today a partition may be created for: the most days maintenance
#: creates ahead (60) plus the one day a record may lie in the future (``core.accept``), plus
#: one for a host whose clock is a little behind.
MAX_DAYS_AHEAD: Final = 62
#: Partitions dropped per transaction by ``drop_after`` (each takes a lock on its table and
#: its indexes; thousands in one transaction would exhaust the lock table).
DROP_BATCH: Final = 100


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def _lock(connection: Connection, table: str) -> None:
    """Serialise partition DDL per table across writers and replicas (transaction-scoped)."""
    key = zlib.crc32(f"infersight.partitions.{table}".encode())
    connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def ensure_partitions(
    connection: Connection,
    table: str,
    days: Iterable[date],
    *,
    today: date | None = None,
    oldest: date | None = None,
) -> list[str]:
    """Create the daily partitions of ``table`` for ``days`` that do not exist yet.

    Raises ``InvalidInput`` (creating none) when a day lies more than ``MAX_DAYS_AHEAD``
    after ``today`` (default: the UTC date now) or before ``oldest``."""
    if connection.dialect.name != "postgresql":
        return []
    if table not in PARTITIONED:
        raise ValueError(f"{table} is not a partitioned table")
    wanted = sorted(set(days))
    if wanted:
        check_days(table, wanted[0], wanted[-1], today=today, oldest=oldest)
    existing = {day for _, day in list_partitions(connection, table)}
    missing = [d for d in wanted if d not in existing]
    if not missing:
        return []
    _lock(connection, table)
    created = []
    for day in missing:
        name = partition_name(table, day)
        start = datetime.combine(day, time(), tzinfo=UTC)
        connection.execute(
            text(
                f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF "{table}" '
                f"FOR VALUES FROM ('{start.isoformat()}') "
                f"TO ('{(start + timedelta(days=1)).isoformat()}')"
            )
        )
        created.append(name)
    return created


def check_days(
    table: str, first: date, last: date, *, today: date | None = None, oldest: date | None = None
) -> None:
    """Refuse a span of days that reaches past the partition horizon (or before ``oldest``)."""
    horizon = (today or datetime.now(UTC).date()) + timedelta(days=MAX_DAYS_AHEAD)
    if last > horizon:
        raise InvalidInput(
            f"refusing to create a {table} partition for {last}: after the horizon {horizon}",
            details={"table": table, "day": last.isoformat(), "horizon": horizon.isoformat()},
        )
    if oldest is not None and first < oldest:
        raise InvalidInput(
            f"refusing to create a {table} partition for {first}: before {oldest}",
            details={"table": table, "day": first.isoformat(), "oldest": oldest.isoformat()},
        )


def list_partitions(connection: Connection, table: str) -> list[tuple[str, date]]:
    """The daily partitions of ``table``, oldest first."""
    rows = connection.execute(
        text(
            "SELECT c.relname FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent "
            "WHERE p.relname = :parent AND p.relnamespace = to_regnamespace(current_schema())::oid"
        ),
        {"parent": table},
    )
    out = []
    for (name,) in rows:
        match = _NAME.match(name)
        if match and match["table"] == table:
            out.append((name, datetime.strptime(match["day"], "%Y%m%d").replace(tzinfo=UTC).date()))
    return sorted(out, key=lambda item: item[1])


def drop_before(connection: Connection, table: str, cutoff: date) -> list[str]:
    """Remove every day of ``table`` before ``cutoff``: drop partitions, or delete on SQLite."""
    time_column = PARTITIONED[table]
    if connection.dialect.name != "postgresql":
        target = metadata.tables[table]
        boundary = datetime.combine(cutoff, time(), tzinfo=UTC)
        result = connection.execute(delete(target).where(target.c[time_column] < boundary))
        return [f"{table}: {result.rowcount} rows"] if result.rowcount else []
    _lock(connection, table)
    dropped = []
    for name, day in list_partitions(connection, table):
        if day < cutoff:
            connection.execute(text(f'DROP TABLE IF EXISTS "{name}"'))
            dropped.append(name)
    return dropped


def drop_after(
    connection: Connection, table: str, last: date, limit: int = DROP_BATCH
) -> list[str]:
    """Remove up to ``limit`` days of ``table`` after ``last``: drop the partitions (their rows
    too), or delete the rows on SQLite. Call again while it returns a full batch."""
    time_column = PARTITIONED[table]
    if connection.dialect.name != "postgresql":
        target = metadata.tables[table]
        boundary = datetime.combine(last + timedelta(days=1), time(), tzinfo=UTC)
        result = connection.execute(delete(target).where(target.c[time_column] >= boundary))
        return [f"{table}: {result.rowcount} rows after {last}"] if result.rowcount else []
    _lock(connection, table)
    dropped: list[str] = []
    for name, day in reversed(list_partitions(connection, table)):
        if day <= last or len(dropped) >= limit:
            break
        connection.execute(text(f'DROP TABLE IF EXISTS "{name}"'))
        dropped.append(name)
    return dropped
