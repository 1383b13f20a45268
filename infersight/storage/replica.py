"""How far a hot standby's answers lag behind the primary (issue 19).

A standby replays the primary's WAL; an answer read from it misses whatever the primary
committed and the standby has not replayed yet. ``standby_lag`` says how much, honestly:

* the primary's current WAL position is read **first**, then the standby's replay position:
  when the standby has replayed at least that far, every transaction committed on the primary
  before the question was asked is visible, and the answer is current (staleness 0) — however
  long ago the last transaction was. ``now() - pg_last_xact_replay_timestamp()`` alone would
  call an idle, caught-up standby stale, since the timestamp only advances with new commits;
* otherwise the standby holds everything committed up to its last replayed transaction's
  commit time (``pg_last_xact_replay_timestamp()``): the answer is as of then, and its
  staleness is the time since. This is an upper bound: WAL that carries no transaction
  (a checkpoint) also counts as "behind" until it is replayed, which takes milliseconds.

The standby's own clock gives ``now()``, as the timestamp is the primary's commit time; the
two hosts' clocks are assumed in step (NTP). Neither position is known on SQLite, which has
no standby: ``standby_lag`` is PostgreSQL-only.

``create_read_engine(url)`` is the standby's engine (``INFERSIGHT_DATABASE_READ_URL``): a
store engine (``storage.engine.create_store_engine``: the same driver, ``pooler=`` option and
pre-ping) whose every transaction is ``READ ONLY`` (psycopg's ``read_only``), so nothing it
runs can write, even where the URL names a primary by mistake. It is never migrated: the
standby replays the primary's schema. A SQLite URL is refused (``ConfigurationError``), as is
a standby of a SQLite store (``check_read_routing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from infersight.core.errors import ConfigurationError
from infersight.storage.engine import create_store_engine, normalise_url, redact

#: The setting the standby's URL is read from (``config.parts.StorePart.database_read_url``).
READ_URL_SETTING = "INFERSIGHT_DATABASE_READ_URL"

_PRIMARY = text("SELECT pg_current_wal_lsn()::text")
_STANDBY = text(
    "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() >= CAST(:lsn AS pg_lsn), "
    "pg_last_xact_replay_timestamp(), now(), "
    "pg_wal_lsn_diff(CAST(:lsn AS pg_lsn), pg_last_wal_replay_lsn())"
)


@dataclass(frozen=True, slots=True)
class Lag:
    """A standby's lag when asked: ``staleness_s`` 0 when caught up, ``None`` when it cannot
    be known (no transaction replayed since the standby started, or the primary out of
    reach); ``as_of`` the time its data is current to; ``behind_bytes`` the WAL not replayed."""

    staleness_s: float | None
    as_of: datetime | None
    behind_bytes: int | None


def standby_lag(primary: Engine, standby: Engine) -> Lag:
    """The standby's lag behind the primary now (two one-row queries, one on each)."""
    with primary.connect() as connection:
        lsn = connection.execute(_PRIMARY).scalar_one()
    with standby.connect() as connection:
        row = connection.execute(_STANDBY, {"lsn": lsn}).one()
    in_recovery, caught_up, replayed_at, now, behind = row
    if not in_recovery:  # "the standby" is a primary itself (or was promoted): current
        return Lag(0.0, now, 0)
    behind_bytes = max(0, int(behind)) if behind is not None else None
    if caught_up:
        return Lag(0.0, now, 0)
    if replayed_at is None:
        return Lag(None, None, behind_bytes)
    return Lag(max(0.0, (now - replayed_at).total_seconds()), replayed_at, behind_bytes)


def _backend(url: str) -> str:
    return make_url(normalise_url(url)).get_backend_name()


def _postgres_only(read_url: str) -> None:
    if _backend(read_url) != "postgresql":
        raise ConfigurationError(
            f"{READ_URL_SETTING} must be a PostgreSQL URL of a hot standby; SQLite has none",
            details={"read_url": redact(read_url)},
        )


def check_read_routing(store_url: str, read_url: str) -> None:
    """Refuse a read URL that cannot name a hot standby of the store at ``store_url``: SQLite
    has no standby, on either side (``ConfigurationError``, the URLs' passwords hidden)."""
    _postgres_only(read_url)
    if _backend(store_url) != "postgresql":
        raise ConfigurationError(
            f"{READ_URL_SETTING} is for a PostgreSQL store and its hot standby; the store is "
            "SQLite (unset it)",
            details={"store_url": redact(store_url)},
        )


def create_read_engine(url: str, **kwargs: Any) -> Engine:
    """The engine of the hot standby at ``url``: every transaction read-only, never migrated
    (``kwargs``: ``create_store_engine``'s)."""
    _postgres_only(url)
    options = {**kwargs.pop("execution_options", {}), "postgresql_readonly": True}
    return create_store_engine(url, execution_options=options, **kwargs)
