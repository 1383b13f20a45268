"""Every store call is bounded (#32): a statement, a lock wait and a connection checkout end
with an error ``timed_out`` recognises, directly and through PgBouncer in transaction pooling
mode (where the bounds are set per transaction and must not leak to the next client); a long
job's engine (``long_running``) lets its statements run longer, its lock waits not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from infersight.storage.engine import (
    StoreTimeouts,
    create_store_engine,
    long_running,
    timed_out,
    timeouts_of,
)
from tests.conftest import POSTGRES_AND_POOLER, Store, empty_store

SHORT = StoreTimeouts(statement_s=1.0, lock_s=0.3, idle_in_transaction_s=30, pool_s=0.5)


@pytest.fixture(params=POSTGRES_AND_POOLER)
def bounded(request: pytest.FixtureRequest) -> Iterator[tuple[Store, Engine]]:
    """The store, and an engine of its with short bounds."""
    store = empty_store(request)
    engine = create_store_engine(store.url, timeouts=SHORT, pool_size=1, max_overflow=0)
    try:
        yield store, engine
    finally:
        engine.dispose()


def test_a_statement_past_its_bound_is_cut_short(bounded: tuple[Store, Engine]) -> None:
    _, engine = bounded
    assert timeouts_of(engine) == SHORT
    with engine.connect() as connection, pytest.raises(DBAPIError) as failure:
        connection.execute(text("SELECT pg_sleep(30)"))
    assert timed_out(failure.value)


def test_a_lock_wait_past_its_bound_is_cut_short(bounded: tuple[Store, Engine]) -> None:
    store, engine = bounded
    with store.engine.connect() as holder:
        holder.execute(text("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE"))
        with engine.connect() as connection, pytest.raises(DBAPIError) as failure:
            connection.execute(text("SELECT count(*) FROM requests"))
        holder.rollback()
    assert timed_out(failure.value)
    assert getattr(failure.value.orig, "sqlstate", None) == "55P03"  # lock_not_available


def test_a_long_job_may_run_longer_but_not_wait_longer_for_a_lock(
    bounded: tuple[Store, Engine],
) -> None:
    store, engine = bounded
    long = long_running(engine, 30)
    with long.connect() as connection:
        connection.execute(text("SELECT pg_sleep(1.5)"))  # longer than the engine's statement bound
        connection.commit()
    with store.engine.connect() as holder:
        holder.execute(text("LOCK TABLE requests IN ACCESS EXCLUSIVE MODE"))
        with long.connect() as connection, pytest.raises(DBAPIError) as failure:
            connection.execute(text("SELECT count(*) FROM requests"))
        holder.rollback()
    assert timed_out(failure.value)
    # The engine it came from keeps its own bound.
    with engine.connect() as connection, pytest.raises(DBAPIError):
        connection.execute(text("SELECT pg_sleep(30)"))


def test_the_bounds_are_the_engines_own_and_do_not_leak(bounded: tuple[Store, Engine]) -> None:
    """Through PgBouncer the bounds are per transaction: a client without them (the store's
    default engine) never inherits the short ones from a shared server connection."""
    store, engine = bounded
    with engine.connect() as connection:
        assert connection.execute(text("SHOW statement_timeout")).scalar_one() == "1s"
        assert connection.execute(text("SHOW lock_timeout")).scalar_one() == "300ms"
    for _ in range(10):
        with store.engine.connect() as connection:
            assert connection.execute(text("SHOW statement_timeout")).scalar_one() == "30s"


def test_waiting_for_a_pooled_connection_is_bounded(bounded: tuple[Store, Engine]) -> None:
    _, engine = bounded
    with engine.connect(), pytest.raises(PoolTimeout) as failure:
        engine.connect()
    assert timed_out(failure.value)


def test_sqlite_waits_for_a_lock_no_longer_than_its_busy_timeout(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/store.db"
    engine = create_store_engine(url, timeouts=StoreTimeouts(sqlite_busy_s=0.2))
    try:
        with engine.connect() as first:
            first.execute(text("CREATE TABLE t (x INTEGER)"))
            first.commit()
            first.execute(text("INSERT INTO t VALUES (1)"))  # holds the write lock
            with engine.connect() as second, pytest.raises(DBAPIError) as failure:
                second.execute(text("INSERT INTO t VALUES (2)"))
            first.rollback()
        assert timed_out(failure.value)
    finally:
        engine.dispose()
