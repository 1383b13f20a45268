"""Shared fixtures: real SQLite and PostgreSQL stores with the migrations applied.

PostgreSQL comes from ``INFERSIGHT_TEST_POSTGRES_URL`` (default: the local server, trust auth).
Each test run creates a fresh database and drops it at the end; tests get empty tables. CI runs
with PostgreSQL up, so a missing server fails the ``postgres`` tests rather than skipping them.

The store's own tests (``tests/storage``, ``tests/collector``) run on a third store too,
``pgbouncer``: a database of its own, migrated and used through a real PgBouncer in
transaction pooling mode (``bench.harness.pgbouncer``) with the store's ``pooler=transaction``
URL (#19). Without the binary those tests skip, except in CI, where they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from bench.harness.pgbouncer import PgBouncer, binary, running_pgbouncer
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from infersight.storage.tables import metadata
from tests.order import longest_first
from tests.waiting import until


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    longest_first(items)  # tests.order: the longest files start first on the workers


POSTGRES_ADMIN_URL = os.environ.get(
    "INFERSIGHT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@dataclass(frozen=True)
class Store:
    url: str
    engine: Engine

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def sql(self) -> SqlStore:
        """The store seam over this engine (what ``service/`` is handed)."""
        return SqlStore(self.engine)


@contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database, dropped on leaving."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"infersight_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test run."""
    with fresh_database() as url:
        yield url


#: Server connections per database and user: small, so the store's client connections share
#: them (as sidecars do), large enough for the tests that hold a few transactions at once.
PGBOUNCER_POOL_SIZE = 8


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """A real PgBouncer in transaction pooling mode in front of the test server."""
    if binary() is None:
        missing = "pgbouncer is not installed (Debian package: pgbouncer)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    with running_pgbouncer(POSTGRES_ADMIN_URL, pool_size=PGBOUNCER_POOL_SIZE) as bouncer:
        yield bouncer


def through(bouncer: PgBouncer, url: str) -> str:
    """``url``'s database through ``bouncer``, with the store's ``pooler=transaction``."""
    parsed = make_url(url).set(host=bouncer.host, port=bouncer.port)
    return parsed.update_query_dict({"pooler": "transaction"}).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pgbouncer_url(pgbouncer: PgBouncer) -> Iterator[str]:
    """A fresh, empty database of its own, reached through PgBouncer (``pooler=transaction``)."""
    with fresh_database() as url:
        yield through(pgbouncer, url)


@pytest.fixture(scope="session")
def _postgres_engine(postgres_url: str) -> Iterator[Engine]:
    engine = create_store_engine(postgres_url)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def _pgbouncer_engine(pgbouncer_url: str) -> Iterator[Engine]:
    """The store through PgBouncer, migrated through it too."""
    engine = create_store_engine(pgbouncer_url)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def _sqlite_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    path: Path = tmp_path_factory.mktemp("store") / "infersight.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


def _empty(engine: Engine) -> None:
    with engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())
    if engine.dialect.name == "postgresql":
        _end_stray_leaders(engine)


#: Sessions of this worker's database, other than the asking one, holding an advisory lock.
_STRAY_LEADERS = text(
    "SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
    " WHERE l.locktype = 'advisory' AND d.datname = current_database()"
    " AND l.pid <> pg_backend_pid()"
)


def _end_stray_leaders(engine: Engine) -> None:
    """End the sessions an earlier test left holding an advisory lock in this worker's
    database (a jobs' leader lock whose app was never stopped, or is still stopping): each
    test starts with no leader, as its replicas' first tick assumes. The database is this
    worker's own, so no other run's session is touched. Waits for the server to end them
    (``tests.waiting.until``: no deadline of its own, on a loaded host too)."""
    with engine.connect() as connection:

        def none_left() -> bool:
            pids = connection.execute(_STRAY_LEADERS).scalars().all()
            for pid in pids:
                connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            connection.commit()  # and a fresh snapshot of pg_locks on the next read
            return not pids

        until(none_left, "the stray leader sessions' end", every_s=0.05)


BOTH_STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
#: PostgreSQL through PgBouncer in transaction pooling mode (the store's own tests).
PGBOUNCER_STORE = pytest.param("pgbouncer", marks=pytest.mark.postgres)
STORES_AND_POOLER = [*BOTH_STORES, PGBOUNCER_STORE]
POSTGRES_AND_POOLER = [pytest.param("postgres", marks=pytest.mark.postgres), PGBOUNCER_STORE]


def empty_store(request: pytest.FixtureRequest) -> Store:
    """The session's store for ``request.param``, with every table emptied."""
    engine: Engine = request.getfixturevalue(f"_{request.param}_engine")
    _empty(engine)
    if request.param == "pgbouncer":  # the engine's URL has lost the pooler option
        return Store(request.getfixturevalue("pgbouncer_url"), engine)
    return Store(engine.url.render_as_string(hide_password=False), engine)


@pytest.fixture(params=BOTH_STORES)
def store(request: pytest.FixtureRequest) -> Store:
    """A migrated store with empty tables, once on SQLite and once on PostgreSQL."""
    return empty_store(request)


@pytest.fixture
def pg_store(_postgres_engine: Engine) -> Store:
    """The PostgreSQL store alone, for partition behaviour SQLite does not have."""
    _empty(_postgres_engine)
    return Store(_postgres_engine.url.render_as_string(hide_password=False), _postgres_engine)
