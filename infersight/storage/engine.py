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

**Every store call is bounded** (``StoreTimeouts``, from the ``INFERSIGHT_DATABASE_*_TIMEOUT_S``
settings where a command passes them, else the defaults): connecting (libpq's
``connect_timeout``), waiting for a pooled connection (``pool_timeout``), and on PostgreSQL each
statement (``statement_timeout``), each wait for a lock (``lock_timeout``) and a transaction
left idle (``idle_in_transaction_session_timeout``). A direct connection sets them once per
server session when it opens; behind a transaction pooler, where a session's settings would
leak to other clients and be lost on the next server connection, each transaction sets them
for itself (``set_config(…, true)``, i.e. ``SET LOCAL``) as it begins. A statement cut short is
a ``DBAPIError`` that ``timed_out`` recognises (the API answers 503). Long jobs (migrations,
maintenance) raise the statement bound of their transactions with ``long_running``. SQLite
has no statement timeout; its wait for a lock is the busy timeout.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from infersight.core.errors import ConfigurationError, SchemaMissing, Unavailable
from infersight.storage.creation import may_create

SQLITE_BUSY_TIMEOUT_MS = 30_000
#: The statement bound a long job (migrations, maintenance) gives its own transactions.
LONG_STATEMENT_S: Final = 3600.0
#: SQLSTATEs of a statement PostgreSQL cut short: ``query_canceled`` (statement_timeout),
#: ``lock_not_available`` (lock_timeout), ``idle_in_transaction_session_timeout``.
_TIMED_OUT: Final = frozenset({"57014", "55P03", "25P03"})
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


@dataclass(frozen=True, slots=True)
class StoreTimeouts:
    """How long any one store call may wait, in seconds (0: no bound, PostgreSQL's own
    meaning; not allowed for connecting and the pool)."""

    #: Connecting to PostgreSQL (libpq ``connect_timeout``, whole seconds, at least 1).
    connect_s: float = 10.0
    #: One statement on PostgreSQL (``statement_timeout``).
    statement_s: float = 30.0
    #: One wait for a lock on PostgreSQL (``lock_timeout``).
    lock_s: float = 10.0
    #: A transaction left idle on PostgreSQL (``idle_in_transaction_session_timeout``).
    idle_in_transaction_s: float = 60.0
    #: Waiting for a connection from the engine's pool (``pool_timeout``).
    pool_s: float = 30.0
    #: SQLite's wait for a lock (``PRAGMA busy_timeout``).
    sqlite_busy_s: float = SQLITE_BUSY_TIMEOUT_MS / 1000

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"store timeout {name} must be a number ≥ 0")
        if self.connect_s <= 0 or self.pool_s <= 0:
            raise ConfigurationError("the store's connect and pool timeouts must be > 0")

    def settings(self) -> dict[str, str]:
        """The PostgreSQL settings they stand for, as ``set_config`` takes them."""
        return {
            "statement_timeout": _ms(self.statement_s),
            "lock_timeout": _ms(self.lock_s),
            "idle_in_transaction_session_timeout": _ms(self.idle_in_transaction_s),
        }


