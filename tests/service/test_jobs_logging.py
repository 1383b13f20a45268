"""Issue 32 (defect 7): a store outage after start is logged once per change of state — the
lead lost with the first failure's traceback, nothing while it lasts, the lead taken again —
not one traceback per tick. A real PostgreSQL database that stops accepting connections (its
sessions ended, ``ALLOW_CONNECTIONS false``) is the outage."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from infersight.service.evaluation import Evaluator, default_policy
from infersight.service.jobs import Jobs, leader_lock
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from tests.conftest import POSTGRES_ADMIN_URL, fresh_database
from tests.doubles import NOW, FakeClock

pytestmark = pytest.mark.postgres
TICKS = 12  # ticks of each job during the outage (13 tracebacks a minute were reported)


@contextmanager
def _outage(url: str) -> Iterator[None]:
    """The database at ``url`` refuses every connection, and its open sessions are ended,
    until the block is left."""
    name = make_url(url).database
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
            connection.execute(
                text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
                {"n": name},
            )
        yield
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()


def _jobs(url: str, lock_url: str = "") -> Jobs:
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    return Jobs(
        SqlStore(engine),
        Evaluator(SqlStore(engine), default_policy()),
        RetentionPolicy(),
        FakeClock(NOW),
        leader_lock(SqlStore(engine), lock_url),
        evaluation_interval_s=30.0,
        maintenance_interval_s=3600.0,
    )


def _lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.INFO]


def test_an_outage_is_one_line_and_one_traceback_for_the_leader_election(caplog):
    caplog.set_level(logging.DEBUG, logger="infersight")
    with fresh_database() as url:
        jobs = _jobs(url)
        try:
            assert jobs.tick_evaluation()
            assert [r.getMessage() for r in _lines(caplog)] == [
                "this replica now leads the scheduled jobs"
            ]
            caplog.clear()
            with _outage(url):
                for _ in range(TICKS):
                    assert not jobs.tick_evaluation()
                    assert not jobs.tick_maintenance()
                during = _lines(caplog)
                assert len(during) == 1, [r.getMessage() for r in during]
                (lost,) = during
                assert lost.getMessage().startswith(
                    "not leading the scheduled jobs: the store cannot be reached: "
                )
                assert "\n" not in lost.getMessage()  # the error's first line only
                assert lost.exc_info is not None  # the traceback, this once
                caplog.clear()
            assert jobs.tick_evaluation()  # the store is back: the lead is taken again
            (back,) = _lines(caplog)
            assert back.getMessage().startswith(
                "the store answers again; this replica leads the scheduled jobs "
                f"(after {2 * TICKS} failed attempts"
            )
            assert back.exc_info is None
            caplog.clear()
            assert jobs.tick_evaluation()
            assert _lines(caplog) == []
        finally:
            jobs.stop()
            jobs.store.dispose()


def test_a_job_failing_through_an_outage_logs_its_traceback_once(caplog):
    """The lead held over its own connection (``INFERSIGHT_LEADER_LOCK_URL``, here another
    database of the same server) while the store's database is out: the job fails each tick."""
    caplog.set_level(logging.DEBUG, logger="infersight")
    with fresh_database() as url, fresh_database() as lock_url:
        jobs = _jobs(url, lock_url)
        try:
            assert jobs.tick_evaluation()
            caplog.clear()
            with _outage(url):
                for _ in range(TICKS):
                    assert not jobs.tick_evaluation()
                during = _lines(caplog)
                assert len(during) == 1, [r.getMessage() for r in during]
                assert during[0].getMessage().startswith("job evaluate failed: ")
                assert during[0].exc_info is not None
                assert jobs.last_error is not None
                caplog.clear()
            assert jobs.tick_evaluation()
            (back,) = _lines(caplog)
            assert back.getMessage().startswith(
                f"job evaluate runs again (after {TICKS} failed attempts"
            )
        finally:
            jobs.stop()
            jobs.store.dispose()
