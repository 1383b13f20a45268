"""Migrations run up and down on both databases and agree with the table metadata."""

from __future__ import annotations

import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from storage import migrate
from storage.engine import create_store_engine
from storage.tables import metadata
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_engine(request, tmp_path):
    """A store that was never migrated: a new SQLite file or a new PostgreSQL database."""
    if request.param == "sqlite":
        engine = create_store_engine(f"sqlite:///{tmp_path / 'm.db'}")
        yield engine
        engine.dispose()
        return
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"infersight_mig_{uuid.uuid4().hex[:12]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_store_engine(admin.url.set(database=name).render_as_string(hide_password=False))
    yield engine
    engine.dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    admin.dispose()


def test_upgrade_creates_every_table_and_downgrade_removes_them(fresh_engine):
    assert migrate.current(fresh_engine) is None
    migrate.upgrade(fresh_engine)
    assert migrate.current(fresh_engine) == migrate.head()
    assert set(metadata.tables) <= set(inspect(fresh_engine).get_table_names())
    migrate.upgrade(fresh_engine)  # idempotent
    migrate.downgrade(fresh_engine)
    assert migrate.current(fresh_engine) is None
    assert not set(metadata.tables) & set(inspect(fresh_engine).get_table_names())
    migrate.upgrade(fresh_engine)  # and back up again
    assert migrate.current(fresh_engine) == migrate.head()


def test_migrated_schema_matches_the_table_metadata(fresh_engine):
    migrate.upgrade(fresh_engine)
    with fresh_engine.connect() as connection:
        diff = compare_metadata(
            MigrationContext.configure(connection, opts={"compare_type": True}), metadata
        )
    # Partitions of raw tables are created at run time and are not part of the metadata.
    diff = [d for d in diff if not (d[0] == "remove_table" and "_p" in d[1].name)]
    assert diff == []
