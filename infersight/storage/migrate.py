"""Applying the Alembic migrations in ``migrations/`` to a store."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from infersight.core.errors import ConfigurationError
from infersight.storage.creation import creating
from infersight.storage.engine import LONG_STATEMENT_S, long_running, timeouts_of

#: The transaction-level advisory lock that makes migrations run one at a time on PostgreSQL
#: ("infmigr8" as a big-endian 64-bit number; the jobs leader's key is another).
MIGRATION_LOCK_KEY: Final = int.from_bytes(b"infmigr8", "big") & 0x7FFF_FFFF_FFFF_FFFF


def _script_location() -> str:
    spec = importlib.util.find_spec("infersight.migrations")
    if spec is None or spec.origin is None:
        raise ConfigurationError("the migrations package is not installed")
    return str(Path(spec.origin).parent)


def _config(engine: Engine) -> Config:
    config = Config()
    config.set_main_option("script_location", _script_location())
    config.attributes["engine"] = engine
    return config


def _run(engine: Engine, action: str, revision: str) -> None:
    engine = long_running(engine)  # a migration's statements may take long (not its lock waits)
    config = _config(engine)
    # Migrating up creates a SQLite store that does not exist yet; nothing else does.
    with creating(action == "upgrade"), engine.begin() as connection:
        _one_at_a_time(connection)
        config.attributes["connection"] = connection
        getattr(command, action)(config, revision)


def _one_at_a_time(connection: Connection) -> None:
    """On PostgreSQL, wait for any other migration of this database to commit first: two
    ``db upgrade`` runs at once (a Helm hook beside replicas started with ``--migrate``)
    would otherwise both create the same tables, and one fail. The later one then finds the
    store at head and does nothing. The wait for this lock may be as long as a migration;
    the migration's own lock waits keep the store's bound."""
    if connection.dialect.name != "postgresql":
        return  # SQLite's writer lock already serialises them
    bound = f"{int(timeouts_of(connection.engine).lock_s * 1000)}ms"
    connection.execute(
        text("SELECT set_config('lock_timeout', :t, true)"),
        {"t": f"{int(LONG_STATEMENT_S * 1000)}ms"},
    )
    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    connection.execute(text("SELECT set_config('lock_timeout', :t, true)"), {"t": bound})


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate ``engine``'s database up to ``revision`` (idempotent)."""
    _run(engine, "upgrade", revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    """Migrate down to ``revision`` (``base`` removes every table)."""
    _run(engine, "downgrade", revision)


def current(engine: Engine) -> str | None:
    """The revision the database is at, or ``None`` when it was never migrated."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head() -> str | None:
    """The newest revision this installation ships."""
    config = Config()
    config.set_main_option("script_location", _script_location())
    return ScriptDirectory.from_config(config).get_current_head()
