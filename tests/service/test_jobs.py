"""Scheduled jobs: one leader among replicas on PostgreSQL, a sole runner on SQLite."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from infersight.service.evaluation import Evaluator, default_policy
from infersight.service.jobs import AdvisoryLock, Jobs, SoleLeader, leader_lock
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from tests.doubles import NOW, FakeClock
from tests.waiting import until


def replica(engine, lock=None, interval: float = 30.0) -> Jobs:
    return Jobs(
        SqlStore(engine),
        Evaluator(SqlStore(engine), default_policy()),
        RetentionPolicy(),
        FakeClock(NOW),
        lock or leader_lock(SqlStore(engine)),
        evaluation_interval_s=interval,
        maintenance_interval_s=3600.0,
    )


@pytest.mark.postgres
def test_two_replicas_on_one_postgres_run_the_jobs_once_per_interval_and_fail_over(pg_store):
    engines = [create_store_engine(pg_store.url) for _ in range(2)]
    first, second = (replica(e) for e in engines)
    try:
        assert isinstance(first.lock, AdvisoryLock)
        for _ in range(3):  # three intervals: both replicas tick, one runs
            assert [first.tick_evaluation(), second.tick_evaluation()] == [True, False]
        assert first.tick_maintenance() is True
        assert second.tick_maintenance() is False
        assert (first.runs, second.runs) == (
            {"evaluate": 3, "maintain": 1},
            {"evaluate": 0, "maintain": 0},
        )
        first.stop()  # the leader goes away
        for _ in range(2):
            assert [second.tick_evaluation(), first.tick_evaluation()] == [True, False]
        assert second.runs["evaluate"] == 2
    finally:
        first.stop()
        second.stop()
        for engine in engines:
            engine.dispose()


def _wait(condition) -> bool:
    """Until ``condition()`` holds; no deadline of its own (pytest-timeout stops a hang)."""
    until(condition, "the scheduler's runs", every_s=0.02)
    return bool(condition())


@pytest.mark.postgres
def test_two_running_schedulers_on_postgres_have_one_leader_until_it_stops(pg_store):
    engines = [create_store_engine(pg_store.url) for _ in range(2)]
    first, second = (replica(e, interval=0.1) for e in engines)
    try:
        first.start()
        assert _wait(lambda: first.runs["evaluate"] >= 1)
        second.start()
        assert _wait(lambda: first.runs["evaluate"] >= 6)
        assert second.runs["evaluate"] == 0  # both tick every 0.1 s; only the leader runs
        first.stop()
        stopped_at = first.runs["evaluate"]
        assert _wait(lambda: second.runs["evaluate"] >= 3)  # the follower takes over
        assert first.runs["evaluate"] == stopped_at
        assert first.last_error is None
        assert second.last_error is None
    finally:
        first.stop()
        second.stop()
        for engine in engines:
            engine.dispose()


@pytest.mark.postgres
def test_a_leader_whose_connection_dies_loses_the_lead(pg_store):
    engines = [create_store_engine(pg_store.url) for _ in range(2)]
    first, second = AdvisoryLock(engines[0]), AdvisoryLock(engines[1])
    try:
        assert first.acquire() is True
        held = first._connection
        assert held is not None
        assert first.acquire() is True
        assert first._connection is held  # a leader keeps its session: no re-election per tick
        assert second.acquire() is False
        pid = held.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        held.commit()
        held.invalidate()  # as if the database had dropped the session
        _wait_until_gone(engines[1], pid)  # the server ends the session when it sees it closed
        assert second.acquire() is True
        assert first.acquire() is False
    finally:
        first.release()
        second.release()
        for engine in engines:
            engine.dispose()


def _wait_until_gone(engine, pid: int) -> None:
    """Until the server has ended backend ``pid`` and released its locks: it does so
    asynchronously after the client's socket closes, later on a loaded host."""
    query = text(
        "SELECT (SELECT count(*) FROM pg_locks WHERE pid = :pid)"
        " + (SELECT count(*) FROM pg_stat_activity WHERE pid = :pid)"
    )
    with engine.connect() as conn:
        while conn.execute(query, {"pid": pid}).scalar_one():
            conn.rollback()  # a fresh snapshot of the statistics on the next read
            time.sleep(0.05)


def test_the_scheduler_ticks_the_evaluation_at_its_interval(store):
    jobs = replica(store.engine, interval=0.05)
    jobs.start()
    try:
        _wait(lambda: jobs.runs["evaluate"] >= 3)
    finally:
        jobs.stop()
    assert jobs.runs["evaluate"] >= 3
    assert jobs.last_error is None
    settled = dict(jobs.runs)
    time.sleep(0.15)
    assert jobs.runs == settled  # stopped means stopped


