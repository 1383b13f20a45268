"""Applying the Alembic migrations in ``migrations/`` to a store."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from infersight.core.errors import ConfigurationError
from infersight.storage.creation import creating
from infersight.storage.engine import long_running


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
        config.attributes["connection"] = connection
        getattr(command, action)(config, revision)


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