DEFAULT_TIMEOUTS: Final = StoreTimeouts()
#: The execution option that carries an engine's ``StoreTimeouts``.
_TIMEOUTS: Final = "infersight_store_timeouts"
#: The execution option of a long job's engine (``long_running``): its statement bound.
_LONG: Final = "infersight_long_statement_s"


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def normalise_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` mean the psycopg 3 driver; SQLite stays as given."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigurationError(f"not a database URL: {redact(url)!r}; {_url_hint(url)}") from None
    except ValueError:  # SQLAlchemy reads the port with int()
        raise ConfigurationError(
            f"not a database URL: {redact(url)!r}: its port must be a number ({_URL_FORMS})"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise ConfigurationError(
            f"the store must be PostgreSQL or SQLite ({_URL_FORMS})",
            details={"url": redact(url)},
        )
    if parsed.get_backend_name() == "sqlite" and parsed.host:
        # sqlite://x.db names a host, which SQLite has not: a file needs three slashes.
        raise ConfigurationError(
            f"not a SQLite URL: {redact(url)!r}; a SQLite file is "
            f"sqlite:///{parsed.host}{'/' + parsed.database if parsed.database else ''} "
            "(three slashes, then the path; four before an absolute path)"
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
    """The URL with any password hidden, for logs and error messages: the ``user:password@``
    part and the ``password=``/``sslpassword=`` query parameters (text that is no URL: as
    given, but for everything between ``user:`` and the last ``@`` and those parameters)."""
    if url.count("@") > 1 or _SECRET_QUERY.search(url, 0, max(url.rfind("@"), 0)):
        # a raw '@' in a password: a parser takes the rest of it for the host
        return _without_secret(url, "***")
    try:
        rendered = make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # ValueError: a port that is no number
        return _without_secret(url, "***")
    return _SECRET_QUERY.sub(lambda found: found.group(1) + "***", rendered)


_URL_FORMS: Final = "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE or sqlite:///PATH"
#: ``HOST:PORT`` at the start of a text that is no URL: PostgreSQL's address, not a path.
_HOST_PORT: Final = re.compile(r"^[\w.-]+:\d+(/|$)")
#: A URL's scheme (``postgresql+psycopg://``), before its credentials.
_SCHEME: Final = re.compile(r"^[A-Za-z][\w+.-]*://")
#: Query parameters that carry a secret (libpq's ``password`` and ``sslpassword``; the
#: ``passfile`` parameter names a file, not a secret).
_SECRET_QUERY: Final = re.compile(r"([?&](?:ssl)?password=)[^&]*", re.IGNORECASE)


def _without_secret(text: str, mask: str) -> str:
    """``text`` with its secrets replaced by ``mask``: everything from the first ``:`` after
    the scheme to the last ``@`` (a password may hold ``/``, ``:``, ``@``, ``?`` or ``#``), and
    the values of its ``password=``/``sslpassword=`` parameters; where the two overlap (an
    ``@`` in a query password) both are masked as one."""
    spans = [(found.end(1), found.end()) for found in _SECRET_QUERY.finditer(text)]
    at = text.rfind("@")
    if at >= 0:
        scheme = _SCHEME.match(text)
        colon = text.find(":", scheme.end() if scheme else 0, at)
        if colon >= 0:
            spans.append((colon + 1, at))
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, done = [], 0
    for start, end in merged:
        out += [text[done:start], mask]
        done = end
    return "".join([*out, text[done:]])


def _url_hint(text: str) -> str:
    """What to write instead of ``text``, which is no URL (issue 35): ``sqlite:///PATH`` for
    what looks like a path, ``postgresql://…`` for what looks like PostgreSQL."""
    given = text.strip()
    lowered = given.lower()
    for scheme in ("postgresql+psycopg:", "postgresql:", "postgres:"):
        if lowered.startswith(scheme):
            given, lowered = "@" + given[len(scheme) :].lstrip("/"), "@"
            break
    if "@" in given or _HOST_PORT.match(given):
        address = _without_secret(given.lstrip("@"), "PASSWORD")
        return f"a PostgreSQL store is postgresql://{address} ({_URL_FORMS})"
    if lowered.startswith("sqlite:"):
        given = given[len("sqlite:") :]  # sqlite:x.db, or sqlite:/x.db for an absolute path
    path = os.path.expanduser(given) if given.startswith("~") else given
    return (
        f"a SQLite file is sqlite:///{path} (three slashes, then the path; four before an "
        "absolute path); a PostgreSQL store is postgresql://USER@HOST/DATABASE"
    )


def create_store_engine(
    url: str, *, timeouts: StoreTimeouts = DEFAULT_TIMEOUTS, **kwargs: Any
) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys, PostgreSQL
    behind a transaction pooler no server-side prepared statements; every call is bounded by
    ``timeouts`` (the module's doc)."""
    url, pooler = split_pooler(url)
    if "poolclass" not in kwargs:
        kwargs.setdefault("pool_timeout", timeouts.pool_s)
    kwargs["execution_options"] = {**kwargs.get("execution_options", {}), _TIMEOUTS: timeouts}
    if url.startswith("sqlite"):
        path = sqlite_file(url)
        if path is None:
            kwargs.pop("pool_timeout", None)  # in memory: a pool without a checkout wait
        engine = create_engine(url, **kwargs)
        if path is not None:
            event.listen(engine, "do_connect", _sqlite_file_check(path))
        event.listen(engine, "connect", _sqlite_pragmas(timeouts))
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    connect_args = dict(kwargs.get("connect_args", {}))
    if "connect_timeout" not in make_url(url).query:
        connect_args.setdefault("connect_timeout", max(1, math.ceil(timeouts.connect_s)))
    if pooler == "transaction":
        connect_args["prepare_threshold"] = None
        kwargs["execution_options"] = {**kwargs["execution_options"], _POOLED: True}
    kwargs["connect_args"] = connect_args
    engine = create_engine(url, **kwargs)
    pooled = pooler == "transaction"
    # The session's clock reads UTC (every timestamp is stored and read as UTC): the driver
    # then hands back timestamps in ``datetime.UTC`` itself, which the store's UTC column type
    # passes on as they are (``storage.types``) instead of converting each one; SQL answers do
    # not depend on the session's zone (no local-time function). Behind a transaction pooler,
    # set for each transaction with its bounds (a session setting would stay on the server).
    settings = {**timeouts.settings(), "TimeZone": "UTC"}
    if not pooled:
        event.listen(engine, "connect", _set_session(settings))
    event.listen(engine, "begin", _set_local(settings, every=pooled))
    return engine


def _set_config(local: bool, names: Iterable[str]) -> str:
    flag = "true" if local else "false"
    return "SELECT " + ", ".join(f"set_config('{name}', %s, {flag})" for name in names)


def _set_session(values: dict[str, str]) -> Callable[[Any, Any], None]:
    """On a new direct connection: its session's bounds, committed."""
    statement = _set_config(False, values)

    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(statement, tuple(values.values()))
        cursor.close()
        dbapi_connection.commit()

    return on_connect


def _set_local(values: dict[str, str], *, every: bool) -> Callable[[Connection], None]:
    """As a transaction begins: behind a transaction pooler (``every``) the bounds for it
    alone; on any connection a long job's statement bound (``long_running``)."""

    def on_begin(connection: Connection) -> None:
        long_s = connection.get_execution_options().get(_LONG)
        if not every and long_s is None:
            return
        dbapi_connection = connection.connection.dbapi_connection
        if dbapi_connection is None or getattr(dbapi_connection, "autocommit", False):
            return  # SET LOCAL outside a transaction would only warn
        wanted = dict(values) if every else {}
        if long_s is not None:
            wanted["statement_timeout"] = _ms(long_s)
        cursor = dbapi_connection.cursor()
        cursor.execute(_set_config(True, wanted), tuple(wanted.values()))
        cursor.close()

    return on_begin


def timeouts_of(engine: Engine) -> StoreTimeouts:
    """The bounds ``engine`` was created with."""
    found = engine.get_execution_options().get(_TIMEOUTS)
    return found if isinstance(found, StoreTimeouts) else DEFAULT_TIMEOUTS


def long_running(engine: Engine, seconds: float = LONG_STATEMENT_S) -> Engine:
    """``engine`` (the same pool) for a long job (migrations, maintenance): each of its
    transactions lets a statement run up to ``seconds``. Its lock waits stay bounded as they
    were, so a long job queued behind a reader does not hold every later reader up. On SQLite
    the same engine (no statement bound there)."""
    if engine.dialect.name != "postgresql":
        return engine
    return engine.execution_options(**{_LONG: seconds})


def timed_out(exc: BaseException) -> bool:
    """Whether a database error is a store call cut short by its bound (a statement, lock or
    pool timeout; SQLite's busy timeout), not an outage or a bug."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if getattr(exc.orig, "sqlstate", None) in _TIMED_OUT:
        return True
    return type(exc.orig).__module__.startswith("sqlite3") and "database is locked" in str(exc.orig)


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite store URL names (``None``: not SQLite, in memory, or a ``file:`` URI
    left to SQLite): the one reading of it, for the engine and for the demo's store."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
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


def _sqlite_pragmas(timeouts: StoreTimeouts) -> Callable[[Any, Any], None]:
    busy_ms = round(timeouts.sqlite_busy_s * 1000)

    def pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return pragmas


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
