"""The store's schema revision and the newest one shipped, without Alembic (#16).

``infersight db current`` and the commands that only read must not pay for importing Alembic
(a third of a second on a quiet machine) to learn two strings. The newest revision is read from
the migration files' own ``revision = "…"`` and ``down_revision = "…"`` lines (the one no file
names as its ``down_revision``: the chain's head, which ``tests/storage/test_revisions.py``
checks agrees with Alembic's ``ScriptDirectory``); the store's from the ``alembic_version``
table Alembic keeps, with plain SQL. ``storage.migrate`` still runs every migration.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Final

from sqlalchemy import Connection, inspect, text

from infersight.core.errors import ConfigurationError

#: The table and column Alembic records the revision in (its defaults; ``migrations/env.py``
#: changes neither).
VERSION_TABLE: Final = "alembic_version"
_ASSIGNMENT = re.compile(
    r"^(revision|down_revision)\s*(?::[^=]*)?=\s*(?:\"([^\"]*)\"|'([^']*)'|None)\s*$", re.M
)


def versions_directory() -> Path:
    """The ``migrations/versions`` directory of this installation."""
    spec = importlib.util.find_spec("infersight.migrations")
    if spec is None or spec.origin is None:
        raise ConfigurationError("the migrations package is not installed")
    return Path(spec.origin).parent / "versions"


def chain(directory: Path | None = None) -> dict[str, str | None]:
    """Every migration's revision and the revision it follows (``None``: the first)."""
    out: dict[str, str | None] = {}
    for path in sorted((directory or versions_directory()).glob("*.py")):
        found: dict[str, str | None] = {}
        for match in _ASSIGNMENT.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(match.group(1), match.group(2) or match.group(3))
        if "revision" not in found:
            continue  # ``__init__.py`` and helpers: not a migration
        revision = found["revision"]
        if revision is None or "down_revision" not in found:
            raise ConfigurationError(f"{path} names no revision it follows (down_revision)")
        if revision in out:
            raise ConfigurationError(f"two migrations have revision {revision!r}")
        out[revision] = found["down_revision"]
    return out


def head(directory: Path | None = None) -> str | None:
    """The newest revision shipped (``None``: there are no migrations)."""
    revisions = chain(directory)
    followed = {down for down in revisions.values() if down is not None}
    heads = sorted(set(revisions) - followed)
    if len(heads) > 1:
        raise ConfigurationError(f"the migrations have several heads: {', '.join(heads)}")
    return heads[0] if heads else None


def current(connection: Connection) -> str | None:
    """The revision the store is at (``None``: never migrated), as Alembic records it."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    rows = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(rows) > 1:  # Alembic keeps one row per head; infersight's chain has one
        raise ConfigurationError(f"the store records several revisions: {', '.join(rows)}")
    return rows[0] if rows else None
