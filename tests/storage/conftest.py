"""The store's own tests run on SQLite, PostgreSQL and PostgreSQL through PgBouncer in
transaction pooling mode (``tests/conftest.py``, #19)."""

from __future__ import annotations

import pytest

from tests.conftest import POSTGRES_AND_POOLER, STORES_AND_POOLER, Store, empty_store


@pytest.fixture(params=STORES_AND_POOLER)
def store(request: pytest.FixtureRequest) -> Store:
    """A migrated store with empty tables: SQLite, PostgreSQL, and PostgreSQL via PgBouncer."""
    return empty_store(request)


@pytest.fixture(params=POSTGRES_AND_POOLER)
def pg_store(request: pytest.FixtureRequest) -> Store:
    """PostgreSQL alone (partitions), directly and through PgBouncer."""
    return empty_store(request)
