"""Building an ``Engine`` for a store URL, with the settings each database needs."""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError

from core.errors import ConfigurationError, SchemaMissing, Unavailable
from storage.creation import may_create

SQLITE_BUSY_TIMEOUT_MS = 30_000
#: The words this module gives the driver's errors for a SQLite file it refused to open.
_NO_DIRECTORY = "unable to open database file: directory does not exist"
_NO_FILE = "the store file does not exist"


T = TypeVar("T")


class PerEngine(Generic[T]):
    """One ``T`` per store engine in this process, made on first use and dropped with the
    engine: the caches that must not mix two stores' rows (the rollup and sketch caches)."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._items: weakref.WeakKeyDictionary[Engine, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, engine: Engine) -> T:
        with self._lock:
            item = self._items.get(engine)
            if item is None:
                item = self._items[engine] = self._factory()
            return item


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
        path = _sqlite_file(url)
        if path is not None:
            event.listen(engine, "do_connect", _sqlite_file_check(path))
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def _sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (``None``: in memory, or a ``file:`` URI left to SQLite)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file:") or "uri" in parsed.query:
        return None
    return Path(database)


def _sqlite_file_check(path: Path) -> Any:
    """Before SQLite opens ``path``: refuse a missing directory (SQLite would only say "unable
    to open database file"), and a missing file unless the caller may create the store
    (``storage.creation``)."""

    def check(_dialect: Any, _record: Any, _cargs: Any, _cparams: Any) -> None:
        if not path.parent.is_dir():
            raise sqlite3.OperationalError(_NO_DIRECTORY)
        if not may_create() and not path.exists():
            raise sqlite3.OperationalError(_NO_FILE)

    return check


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


#: SQLite's words for a database file that cannot be opened (its other OperationalErrors,
#: such as a missing table, are not about reaching the store).
_SQLITE_UNREACHABLE = ("unable to open", "disk i/o error", "database is locked", _NO_DIRECTORY)
#: PostgreSQL's SQLSTATE for a table that does not exist (``undefined_table``).
_UNDEFINED_TABLE = "42P01"


def unreachable(exc: Exception) -> bool:
    """Whether a database error means the store cannot be reached (retry later)."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    if type(exc.orig).__module__.startswith("sqlite3"):
        return any(words in str(exc.orig).lower() for words in _SQLITE_UNREACHABLE)
    return True


def no_schema(exc: Exception) -> bool:
    """Whether a database error means the store answers but was never migrated."""
    if not isinstance(exc, DBAPIError):
        return False
    if getattr(exc.orig, "sqlstate", None) == _UNDEFINED_TABLE:
        return True
    message = str(exc.orig).lower()
    return isinstance(exc, OperationalError) and (
        message.startswith("no such table") or message == _NO_FILE
    )


def store_error(exc: BaseException, url: str) -> Unavailable | None:
    """The one-line error a database error stands for (``None``: not about the store itself):
    ``SchemaMissing`` for a store never migrated, ``Unavailable`` for one out of reach."""
    if not isinstance(exc, DBAPIError):
        return None
    if no_schema(exc):
        return SchemaMissing(
            f"the store at {redact(url)} has no schema: run `infersight db upgrade`"
        )
    if unreachable(exc):
        return Unavailable(f"cannot reach the store at {redact(url)}: {reason(exc)}")
    return None


def reason(exc: Exception) -> str:
    """The driver's own first line of a database error (no SQL, no traceback)."""
    orig = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(orig).splitlines() if line.strip()]
    return (lines[0] if lines else type(orig).__name__)[:300]


@contextmanager
def reaching(url: str) -> Iterator[None]:
    """Turn "the store cannot be reached" into one ``Unavailable`` with a one-line message,
    and "it has no schema" into ``SchemaMissing``."""
    try:
        yield
    except DBAPIError as exc:
        error = store_error(exc, url)
        if error is None:
            raise
        raise error from None