def test_the_money_job_runs_at_start_and_then_at_its_interval(store):
    """Budgets and cost steps are judged from the first minute after a start, not one
    (five-minute) interval later; the evaluation keeps its first run an interval away."""
    ran = threading.Event()
    jobs = Jobs(
        SqlStore(store.engine),
        Evaluator(SqlStore(store.engine), default_policy()),
        RetentionPolicy(),
        FakeClock(NOW),
        leader_lock(SqlStore(store.engine)),
        evaluation_interval_s=3600.0,
        maintenance_interval_s=3600.0,
        money=lambda now: ran.set(),
        money_interval_s=3600.0,
    )
    jobs.start()
    try:
        until(lambda: jobs.runs["money"] >= 1, "the money job's first run")
    finally:
        jobs.stop()
    assert ran.is_set()
    assert jobs.runs["money"] == 1
    assert jobs.runs["evaluate"] == 0
    assert jobs.last_error is None


def test_on_sqlite_the_single_process_leads(tmp_path):
    engine = create_store_engine(f"sqlite:///{tmp_path / 'one.db'}")
    try:
        migrate.upgrade(engine)
        assert isinstance(leader_lock(SqlStore(engine)), SoleLeader)
        jobs = replica(engine)
        assert jobs.tick_evaluation() is True
        assert jobs.tick_maintenance() is True
    finally:
        engine.dispose()


class Stalled:
    """An evaluator whose run waits until released (a cycle that overruns its interval)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.policy = default_policy()
        self.latest = ()  # the statuses the jobs store after a cycle (none here)

    def run(self, now):
        self.entered.set()
        self.release.wait(60)


def test_a_cycle_that_overruns_its_interval_is_counted_as_skipped_runs_and_timed(tmp_path):
    stalled = Stalled()
    engine = create_store_engine(f"sqlite:///{tmp_path}/jobs.db")
    jobs = Jobs(
        SqlStore(engine), stalled, RetentionPolicy(), FakeClock(NOW), SoleLeader(),
        evaluation_interval_s=0.05, maintenance_interval_s=3600.0,
    )  # fmt: skip
    jobs.start()
    try:
        assert stalled.entered.wait(30)
        _wait(lambda: jobs.skipped["evaluate"] > 0)  # the scheduler's skip
        assert jobs.skipped["evaluate"] > 0
        stalled.release.set()
        _wait(lambda: jobs.runs["evaluate"] > 0)
    finally:
        stalled.release.set()
        jobs.stop()
    assert jobs.runs["evaluate"] >= 1
    assert len(jobs.durations["evaluate"]) == jobs.runs["evaluate"]
    assert jobs.durations["evaluate"][0] > 0


def test_a_cycle_whose_results_cannot_be_stored_still_ran_and_is_logged_once(tmp_path, caplog):
    """The statuses are shared with the other workers after the cycle did its work: a store
    that refuses them (here: no ``job_results`` table) costs the other workers a count of
    their own, not the cycle, and is logged once for the run of failures."""
    stalled = Stalled()
    stalled.release.set()  # a cycle that returns at once
    engine = create_store_engine(f"sqlite:///{tmp_path}/bare.db")  # not migrated
    jobs = Jobs(
        SqlStore(engine), stalled, RetentionPolicy(), FakeClock(NOW), SoleLeader(),
        evaluation_interval_s=30.0, maintenance_interval_s=3600.0,
    )  # fmt: skip
    with caplog.at_level("WARNING", logger="infersight.service.jobs"):
        assert jobs.tick_evaluation()
        assert jobs.tick_evaluation()
    assert jobs.runs["evaluate"] == 2
    assert jobs.last_error is None
    told = [r for r in caplog.records if "results not stored" in r.getMessage()]
    assert len(told) == 1
    engine.dispose()


@pytest.mark.postgres
def test_a_transaction_pooled_store_needs_a_direct_lock_url(postgres_url: str) -> None:
    """Through a transaction pooler a session lock is unsafe (#19): jobs refuse to start
    without a direct URL, a process without jobs never leads, a direct URL is used."""
    from infersight.core.errors import ConfigurationError
    from infersight.service.jobs import NeverLeader
    from infersight.storage.engine import create_store_engine

    direct = postgres_url
    pooled = create_store_engine(direct + "?pooler=transaction")
    try:
        with pytest.raises(ConfigurationError, match="INFERSIGHT_LEADER_LOCK_URL"):
            leader_lock(SqlStore(pooled))
        assert isinstance(leader_lock(SqlStore(pooled), runs_jobs=False), NeverLeader)
        with pytest.raises(ConfigurationError, match="directly"):
            leader_lock(SqlStore(pooled), direct + "?pooler=transaction")
        lock = leader_lock(SqlStore(pooled), direct)
        assert isinstance(lock, AdvisoryLock)
        assert lock.engine is not pooled
        assert lock.acquire()
        lock.release()
    finally:
        pooled.dispose()
