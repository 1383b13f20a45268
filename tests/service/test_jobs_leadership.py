"""The hooks ``Jobs`` calls each time its replica takes the lead (#32): once per gain, not per
tick; and with the real advisory lock, a session the database dropped and the lock taken again
between two ticks is a new term, though no tick saw this replica not lead."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, text

from infersight.service.evaluation import Evaluator, default_policy
from infersight.service.jobs import AdvisoryLock, Jobs
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from tests.conftest import Store
from tests.doubles import NOW, FakeClock
from tests.waiting import until


class ToggledLock:
    """A leader lock the test hands out and takes back."""

    def __init__(self) -> None:
        self.leads = True

    def acquire(self) -> bool:
        return self.leads

    def release(self) -> None:
        pass


def test_each_gain_of_the_lead_calls_the_hooks_once(store: Store) -> None:
    lock, calls = ToggledLock(), []
    jobs = Jobs(
        store.sql,
        Evaluator(store.sql, default_policy()),
        RetentionPolicy(),
        FakeClock(NOW),
        lock,
        evaluation_interval_s=30.0,
        maintenance_interval_s=3600.0,
        on_lead=[lambda: calls.append("lead")],
    )
    for leads in (True, True, False, False, True, True):
        lock.leads = leads
        jobs.tick_maintenance()
    assert calls == ["lead", "lead"]


def _gone(engine: Engine, pid: int) -> bool:
    with engine.connect() as connection:
        count = connection.execute(
            text(
                "SELECT (SELECT count(*) FROM pg_locks WHERE pid = :pid)"
                " + (SELECT count(*) FROM pg_stat_activity WHERE pid = :pid)"
            ),
            {"pid": pid},
        ).scalar_one()
    return count == 0


@pytest.mark.postgres
def test_the_lock_taken_again_between_ticks_is_a_new_term(pg_store) -> None:
    engine = create_store_engine(pg_store.url)
    lock = AdvisoryLock(engine)
    calls: list[str] = []
    jobs = Jobs(
        SqlStore(engine),
        Evaluator(SqlStore(engine), default_policy()),
        RetentionPolicy(),
        FakeClock(NOW),
        lock,
        evaluation_interval_s=30.0,
        maintenance_interval_s=3600.0,
        on_lead=[lambda: calls.append("lead")],
    )
    try:
        assert jobs.tick_maintenance()
        assert jobs.tick_maintenance()
        assert calls == ["lead"]
        held = lock._connection
        assert held is not None
        pid = held.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        held.commit()
        held.invalidate()  # the database dropped the session, and the lock with it
        until(lambda: _gone(pg_store.engine, pid), "the dropped session's end", every_s=0.02)
        assert jobs.tick_maintenance()  # taken again at once: another replica may have led
        assert (calls, lock.term) == (["lead", "lead"], 2)
    finally:
        jobs.stop()
        engine.dispose()
