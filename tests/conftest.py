"""Shared fixtures: real SQLite and PostgreSQL stores with the migrations applied.

PostgreSQL comes from ``INFERSIGHT_TEST_POSTGRES_URL`` (default: the local server, trust auth).
Each test run creates a fresh database and drops it at the end; tests get empty tables. CI runs
with PostgreSQL up, so a missing server fails the ``postgres`` tests rather than skipping them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from storage import migrate
from storage.engine import create_store_engine
from storage.tables import metadata

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


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test run."""
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"infersight_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    yield url
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def _postgres_engine(postgres_url: str) -> Iterator[Engine]:
    engine = create_store_engine(postgres_url)
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


BOTH_STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def empty_store(request: pytest.FixtureRequest) -> Store:
    """The session's store for ``request.param``, with every table emptied."""
    engine: Engine = request.getfixturevalue(f"_{request.param}_engine")
    _empty(engine)
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
