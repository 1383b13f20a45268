"""Scheduled jobs (APScheduler) and the leader election that makes them run once per fleet.

Every API replica schedules the same jobs, but a tick does work only on the leader. On
PostgreSQL the leader is whoever holds a session-level advisory lock on a dedicated connection:
when it stops (or its connection dies) the lock is released and the next replica to tick takes
over. On SQLite there is one process, which always leads.

A session-level lock needs a session: through a pooler in transaction mode (a store URL with
``pooler=transaction``) the lock would stay on whichever server connection took it, handed
to other clients, and two replicas could both lead. So the lock then goes over its own direct
connection (``INFERSIGHT_LEADER_LOCK_URL``: the same database, not through the pooler), and
without one ``leader_lock`` refuses to start jobs. A process that runs no jobs needs none.

Jobs: SLO evaluation (every ``evaluation_interval_s``) and maintenance — daily partitions
ahead of time, and retention of raw rows and rollups (every ``maintenance_interval_s``); the
weekly cost report on a cron schedule in its own time zone (``service.reports``), when given;
the replica recommender (``service.scaling``: one recommendation per model), every
``scaling_interval_s``, when given.
Rollups themselves are merged as batches arrive (``storage.rollup``), so compaction here is
the retention of the finer resolutions that coarser ones have made redundant.

Each time this replica takes the lead — its first tick that leads, and each later one that
leads after a tick that did not, or after the lock was lost and taken again between ticks
(``AdvisoryLock.term``) — ``Jobs`` calls its ``on_lead`` hooks, and the ``on_leadership`` of
the delivery job when it has one, before any job of that term runs: the notifications' follow-up
then settles what the replica that led before left half done (``service.notifications``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from infersight.core.errors import ConfigurationError
from infersight.core.retention import RetentionPolicy
from infersight.service import snapshots
from infersight.service.budgets import MoneyAlerts
from infersight.service.evaluation import Evaluator
from infersight.service.store import open_store
from infersight.storage.seam import Store, reason, redact, transaction_pooled

log = logging.getLogger(__name__)
#: The advisory lock key of the jobs leader ("infersgt" as a big-endian 64-bit number).
LEADER_LOCK_KEY: Final = int.from_bytes(b"infersgt", "big") & 0x7FFF_FFFF_FFFF_FFFF


class LeaderLock(Protocol):
    def acquire(self) -> bool:
        """``True`` while this process leads (taking the lead if it is free)."""

    def release(self) -> None: ...


class SoleLeader:
    """SQLite: a single process runs the jobs."""

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        pass


class Episodes:
    """The log of an attempt repeated on every tick (taking the lead, running a job): one line
    when it starts failing, with the traceback of that first failure; nothing while it keeps
    failing; one line when it succeeds again. A store outage of an hour is three lines and
    one traceback, not one traceback per tick; ``failures`` counts the attempts it spans."""

    def __init__(self, logger: logging.Logger) -> None:
        self.log = logger
        self.failures = 0
        self.since: float | None = None
        self.error: str | None = None

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def failed(self, exc: BaseException, message: str, *args: object) -> None:
        """A failed attempt; logged (``message``, then the error's first line, then its
        traceback) only when it ends a run of successes."""
        self.error = reason(exc) if isinstance(exc, Exception) else type(exc).__name__
        self.failures += 1
        if self.failures == 1:
            self.since = time.monotonic()
            self.log.warning(f"{message}: %s", *args, self.error, exc_info=exc)
        else:
            self.log.debug(f"{message} again: %s", *args, self.error)

    def succeeded(self, message: str, *args: object) -> bool:
        """A successful attempt; after failures, ``message`` is logged with how many and for
        how long. Whether it ended failures."""
        if not self.failing:
            return False
        seconds = time.monotonic() - (self.since or time.monotonic())
        self.log.warning(
            f"{message} (after %d failed attempts in %.0f s)", *args, self.failures, seconds
        )
        self.failures, self.since, self.error = 0, None, None
        return True


class AdvisoryLock:
    """A PostgreSQL session-level advisory lock held on its own connection.

    Its log says each change of state once: this replica takes the lead; it cannot reach the
    store (with the first failure's traceback, then nothing while the outage lasts); the store
    answers again; another replica took the lead."""

    def __init__(self, engine: Engine, key: int = LEADER_LOCK_KEY) -> None:
        self.engine = engine
        self.key = key
        self._connection: Connection | None = None
        self._mutex = threading.Lock()
        self._outage = Episodes(log)
        self._leading = False
        #: How many times this replica took the lock: a new term each time it takes it again.
        self.term = 0

    def acquire(self) -> bool:
        with self._mutex:
            try:
                return self._lead()
            except DBAPIError as exc:
                self._drop()
                self._outage.failed(
                    exc, "not leading the scheduled jobs: the store cannot be reached"
                )
                self._leading = False
                return False

    def _lead(self) -> bool:
        if self._connection is not None:
            if self._still_held(self._connection):
                return True
            self._drop()
        connection = self.engine.connect()
        try:
            got = connection.execute(
                text("SELECT pg_try_advisory_lock(:key)"), {"key": self.key}
            ).scalar_one()
            connection.commit()
        except BaseException:
            connection.invalidate()
            connection.close()
            raise
        back = self._outage.succeeded(
            "the store answers again; this replica %s the scheduled jobs",
            "leads" if got else "does not lead",
        )
        if got:
            self._connection = connection
            self.term += 1
            if not back:
                log.info("this replica now leads the scheduled jobs")
        else:
            connection.close()
            if self._leading and not back:
                log.warning("this replica no longer leads the scheduled jobs (another one does)")
        self._leading = bool(got)
        return bool(got)

    def _still_held(self, connection: Connection) -> bool:
        try:
            held = connection.execute(
                text(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND pid = pg_backend_pid() AND objsubid = 1"
                    " AND ((classid::bigint << 32) | objid::bigint) = :key"
                ),
                {"key": self.key},
            ).scalar_one()
            connection.commit()
            return bool(held)
        except DBAPIError:
            return False

    def _drop(self) -> None:
        if self._connection is not None:
            try:
                self._connection.invalidate()
                self._connection.close()
            except DBAPIError:
                pass
            self._connection = None

    def release(self) -> None:
        with self._mutex:
            if self._connection is None:
                return
            try:
                self._connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": self.key})
                self._connection.commit()
                self._connection.close()
            except DBAPIError:
                self._drop()
            self._connection = None


class NeverLeader:
    """A process that runs no jobs behind a transaction pooler without a direct lock URL: it
    never leads, so its ticks, if any are called, do nothing."""

    def acquire(self) -> bool:
        return False

    def release(self) -> None:
        pass


def leader_lock(store: Store, direct_url: str = "", *, runs_jobs: bool = True) -> LeaderLock:
    """The leader lock for ``store``: none needed on SQLite; on PostgreSQL an advisory lock
    (a session's, on the store's engine: ``store.engine``) over ``direct_url`` when given, else
    over the store's own connections unless they go through a transaction pooler (a
    ``ConfigurationError`` for a process that runs jobs)."""
    engine = store.engine
    if engine.dialect.name != "postgresql":
        return SoleLeader()
    if direct_url:
        direct = open_store(direct_url, poolclass=NullPool).engine
        if direct.dialect.name != "postgresql" or transaction_pooled(direct):
            direct.dispose()
            raise ConfigurationError(
                "INFERSIGHT_LEADER_LOCK_URL must reach PostgreSQL directly (no pooler=transaction)",
                details={"url": redact(direct_url)},
            )
        return AdvisoryLock(direct)
    if transaction_pooled(engine):
        if not runs_jobs:
            return NeverLeader()
        raise ConfigurationError(
            "the store is reached through a transaction pooler (pooler=transaction), where the "
            "jobs leader's session lock is unsafe: set INFERSIGHT_LEADER_LOCK_URL to a direct "
            "URL of the same database, or INFERSIGHT_RUN_JOBS=false"
        )
    return AdvisoryLock(engine)


class Jobs:
    """The scheduled jobs of one replica; ``tick_*`` are what the scheduler calls."""

    def __init__(
        self,
        store: Store,
        evaluator: Evaluator,
        retention: RetentionPolicy,
        clock: Callable[[], datetime],
        lock: LeaderLock,
        evaluation_interval_s: float,
        maintenance_interval_s: float,
        deliver: Callable[[datetime], object] | None = None,
        delivery_interval_s: float = 10.0,
        report: Callable[[datetime], object] | None = None,
        report_cron: Mapping[str, Any] | None = None,
        scale: Callable[[datetime], object] | None = None,
        scaling_interval_s: float = 60.0,
        on_lead: Sequence[Callable[[], object]] = (),
        money: Callable[[datetime], object] | None = None,
        money_interval_s: float = 300.0,
    ) -> None:
        self.store = store
        self.evaluator = evaluator
        self.retention = retention
        self.clock = clock
        self.lock = lock
        self.evaluation_interval_s = evaluation_interval_s
        self.maintenance_interval_s = maintenance_interval_s
        self.runs: dict[str, int] = {"evaluate": 0, "maintain": 0}
        # Notification delivery runs apart from the evaluation: a down endpoint delays only it.
        self.deliver = deliver
        self.delivery_interval_s = delivery_interval_s
        if deliver is not None:
            self.runs["deliver"] = 0
        # The weekly report: cron fields (day_of_week, hour, minute, timezone) for APScheduler.
        self.report = report
        self.report_cron = dict(report_cron or {})
        if report is not None:
            self.runs["report"] = 0
        # The replica recommender: its own interval (a cycle reads every model's inputs).
        self.scale = scale
        self.scaling_interval_s = scaling_interval_s
        if scale is not None:
            self.runs["scale"] = 0
        # Budgets and the cost step (``service.budgets``): cost queries, a slower interval.
        self.money = money
        self.money_interval_s = money_interval_s
        if money is not None:
            self.runs["money"] = 0
        #: Ticks APScheduler skipped because the job's previous run was still going.
        self.skipped: dict[str, int] = dict.fromkeys(self.runs, 0)
        #: Seconds the latest runs of each job took (the most recent last).
        self.durations: dict[str, deque[float]] = {name: deque(maxlen=100) for name in self.runs}
        self.last_error: str | None = None
        #: Each job's run of failures, logged once per change (``Episodes``).
        self._failures: dict[str, Episodes] = {name: Episodes(log) for name in self.runs}
        self._scheduler: BackgroundScheduler | None = None
        #: Called each time this replica takes the lead, before a job of the new term runs.
        self.on_lead: list[Callable[[], object]] = list(on_lead)
        told = getattr(deliver, "on_leadership", None)
        if callable(told):
            self.on_lead.append(told)
        self._lead_mutex = threading.Lock()
        self._leading = False
        self._lead_term: object = None
        self._lead_hooks = Episodes(log)

    def reuse_age(self, name: str) -> timedelta:
        """How old job ``name``'s (``evaluate`` or ``money``) last results may be and still be
        shown: its interval plus twice the time its last run took. A run's results are
        stamped with its start and replace the previous ones when it ends, so with the bare
        interval they went stale for the length of every run and each page view computed
        them again meanwhile (the longer the runs, the more often: under load, most of the
        time)."""
        interval = {"evaluate": self.evaluation_interval_s, "money": self.money_interval_s}
        took = self.durations.get(name)
        last = took[-1] if took else 0.0
        return timedelta(seconds=interval[name] + 2 * last)

    def tick_evaluation(self) -> bool:
        """Evaluate every SLO if this replica leads; whether it did. The cycle's statuses are
        stored for every worker's pages (``service.snapshots``)."""
        return self._guarded("evaluate", self._evaluate)

    def _evaluate(self) -> None:
        now = self.clock()
        self.evaluator.run(now)
        body = snapshots.encode_statuses(self.evaluator.latest, self.evaluator.policy)
        self._publish(snapshots.EVALUATE, now, body)

    def _publish(self, job: str, at: datetime, body: str) -> None:
        """Store a job's results for the other workers' pages. The job itself has done its
        work (incidents written, alerts told): failing to share its results only makes the
        other workers compute them, so it is logged, once per run of failures, not raised."""
        episodes = self._failures.setdefault(f"{job}-results", Episodes(log))
        try:
            self.store.results.put(job, at, body)
        except Exception as exc:
            episodes.failed(exc, "job %s's results not stored for the other workers", job)
            return
        episodes.succeeded("job %s's results are stored again", job)

    def tick_maintenance(self) -> bool:
        return self._guarded(
            "maintain", lambda: self.store.maintenance.maintain(self.clock(), self.retention)
        )

    def tick_delivery(self) -> bool:
        deliver = self.deliver
        if deliver is None:
            return False
        return self._guarded("deliver", lambda: deliver(self.clock()))

    def tick_report(self) -> bool:
        report = self.report
        if report is None:
            return False
        return self._guarded("report", lambda: report(self.clock()))

    def tick_scaling(self) -> bool:
        """Record one replica recommendation per model if this replica leads; whether it did."""
        scale = self.scale
        if scale is None:
            return False
        return self._guarded("scale", lambda: scale(self.clock()))

    def tick_money(self) -> bool:
        """Evaluate the budgets and the cost step if this replica leads; whether it did. The
        money job's judgements are stored for every worker's pages (``service.snapshots``)."""
        money = self.money
        if money is None:
            return False
        return self._guarded("money", lambda: self._judge_money(money))

    def _judge_money(self, money: Callable[[datetime], object]) -> None:
        money(self.clock())
        latest = money.latest if isinstance(money, MoneyAlerts) else None
        if latest is not None:
            self._publish(snapshots.MONEY, latest.at, snapshots.encode_money(latest))

    def _leads(self) -> bool:
        """Whether this replica leads; on taking the lead, the ``on_lead`` hooks are called
        (under a mutex: a job of the new term runs after them)."""
        led = self.lock.acquire()
        term = getattr(self.lock, "term", None)
        with self._lead_mutex:
            gained = led and (not self._leading or term != self._lead_term)
            self._leading, self._lead_term = led, term
            if gained:
                for hook in self.on_lead:
                    try:
                        hook()
                    except Exception as exc:
                        self._lead_hooks.failed(exc, "a hook on taking the lead failed")
                    else:
                        self._lead_hooks.succeeded("the hooks on taking the lead run again")
        return led

    def _guarded(self, name: str, work: Callable[[], object]) -> bool:
        if not self._leads():
            return False
        started = time.perf_counter()
        failures = self._failures.setdefault(name, Episodes(log))
        try:
            work()
        except Exception as exc:
            # A failing job must not kill the scheduler thread; the next tick tries again. Its
            # first failure is logged with the traceback, the next ones not (an outage would
            # write one per tick), its recovery in one line.
            self.last_error = f"{name}: {exc}"
            failures.failed(exc, "job %s failed", name)
            return False
        failures.succeeded("job %s runs again", name)
        self.runs[name] += 1
        self.durations[name].append(time.perf_counter() - started)
        return True

    def _on_skipped(self, event: JobSubmissionEvent) -> None:
        self.skipped[event.job_id] = self.skipped.get(event.job_id, 0) + 1

    def start(self) -> None:
        scheduler = BackgroundScheduler(timezone="UTC")
        intervals = [
            ("evaluate", self.tick_evaluation, self.evaluation_interval_s),
            ("maintain", self.tick_maintenance, self.maintenance_interval_s),
        ]
        if self.deliver is not None:
            intervals.append(("deliver", self.tick_delivery, self.delivery_interval_s))
        if self.scale is not None:
            intervals.append(("scale", self.tick_scaling, self.scaling_interval_s))
        if self.money is not None:
            intervals.append(("money", self.tick_money, self.money_interval_s))
        for job_id, tick, seconds in intervals:
            # The money job's interval is minutes long: it runs at start too, so that budgets
            # and cost steps are judged (and shown: ``MoneySnapshot``) from the first minute
            # after a restart, not an interval later.
            first = {"next_run_time": datetime.now(UTC)} if job_id == "money" else {}
            scheduler.add_job(
                tick,
                "interval",
                seconds=seconds,
                id=job_id,
                max_instances=1,
                coalesce=True,
                **first,
            )
        if self.report is not None:
            scheduler.add_job(
                self.tick_report,
                "cron",
                id="report",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=6 * 3600,
                **self.report_cron,
            )
        scheduler.add_listener(self._on_skipped, EVENT_JOB_MAX_INSTANCES)
        scheduler.start()
        self._scheduler = scheduler

    def stop(self) -> None:
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True)
            self._scheduler = None
        self.lock.release()
