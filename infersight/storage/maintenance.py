"""Retention and partition upkeep: what the maintenance job runs.

Raw rows (requests and samples) are kept ``raw_days``; minute rollups ``minute_days``, hour
rollups ``hour_days`` and day rollups ``day_days`` (request and GPU-sample rollups alike).
Queries over windows older than the minute retention must use hour rollups (``finest_for``),
and so on. Every closed day of raw requests has its good tokens counted once, per day and per
hour, and kept (``storage.good_tokens``) for the limits each series is held to: its covering
latency SLOs, else the limits of every stored cost model and the default ones; so long cost
answers read them and they outlive the raw rows; kept hours and days live as long as hour and
day rollups.

Finished profiles (``storage.profiles``) are kept ``profile_days`` after they were requested.

Far-future data: the last day that may hold rows is ``today + max(partition_ahead_days, 1)``
(a record may start at most a day ahead, ``core.accept``). Partitions after it, and rollup rows
of buckets after it, can only come from client clocks an older version accepted; maintenance
drops them (in batches, each its own transaction) and reports each one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy import Engine, delete, func, select

from infersight.core.cost import GoodRequest
from infersight.core.goodput import GoodPolicy
from infersight.core.retention import RetentionPolicy
from infersight.core.window import Resolution
from infersight.storage import good_tokens
from infersight.storage import profiles as profile_store
from infersight.storage.cost_models import list_models
from infersight.storage.engine import long_running
from infersight.storage.partitions import DROP_BATCH, drop_after, drop_before, ensure_partitions
from infersight.storage.slo_store import list_slos
from infersight.storage.tables import (
    PARTITIONED,
    good_token_counts,
    gpu_rollups,
    request_rollups,
    request_sequences,
    requests,
)

__all__ = ["MaintenanceReport", "RetentionPolicy", "maintain"]


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    created: tuple[str, ...]
    dropped: tuple[str, ...]
    rollups_deleted: int
    profiles_deleted: int = 0


def maintain(engine: Engine, now: datetime, policy: RetentionPolicy) -> MaintenanceReport:
    """Create partitions ahead of ``now`` and apply retention (statements bounded as a long
    job's: ``storage.engine.long_running``)."""
    engine = long_running(engine)
    today = now.date()
    ahead = [today + timedelta(days=i) for i in range(policy.partition_ahead_days + 1)]
    created: list[str] = []
    dropped: list[str] = []
    deleted = 0
    _keep_good_tokens(engine, today)
    last = today + timedelta(days=max(policy.partition_ahead_days, 1))
    dropped += _drop_far_future(engine, last)
    with engine.begin() as connection:
        for table in PARTITIONED:
            created += ensure_partitions(connection, table, ahead, today=today)
            dropped += drop_before(connection, table, today - timedelta(days=policy.raw_days))
        # The late sequences folded into requests go with their requests' raw days.
        raw_cutoff = datetime.combine(today - timedelta(days=policy.raw_days), time(), tzinfo=UTC)
        folded = connection.execute(
            delete(request_sequences).where(request_sequences.c.start < raw_cutoff)
        )
        deleted += max(folded.rowcount, 0)
        for resolution, days in (
            (Resolution.MINUTE, policy.minute_days),
            (Resolution.HOUR, policy.hour_days),
            (Resolution.DAY, policy.day_days),
        ):
            cutoff = resolution.floor(now - timedelta(days=days))
            for rollups in (request_rollups, gpu_rollups):
                result = connection.execute(
                    delete(rollups).where(
                        rollups.c.resolution == resolution.value, rollups.c.bucket < cutoff
                    )
                )
                deleted += max(result.rowcount, 0)
        for resolution, days in (
            (Resolution.HOUR, policy.hour_days),
            (Resolution.DAY, policy.day_days),
        ):
            kept = good_token_counts.c
            result = connection.execute(
                delete(good_token_counts).where(
                    kept.resolution == resolution.value,
                    kept.bucket < resolution.floor(now - timedelta(days=days)),
                )
            )
            deleted += max(result.rowcount, 0)
    profiles = profile_store.prune(engine, now - timedelta(days=policy.profile_days))
    return MaintenanceReport(tuple(created), tuple(dropped), deleted, profiles)


def _drop_far_future(engine: Engine, last: date) -> list[str]:
    """Drop the raw days after ``last`` and the rollup rows of buckets after it."""
    dropped: list[str] = []
    for table in PARTITIONED:
        while True:
            with engine.begin() as connection:
                batch = drop_after(connection, table, last)
            dropped += batch
            if len(batch) < DROP_BATCH or engine.dialect.name != "postgresql":
                break
    boundary = datetime.combine(last + timedelta(days=1), time(), tzinfo=UTC)
    with engine.begin() as connection:
        for rollups in (request_rollups, gpu_rollups, good_token_counts):
            result = connection.execute(delete(rollups).where(rollups.c.bucket >= boundary))
            if result.rowcount:
                dropped.append(f"{rollups.name}: {result.rowcount} rows after {last}")
    return dropped


def _keep_good_tokens(engine: Engine, cutoff: date) -> int:
    """Count and keep the good tokens of the raw days before ``cutoff`` not kept yet."""
    with engine.connect() as connection:
        oldest = connection.execute(select(func.min(requests.c.start))).scalar()
    if oldest is None or oldest.date() >= cutoff:
        return 0
    days = [oldest.date() + timedelta(days=i) for i in range((cutoff - oldest.date()).days)]
    slos = list_slos(engine)
    goods = [GoodRequest(), *(model.good for model in list_models(engine))]
    policies = [GoodPolicy.of(slos, good.limits) for good in goods]
    return good_tokens.keep_days(engine, policies, days)
