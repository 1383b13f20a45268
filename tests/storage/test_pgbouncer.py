"""The store through PgBouncer 1.18 in transaction pooling mode (#19).

PgBouncer hands each transaction whichever server connection is free. psycopg prepares a
statement on the server after ``prepare_threshold`` (5) executions and from then on only names
it, so on another server connection the name is unknown; PgBouncer before 1.21 does not track
prepared statements. ``pooler=transaction`` in the store URL turns server-side preparing off.
The first test shows the failure with a plain URL (so the others could fail), the rest that the
store's statements, its binary ``COPY`` and its staging tables work with the option."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from infersight.storage.engine import create_store_engine, transaction_pooled
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
#: Executions after which psycopg prepares a statement on the server (its default).
PREPARE_THRESHOLD = 5
#: psycopg's "prepared statement does not exist" (``invalid_sql_statement_name``).
NO_SUCH_STATEMENT = "26000"


def _count_since(engine: Engine, since: datetime) -> int:
    with engine.connect() as connection:
        query = select(func.count()).select_from(requests).where(requests.c.start >= since)
        return int(connection.execute(query).scalar_one())


def _moved_to_another_server(engine: Engine) -> int:
    """Run one statement past the prepare threshold on one client connection, then again
    while another client holds the server connection it ran on: PgBouncer (LIFO) gives the
    other client that server, and the first one another."""
    with engine.connect() as first:
        query = select(func.count()).select_from(requests).where(requests.c.start >= T0)
        for _ in range(PREPARE_THRESHOLD + 2):
            first.execute(query).scalar_one()
            first.commit()
        with engine.connect() as second:
            second.execute(text("SELECT 1"))  # BEGIN: holds a server until it ends
            answer = int(first.execute(query).scalar_one())
            second.rollback()
        return answer


@pytest.fixture
def bouncer_store(_pgbouncer_engine: Engine, pgbouncer_url: str) -> Store:
    """The PgBouncer store alone, emptied."""
    with _pgbouncer_engine.begin() as connection:
        connection.execute(requests.delete())
    return Store(pgbouncer_url, _pgbouncer_engine)


def test_a_plain_url_through_pgbouncer_loses_its_prepared_statements(
    bouncer_store: Store,
) -> None:
    plain = make_url(bouncer_store.url).difference_update_query(["pooler"])
    engine = create_store_engine(plain.render_as_string(hide_password=False))
    try:
        assert not transaction_pooled(engine)
        with pytest.raises(DBAPIError) as failure:
            _moved_to_another_server(engine)
        assert getattr(failure.value.orig, "sqlstate", None) == NO_SUCH_STATEMENT
    finally:
        engine.dispose()


def test_the_pooler_option_prepares_nothing_on_the_server(bouncer_store: Store) -> None:
    open_writer(bouncer_store.engine).write_requests(
        make_records(np.random.default_rng(3), T0, 50, span=timedelta(minutes=5))
    )
    assert _moved_to_another_server(bouncer_store.engine) == 50
    # (The servers' pg_prepared_statements may hold what other clients prepared: PgBouncer
    # shares them; what counts is that this client never names a statement.)
    with bouncer_store.engine.connect() as connection:
        assert connection.connection.driver_connection.prepare_threshold is None


def test_writers_and_readers_sharing_server_connections_store_each_request_once(
    bouncer_store: Store,
) -> None:
    """Four sidecars' writers through one PgBouncer: binary ``COPY`` of new batches, and a
    replayed batch through the staging table, whose temporary table lives on whichever server
    connection the transaction had; reads repeated past the prepare threshold between."""
    engine = bouncer_store.engine
    batches = {
        worker: [
            make_records(
                np.random.default_rng(worker * 100 + n),
                T0 + timedelta(hours=worker, minutes=5 * n),
                200,
                span=timedelta(minutes=5),
                instances=(f"gpu-{worker}",),
            )
            for n in range(PREPARE_THRESHOLD + 2)
        ]
        for worker in range(4)
    }
    errors: list[BaseException] = []

    def ship(worker: int) -> None:
        try:
            writer = open_writer(engine)
            for records in batches[worker]:
                assert writer.write_requests(records).inserted == len(records)
                assert writer.write_requests(records[:50]).inserted == 0  # replay: staging
                _count_since(engine, T0)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ship, args=(worker,)) for worker in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _count_since(engine, T0) == 4 * (PREPARE_THRESHOLD + 2) * 200


def test_timestamps_come_back_in_utc_from_each_transaction(bouncer_store: Store) -> None:
    """Each transaction's clock reads UTC, as a direct session's does (``storage.engine``):
    the driver hands timestamps back in ``datetime.UTC`` itself, whichever server connection
    PgBouncer picked and whatever its own zone (this server's is its default, not ``UTC``)."""
    records = make_records(np.random.default_rng(5), T0, 20, span=timedelta(minutes=5))
    open_writer(bouncer_store.engine).write_requests(records)
    with bouncer_store.engine.connect() as connection:
        stored = connection.execute(select(requests.c.start).order_by(requests.c.start)).all()
        zone = connection.execute(text("SELECT current_setting('TimeZone')")).scalar_one()
    assert zone == "UTC"
    assert [start for (start,) in stored] == sorted(r.start for r in records)
    assert all(start.tzinfo is UTC for (start,) in stored)
