"""What the replica recommender reads of the store, per model (``service.scaling``).

* ``models_seen``: the models with minute rollups or server scrapes in a window.
* ``minute_demand``: a model's requests per minute bucket (minute rollups, summed over
  instances, tenants and priorities) and the instances that served each minute.
* ``peak_rate``: the busiest request rate of a model in a window — per minute from the minute
  rollups, else per hour from the hour rollups (the minute ones may have been retained away),
  ``None`` where neither holds any request: what a week-ago window forecasts.
* ``server_gauges``: the newest scrape of each instance serving a model in a window (queue,
  KV-cache usage; optionally only some instances: one pool's), and ``gpu_utilisation``: the
  mean utilisation of those instances' GPUs.
* ``pool_members``: a disaggregated model's prefill and decode instances in a window (those
  that stored prefill legs in ``request_parts``; those that stored users' requests split by a
  P/D proxy, ``requests.role = 'decode'``).
* ``busiest_prefill_minute``: the most prefill legs one prefill instance completed in a minute
  whose legs' mean queue time stayed within a bound: what one prefill instance sustains.

Every read is bounded by its window and by ``MAX_ROWS``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sqlalchemy import Engine, func, select

from infersight.core.window import Resolution, Window
from infersight.storage.gpu_reads import bucket_epoch
from infersight.storage.tables import (
    gpu_samples,
    request_parts,
    request_rollups,
    requests,
    server_samples,
)
from infersight.storage.timeseries import bucket_of

#: The most rows (minute buckets × instances, or scrapes) one read returns.
MAX_ROWS: Final = 200_000
#: The most models one cycle considers.
MAX_MODELS: Final = 1_000


def models_seen(engine: Engine, window: Window) -> list[str]:
    """Every non-empty model with minute rollups or server scrapes in ``window``, sorted."""
    r = request_rollups.c
    s = server_samples.c
    with engine.connect() as connection:
        from_rollups = connection.execute(
            select(r.model)
            .where(
                r.resolution == Resolution.MINUTE.value,
                r.bucket >= window.start,
                r.bucket < window.end,
                r.model != "",
            )
            .distinct()
            .limit(MAX_MODELS)
        ).scalars()
        found = {str(m) for m in from_rollups}
        from_scrapes = connection.execute(
            select(s.model)
            .where(s.ts >= window.start, s.ts < window.end, s.model != "")
            .distinct()
            .limit(MAX_MODELS)
        ).scalars()
        found.update(str(m) for m in from_scrapes)
    return sorted(found)[:MAX_MODELS]


@dataclass(frozen=True, slots=True)
class Minute:
    """One minute of a model's traffic: the requests that started in it and who served them."""

    bucket: datetime
    requests: int
    instances: frozenset[str]


def minute_demand(engine: Engine, model: str, window: Window) -> list[Minute]:
    """``model``'s minute buckets in ``window`` that saw requests, in time order."""
    r = request_rollups.c
    query = (
        select(r.bucket, r.instance, func.sum(r.requests))
        .where(
            r.resolution == Resolution.MINUTE.value,
            r.model == model,
            r.bucket >= window.start,
            r.bucket < window.end,
        )
        .group_by(r.bucket, r.instance)
        .limit(MAX_ROWS)
    )
    counts: dict[datetime, int] = defaultdict(int)
    instances: dict[datetime, set[str]] = defaultdict(set)
    with engine.connect() as connection:
        for bucket, instance, n in connection.execute(query):
            counts[bucket] += int(n or 0)
            if n:
                instances[bucket].add(str(instance))
    return [
        Minute(bucket, counts[bucket], frozenset(instances[bucket]))
        for bucket in sorted(counts)
        if counts[bucket]
    ]


def peak_rate(engine: Engine, model: str, window: Window) -> float | None:
    """The busiest requests per second of ``model`` in ``window``: its busiest minute, or
    (with no minute rollups there) its busiest hour; ``None`` when neither saw a request."""
    minutes = minute_demand(engine, model, window)
    if minutes:
        return max(m.requests for m in minutes) / Resolution.MINUTE.seconds
    r = request_rollups.c
    hour = Resolution.HOUR
    query = (
        select(r.bucket, func.sum(r.requests))
        .where(
            r.resolution == hour.value,
            r.model == model,
            r.bucket >= hour.floor(window.start),
            r.bucket < window.end,
        )
        .group_by(r.bucket)
        .limit(MAX_ROWS)
    )
    with engine.connect() as connection:
        hours = [int(n or 0) for _, n in connection.execute(query)]
    busiest = max(hours, default=0)
    return busiest / hour.seconds if busiest else None


@dataclass(frozen=True, slots=True)
class Gauges:
    """The newest scrape of each instance serving a model."""

    newest: datetime | None
    instances: tuple[str, ...]
    waiting: tuple[float, ...]
    kv_usage: tuple[float, ...]


