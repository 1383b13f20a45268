"""Building an ``Engine`` for a store URL, with the settings each database needs.

A PostgreSQL URL may say the store is reached through a connection pooler in transaction
pooling mode (PgBouncer ``pool_mode = transaction``): ``?pooler=transaction``. The option
travels with the URL, so every process that opens the store (sidecars, API, CLI) gets it from
``INFERSIGHT_DATABASE_URL`` and none can forget it. Such an engine

* never prepares statements on the server (psycopg's ``prepare_threshold=None``): a statement
  psycopg prepared on one server connection is unknown on the next the pooler hands it, and
  PgBouncer before 1.21 (Debian's 1.18) does not track them;
* keeps SQLAlchemy's small client pool: idle client connections hold no server connection in
  transaction mode, and reusing them saves a connect per checkout (not yet measured against
  ``NullPool``);
* is marked (``transaction_pooled``), so what needs a session across transactions, the jobs
  leader's advisory lock, refuses it and asks for a direct URL.

Everything else the store does keeps its state inside one transaction (staging temp tables
are created and emptied within the writer's transaction, advisory locks besides the leader's
are transaction-scoped, streamed reads use cursors declared in the reading transaction), and
works through such a pooler. ``pooler=session`` says a session pooler, which is a direct
connection as far as the store can tell.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError

from infersight.core.errors import ConfigurationError, SchemaMissing, Unavailable
from infersight.storage.creation import may_create

SQLITE_BUSY_TIMEOUT_MS = 30_000
#: The URL query option naming the pooler between the store and PostgreSQL, and its values.
POOLER_OPTION: Final = "pooler"
POOLERS: Final = ("session", "transaction")
#: The execution option a transaction-pooled engine carries (``transaction_pooled``).
_POOLED: Final = "infersight_transaction_pooled"
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
    pooler = parsed.query.get(POOLER_OPTION)
    if pooler is not None:
        if parsed.get_backend_name() != "postgresql":
            raise ConfigurationError(f"{POOLER_OPTION}= is for a PostgreSQL store, not SQLite")
        if pooler not in POOLERS:
            raise ConfigurationError(
                f"{POOLER_OPTION}= must be one of {', '.join(POOLERS)}",
                details={"url": redact(url)},
            )
    return parsed.render_as_string(hide_password=False)


def split_pooler(url: str) -> tuple[str, str | None]:
    """A normalised URL without its ``pooler`` option (libpq knows no such parameter), and
    the option's value (``None``: connected directly)."""
    parsed = make_url(normalise_url(url))
    pooler = parsed.query.get(POOLER_OPTION)
    if pooler is None:
        return parsed.render_as_string(hide_password=False), None
    stripped = parsed.difference_update_query([POOLER_OPTION])
    return stripped.render_as_string(hide_password=False), str(pooler)


def transaction_pooled(engine: Engine) -> bool:
    """Whether ``engine`` reaches PostgreSQL through a transaction pooler: no session state
    survives its transactions."""
    return bool(engine.get_execution_options().get(_POOLED))


def redact(url: str) -> str:
    """The URL with any password hidden, for logs and error messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparseable URL>"


def create_store_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys, PostgreSQL
    behind a transaction pooler no server-side prepared statements (the module's doc)."""
    url, pooler = split_pooler(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, **kwargs)
        path = _sqlite_file(url)
        if path is not None:
            event.listen(engine, "do_connect", _sqlite_file_check(path))
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    if pooler == "transaction":
        kwargs["connect_args"] = {**kwargs.get("connect_args", {}), "prepare_threshold": None}
        kwargs["execution_options"] = {**kwargs.get("execution_options", {}), _POOLED: True}
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
