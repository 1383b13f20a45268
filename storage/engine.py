"""Building an ``Engine`` for a store URL, with the settings each database needs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError

from core.errors import ConfigurationError, Unavailable

SQLITE_BUSY_TIMEOUT_MS = 30_000


def normalise_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` mean the psycopg 3 driver; SQLite stays as given."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigurationError(f"not a database URL: {redact(url)!r}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise ConfigurationError(
            "the store must be PostgreSQL or SQLite",
            details={"url": redact(url)},
        )
    return parsed.render_as_string(hide_password=False)


def redact(url: str) -> str:
    """The URL with any password hidden, for logs and error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def create_store_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys."""
    url = normalise_url(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


#: SQLite's words for a database file that cannot be opened (its other OperationalErrors,
#: such as a missing table, are not about reaching the store).
_SQLITE_UNREACHABLE = ("unable to open", "disk i/o error", "database is locked")


def unreachable(exc: Exception) -> bool:
    """Whether a database error means the store cannot be reached (retry later)."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    if type(exc.orig).__module__.startswith("sqlite3"):
        return any(words in str(exc.orig).lower() for words in _SQLITE_UNREACHABLE)
    return True


def reason(exc: Exception) -> str:
    """The driver's own first line of a database error (no SQL, no traceback)."""
    orig = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    return (lines[0] if lines else type(orig).__name__)[:300]


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """Turn "the store cannot be reached" into one ``Unavailable`` with a one-line message."""
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        if not unreachable(exc):
            raise
        raise Unavailable(f"cannot reach the store {redact(url)}: {reason(exc)}") from None