def server_gauges(
    engine: Engine, model: str, window: Window, instances: Collection[str] | None = None
) -> Gauges:
    """The newest scrape in ``window`` of each instance that reports serving ``model`` (of
    those in ``instances`` only, where given: one pool's). Waiting requests leave out those a
    decode instance holds for their KV cache (vLLM counts them as waiting,
    ``num_requests_waiting_by_reason{reason="deferred"}``): they wait on the transfer, not
    on the engine, and another decode instance would not serve them sooner."""
    s = server_samples.c
    where = [s.model == model, s.ts >= window.start, s.ts < window.end]
    if instances is not None:
        where.append(s.instance.in_(sorted(instances)[:MAX_MODELS]))
    newest_per = (
        select(s.instance, func.max(s.ts).label("ts"))
        .where(*where)
        .group_by(s.instance)
        .limit(MAX_ROWS)
        .subquery("newest")
    )
    query = (
        select(
            s.instance,
            s.ts,
            s.requests_waiting,
            s.requests_deferred,
            s.kv_cache_usage,
            s.kv_cache_usage_max,
        )
        .join(newest_per, (s.instance == newest_per.c.instance) & (s.ts == newest_per.c.ts))
        .order_by(s.instance)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return Gauges(
        newest=max((row.ts for row in rows), default=None),
        instances=tuple(str(row.instance) for row in rows),
        waiting=tuple(
            max(0.0, float(row.requests_waiting) - float(row.requests_deferred or 0.0))
            for row in rows
            if row.requests_waiting is not None
        ),
        kv_usage=tuple(
            float(
                row.kv_cache_usage_max if row.kv_cache_usage_max is not None else row.kv_cache_usage
            )
            for row in rows
            if row.kv_cache_usage is not None or row.kv_cache_usage_max is not None
        ),
    )


def gpu_utilisation(
    engine: Engine, instances: Sequence[str], window: Window
) -> tuple[float | None, datetime | None]:
    """(mean ``util_gpu`` of ``instances``' GPUs over ``window``, the newest reading's time)."""
    if not instances:
        return None, None
    g = gpu_samples.c
    query = select(func.avg(g.util_gpu), func.max(g.ts)).where(
        g.instance.in_(list(instances)[:MAX_MODELS]),
        g.ts >= window.start,
        g.ts < window.end,
        g.util_gpu.is_not(None),
    )
    with engine.connect() as connection:
        mean, newest = connection.execute(query).one()
    return (None if mean is None else float(mean)), newest


#: The roles of a disaggregated model's pools, as ``pool_members`` keys them.
PREFILL: Final = "prefill"
DECODE: Final = "decode"


def pool_members(
    engine: Engine, window: Window, model: str | None = None
) -> dict[str, dict[str, frozenset[str]]]:
    """model → {``PREFILL``: instances, ``DECODE``: instances} for every model (or ``model``)
    whose instances stored prefill legs or decode-side split requests in ``window``. A model
    served whole is absent; an instance whose role changed in the window is in both pools."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: {PREFILL: set(), DECODE: set()})
    p = request_parts.c
    q = requests.c
    reads = (
        (PREFILL, p, [p.start >= window.start, p.start < window.end]),
        (DECODE, q, [q.start >= window.start, q.start < window.end, q.role == DECODE]),
    )
    with engine.connect() as connection:
        for pool, c, where in reads:
            if model is not None:
                where.append(c.model == model)
            query = (
                select(c.model, c.instance).where(*where, c.model != "").distinct().limit(MAX_ROWS)
            )
            for name, instance in connection.execute(query):
                found[str(name)][pool].add(str(instance))
    return {
        name: {pool: frozenset(members) for pool, members in pools.items()}
        for name, pools in sorted(found.items())
    }


@dataclass(frozen=True, slots=True)
class BusiestPrefill:
    """The busiest prefill-instance-minute within the queue bound."""

    legs_per_s: float
    instance: str
    minute: datetime
    queue_mean_s: float


def busiest_prefill_minute(
    engine: Engine,
    model: str,
    window: Window,
    queue_max_s: float,
    instances: Collection[str] | None = None,
) -> BusiestPrefill | None:
    """The minute of ``window`` in which one prefill instance of ``model`` (of ``instances``,
    where given) completed the most successful prefill legs while their mean queue time stayed
    at or below ``queue_max_s``; ``None`` when no minute did (or no leg reported its queue)."""
    p = request_parts.c
    where = [p.model == model, p.start >= window.start, p.start < window.end, p.status == "ok"]
    if instances is not None:
        where.append(p.instance.in_(sorted(instances)[:MAX_MODELS]))
    with engine.connect() as connection:
        bucket = bucket_of(connection, Resolution.MINUTE.seconds, p.start).label("minute")
        legs = func.count().label("legs")
        queue = func.avg(p.queue_s).label("queue_mean")
        query = (
            select(p.instance, bucket, legs, queue)
            .where(*where)
            .group_by(p.instance, bucket)
            .having(queue <= queue_max_s)
            .order_by(legs.desc(), bucket.desc(), p.instance)
            .limit(1)
        )
        row = connection.execute(query).first()
    if row is None:
        return None
    return BusiestPrefill(
        legs_per_s=int(row.legs) / Resolution.MINUTE.seconds,
        instance=str(row.instance),
        minute=datetime.fromtimestamp(bucket_epoch(row.minute), UTC),
        queue_mean_s=float(row.queue_mean),
    )
