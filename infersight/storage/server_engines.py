"""Reading the data-parallel engines of servers (``server_engine_samples``).

Dashboards and diagnosis read the instance's figures in ``server_samples``; this module answers
what those hide: each engine of a server that runs two or more, summarised over a window and
per chart bucket, so that one hot engine behind a calm instance mean shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import Engine, func, select

from infersight.core.window import Window
from infersight.storage.gpu_reads import bucket_epoch
from infersight.storage.tables import server_engine_samples, server_samples
from infersight.storage.timeseries import bucket_of

#: The most engines one answer lists (every engine of ~16 wide data-parallel servers).
MAX_ENGINE_ROWS: Final = 1024
#: An engine is "hot" when its mean KV-cache usage is this far above its server's mean.
HOT_MARGIN: Final = 0.1


@dataclass(frozen=True, slots=True)
class EngineSummary:
    """One engine over a window: means of its gauges, the highest KV usage scraped."""

    instance: str
    rank: str
    samples: int
    kv_cache_usage: float | None
    kv_cache_usage_max: float | None
    requests_running: float | None
    requests_waiting: float | None
    prefix_cache_hit_ratio: float | None
    hot: bool = False


@dataclass(frozen=True, slots=True)
class EngineBucket:
    """One engine's mean gauges over one chart bucket."""

    instance: str
    rank: str
    bucket: datetime
    kv_cache_usage: float | None
    requests_running: float | None
    requests_waiting: float | None


def _where(window: Window, instances: Sequence[str] | None) -> list[Any]:
    e = server_engine_samples.c
    where = [e.ts >= window.start, e.ts < window.end]
    if instances is not None:
        where.append(e.instance.in_(list(instances)))
    return where


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _rank_order(rank: str) -> tuple[int, str]:
    return (int(rank), "") if rank.isdigit() else (1 << 62, rank)


def engine_summaries(
    engine: Engine, window: Window, instances: Sequence[str] | None = None
) -> list[EngineSummary]:
    """Every engine with samples in ``window`` (of ``instances``, or all), by instance and
    rank; an engine is ``hot`` when its mean KV usage is ``HOT_MARGIN`` above its server's."""
    e = server_engine_samples.c
    query = (
        select(
            e.instance,
            e.rank,
            func.count(),
            func.avg(e.kv_cache_usage),
            func.max(e.kv_cache_usage),
            func.avg(e.requests_running),
            func.avg(e.requests_waiting),
            func.avg(e.prefix_cache_hit_ratio),
        )
        .where(*_where(window, instances))
        .group_by(e.instance, e.rank)
        .order_by(e.instance, e.rank)
        .limit(MAX_ENGINE_ROWS)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    found = [
        EngineSummary(
            instance=str(r[0]),
            rank=str(r[1]),
            samples=int(r[2]),
            kv_cache_usage=_float(r[3]),
            kv_cache_usage_max=_float(r[4]),
            requests_running=_float(r[5]),
            requests_waiting=_float(r[6]),
            prefix_cache_hit_ratio=_float(r[7]),
        )
        for r in rows
    ]
    out: list[EngineSummary] = []
    for instance in sorted({s.instance for s in found}):
        mine = sorted(
            (s for s in found if s.instance == instance), key=lambda s: _rank_order(s.rank)
        )
        usages = [s.kv_cache_usage for s in mine if s.kv_cache_usage is not None]
        mean = sum(usages) / len(usages) if usages else None
        for s in mine:
            hot = (
                mean is not None
                and s.kv_cache_usage is not None
                and s.kv_cache_usage >= mean + HOT_MARGIN
            )
            out.append(dataclasses.replace(s, hot=hot))
    return out


def engine_series(
    engine: Engine, window: Window, step_s: int, instances: Sequence[str] | None = None
) -> list[EngineBucket]:
    """Every engine's gauges in ``window`` averaged per ``step_s`` bucket, in time order
    (raw samples: they are kept as long as the instance's, and charted over that span)."""
    if step_s < 1:
        raise ValueError("step_s must be at least one second")
    e = server_engine_samples.c
    with engine.connect() as connection:
        at = bucket_of(connection, step_s, e.ts).label("at")
        query = (
            select(
                e.instance,
                e.rank,
                at,
                func.avg(e.kv_cache_usage),
                func.avg(e.requests_running),
                func.avg(e.requests_waiting),
            )
            .where(*_where(window, instances))
            .group_by(e.instance, e.rank, at)
        )
        rows = connection.execute(query).all()
    out = [
        EngineBucket(
            str(r[0]),
            str(r[1]),
            datetime.fromtimestamp(bucket_epoch(r[2]), UTC),
            *(_float(v) for v in r[3:]),
        )
        for r in rows
    ]
    return sorted(out, key=lambda b: (b.bucket, b.instance, _rank_order(b.rank)))


#: The figures ``server_summaries`` averages over a window (each scrape's figure covers the
#: interval before it; counter ratios are taken over that interval: ``core.samples``).
SERVER_FIGURES: Final = (
    "kv_cache_usage",
    "prefix_cache_hit_ratio",
    "spec_acceptance_rate",
    "spec_accept_length",
    "requests_running",
    "requests_waiting",
    "requests_deferred",
)


@dataclass(frozen=True, slots=True)
class ServerSummary:
    """One server over a window, from its scrapes: the ``/metrics`` dialect it spoke and the
    mean of each of its figures (``None``: never reported in the window — an engine that does
    not speculate has no acceptance figures)."""

    instance: str
    dialect: str
    samples: int
    figures: dict[str, float | None]

    @property
    def speculates(self) -> bool:
        return self.figures.get("spec_accept_length") is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "dialect": self.dialect,
            "samples": self.samples,
            **self.figures,
        }


def server_summaries(
    engine: Engine, window: Window, instances: Sequence[str] | None = None
) -> list[ServerSummary]:
    """Every server scraped in ``window`` (of ``instances``, or all), by instance: prefix-cache
    hit ratio, speculative-decoding acceptance and queues over the window."""
    s = server_samples.c
    where = [s.ts >= window.start, s.ts < window.end]
    if instances is not None:
        where.append(s.instance.in_(list(instances)))
    query = (
        select(
            s.instance,
            func.max(s.engine),
            func.count(),
            *(func.avg(s[name]) for name in SERVER_FIGURES),
        )
        .where(*where)
        .group_by(s.instance)
        .order_by(s.instance)
        .limit(MAX_ENGINE_ROWS)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [
        ServerSummary(
            instance=str(r[0]),
            dialect=str(r[1] or ""),
            samples=int(r[2]),
            figures={
                name: _float(value) for name, value in zip(SERVER_FIGURES, r[3:], strict=True)
            },
        )
        for r in rows
    ]
