"""Good tokens per UTC hour and day and series, counted once from raw rows and kept past retention.

A good token belongs to a successful request whose TTFT, TPOT and end-to-end latency met its
series' ``GoodLimits`` (``core.goodput``: the latency SLOs covering the series, else the cost
model's ``goodRequest``). Which requests are good depends on limits an operator may change, so
it cannot be rolled up at ingest; instead each closed hour and day is counted exactly from raw
rows once per set of limits, for the series held to them, and kept in ``good_token_counts``
(keyed by the three limits, 0 for none) with the number of requests it was counted over. A kept
bucket is used while that number still equals the request rollup's count for the series in the
same bucket (late data changes the rollup, and the bucket is counted again from raw rows). The
maintenance job counts every closed day and its hours for the limits each series is held to
(under the stored SLOs, and under every stored cost model's and the default limits for series
no SLO covers), so cost answers stay exact beyond raw retention: a window reads kept days in its
middle, kept hours at its edges, and raw rows only for the minutes at its two ends (which
rollups serve from raw rows too). An SLO changed later re-measures the past: hours still in raw
retention are counted again under the new limits; older ones, never counted under them, make
the answer partial.

``count`` answers a window and says how many requests it counted, for the caller to compare with
the rollups' total.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import (
    CompoundSelect,
    Connection,
    Double,
    Engine,
    Select,
    and_,
    bindparam,
    case,
    func,
    literal_column,
    or_,
    select,
    union_all,
)
from sqlalchemy.exc import DBAPIError

from infersight.core.goodput import GoodLimits, GoodPolicy
from infersight.core.records import GROUP_LABELS
from infersight.core.window import Resolution
from infersight.storage.sql import insert_for, span_where, spans_values
from infersight.storage.tables import good_token_counts, request_rollups, requests

log = logging.getLogger(__name__)
LabelKey = tuple[str, ...]
#: A kept bucket: (resolution, bucket start).
Bucket = tuple[Resolution, datetime]
KEPT: Final = (Resolution.HOUR, Resolution.DAY)
#: The most spans one statement of ``from_raw_spans`` reads (a bounded statement).
SPANS_PER_READ: Final = 32


def from_raw(
    connection: Connection,
    start: datetime,
    end: datetime,
    good: GoodLimits,
    instance: str | None = None,
) -> dict[LabelKey, tuple[int, int]]:
    """Per series: (raw requests, good tokens) over ``[start, end)``, in one grouped scan."""
    return from_raw_spans(connection, [(start, end)], good, instance)[0]


def from_raw_spans(
    connection: Connection,
    spans: Sequence[tuple[datetime, datetime]],
    good: GoodLimits,
    instance: str | None = None,
) -> list[dict[LabelKey, tuple[int, int]]]:
    """``from_raw`` of each of ``spans``, from one statement per ``SPANS_PER_READ`` spans: a
    ``UNION ALL`` of the grouped scans it replaces, each tagged with its span."""
    limits = good.items()
    limited = tuple(name for name, _ in limits)
    n = len(GROUP_LABELS)
    out: list[dict[LabelKey, tuple[int, int]]] = [{} for _ in spans]
    for first in range(0, len(spans), SPANS_PER_READ):
        chunk = spans[first : first + SPANS_PER_READ]
        values = {f"limit_{name}": value for name, value in limits} | spans_values(chunk)
        if instance is not None:
            values["instance"] = instance
        query = _from_raw_query(len(chunk), limited, instance is not None)
        for row in connection.execute(query, values).all():
            out[first + row[0]][tuple(row[1 : n + 1])] = (int(row[n + 1]), int(row[n + 2]))
    return out


@lru_cache(maxsize=128)
def _from_raw_query(
    parts: int, limited: tuple[str, ...], one_instance: bool
) -> CompoundSelect[Any]:
    """``from_raw_spans``' statement for ``parts`` spans (``lo_K``, ``hi_K``) and the fields
    ``limited`` holds to a limit, built once per shape with the spans, the limits and the
    instance as parameters (building and keying it again for every read cost more CPU than
    running it)."""
    r = requests.c
    good = and_(
        r.status == "ok",
        *(or_(r[name].is_(None), r[name] <= bindparam(f"limit_{name}")) for name in limited),
    )
    tokens = func.coalesce(r.input_tokens, 0) + func.coalesce(r.output_tokens, 0)
    keys = [r[name] for name in GROUP_LABELS]
    reads = []
    for part in range(parts):
        where = [span_where(r.start, part)]
        if one_instance:
            where.append(r.instance == bindparam("instance"))
        reads.append(
            select(
                literal_column(str(part)).label("part"),
                *keys,
                func.count(),
                func.coalesce(func.sum(case((good, tokens), else_=0)), 0),
            )
            .where(*where)
            .group_by(*keys)
        )
    return union_all(*reads)


@dataclass
class Counted:
    """Good tokens per series over a window, and what ``count`` learnt on the way."""

    good_tokens: dict[LabelKey, int] = field(default_factory=lambda: defaultdict(int))
    requests: int = 0
    """Requests counted (raw rows, or a kept bucket's count)."""
    to_keep: list[dict[str, Any]] = field(default_factory=list)
    """Buckets counted from complete raw rows, to store with ``keep``."""

    def add(
        self, counted: Mapping[LabelKey, tuple[int, int]], only: Iterable[LabelKey] = ()
    ) -> None:
        wanted = set(only)
        for key, (n, tokens) in counted.items():
            if not wanted or key in wanted:
                self.requests += n
                self.good_tokens[key] += tokens


def _kept(
    connection: Connection, good: GoodLimits, buckets: Iterable[Bucket], instance: str | None
) -> dict[Bucket, dict[LabelKey, tuple[int, int]]]:
    wanted = sorted(buckets)
    if not wanted:
        return {}
    starts = [start for _, start in wanted]
    ttft, tpot, e2e = good.key
    values: dict[str, Any] = {
        "ttft": ttft,
        "tpot": tpot,
        "e2e": e2e,
        "resolutions": sorted({r.value for r, _ in wanted}),
        "first": min(starts),
        "last": max(starts),
    }
    if instance is not None:
        values["instance"] = instance
    out: dict[Bucket, dict[LabelKey, tuple[int, int]]] = defaultdict(dict)
    n = len(GROUP_LABELS)
    rows = connection.execute(_kept_query(instance is not None), values).all()
    for resolution, bucket, *rest in rows:
        out[(Resolution(resolution), bucket)][tuple(rest[:n])] = (int(rest[n]), int(rest[n + 1]))
    return out


@lru_cache(maxsize=4)
def _kept_query(one_instance: bool) -> Select[Any]:
    """``_kept``'s statement, built once per shape as ``_from_raw_query``."""
    k = good_token_counts.c
    where = [
        k.ttft_s == bindparam("ttft", type_=Double()),
        k.tpot_s == bindparam("tpot", type_=Double()),
        k.e2e_s == bindparam("e2e", type_=Double()),
        k.resolution.in_(bindparam("resolutions", expanding=True)),
        k.bucket >= bindparam("first"),
        k.bucket <= bindparam("last"),
    ]
    if one_instance:
        where.append(k.instance == bindparam("instance"))
    return select(
        k.resolution, k.bucket, *(k[n] for n in GROUP_LABELS), k.requests, k.good_tokens
    ).where(*where)


def count(
    connection: Connection,
    good: GoodLimits,
    rolled: Mapping[Bucket, Mapping[LabelKey, int]],
    ranges: Iterable[tuple[datetime, datetime]],
    instance: str | None = None,
    series: Iterable[LabelKey] | None = None,
) -> Counted:
    """Good tokens over the hour and day buckets of ``rolled`` (with each bucket's rollup
    request counts per series) and over the other ``ranges`` of a window (raw rows), of the
    ``series`` held to ``good`` (all when ``None``)."""
    only = None if series is None else set(series)

    def mine(counted: Mapping[LabelKey, tuple[int, int]]) -> dict[LabelKey, tuple[int, int]]:
        return {k: v for k, v in counted.items() if only is None or k in only}

    out = Counted()
    for counted in from_raw_spans(connection, list(ranges), good, instance):
        out.add(mine(counted))
    rolled = {
        bucket: {k: n for k, n in counts.items() if only is None or k in only}
        for bucket, counts in rolled.items()
    }
    rolled = {bucket: counts for bucket, counts in rolled.items() if counts}
    kept = _kept(connection, good, rolled, instance)
    buckets = sorted(rolled.items())
    # The buckets no kept count stands for are counted from raw rows, all in one statement.
    stale = [bucket for bucket, counts in buckets if not _stands(kept.get(bucket, {}), counts)]
    spans = [(start, start + timedelta(seconds=r.seconds)) for r, start in stale]
    recounted = dict(zip(stale, from_raw_spans(connection, spans, good, instance), strict=True))
    for bucket, counts in buckets:
        if bucket not in recounted:
            out.add(kept[bucket], counts)
            continue
        counted = mine(recounted[bucket])
        out.add(counted)
        if all(counted.get(key, (0, 0))[0] == n for key, n in counts.items()):
            out.to_keep += _rows(good, bucket, counted)
    return out


def _stands(stored: Mapping[LabelKey, tuple[int, int]], counts: Mapping[LabelKey, int]) -> bool:
    """Whether a kept bucket stands for the rollups' ``counts`` (the same requests per series)."""
    return bool(stored) and all(stored.get(key, (-1, 0))[0] == n for key, n in counts.items())


def _rows(
    good: GoodLimits, bucket: Bucket, counted: Mapping[LabelKey, tuple[int, int]]
) -> list[dict[str, Any]]:
    ttft, tpot, e2e = good.key
    return [
        {
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "resolution": bucket[0].value,
            "bucket": bucket[1],
            **dict(zip(GROUP_LABELS, key, strict=True)),
            "requests": n,
            "good_tokens": tokens,
        }
        for key, (n, tokens) in counted.items()
    ]


def keep(engine: Engine, rows: list[dict[str, Any]]) -> None:
    """Store counted buckets (replacing what was kept); a store that refuses writes (a
    read-only replica) only loses the shortcut, so the failure is logged, not raised."""
    if not rows:
        return
    insert = insert_for(engine, good_token_counts)
    statement = insert.on_conflict_do_update(
        index_elements=list(good_token_counts.primary_key.columns),
        set_={"requests": insert.excluded.requests, "good_tokens": insert.excluded.good_tokens},
    )
    try:
        with engine.begin() as connection:
            connection.execute(statement, sorted(rows, key=_row_key))
    except DBAPIError as exc:
        log.warning("could not keep good-token counts: %s", exc.orig)


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    keys = ("ttft_s", "tpot_s", "e2e_s", "resolution", "bucket", *GROUP_LABELS)
    return tuple(row[name] for name in keys)


def _series_of_day(connection: Connection, start: datetime) -> list[LabelKey]:
    """The series with requests on the day from ``start``, from its day rollups (one row
    each: the hourly maintenance run need not scan a day of raw rows to learn them)."""
    u = request_rollups.c
    query = select(*(u[name] for name in GROUP_LABELS)).where(
        u.resolution == Resolution.DAY.value, u.bucket == start
    )
    return [tuple(row) for row in connection.execute(query)]


def held_to(
    policies: Iterable[GoodPolicy], series: Iterable[LabelKey]
) -> dict[GoodLimits, set[LabelKey]]:
    """The series held to each set of limits under any of ``policies``."""
    out: dict[GoodLimits, set[LabelKey]] = defaultdict(set)
    keys = list(series)
    for policy in policies:
        for key in keys:
            out[policy.rule_for(dict(zip(GROUP_LABELS, key, strict=True))).limits].add(key)
    return out


def keep_days(engine: Engine, policies: Iterable[GoodPolicy], days: Iterable[date]) -> int:
    """Count each of ``days`` and its hours from raw rows, for each set of limits its series
    are held to under ``policies`` and not kept yet for them (the maintenance job). Returns
    the (limits, day) pairs counted."""
    counted = 0
    policies = list(policies)
    for day in sorted(set(days)):
        start = datetime.combine(day, time(), tzinfo=UTC)
        rows: list[dict[str, Any]] = []
        with engine.connect() as connection:
            groups = held_to(policies, _series_of_day(connection, start))
            for good, series in sorted(groups.items(), key=lambda g: g[0].key):
                kept = _kept(connection, good, [(Resolution.DAY, start)], None)
                if series <= set(kept.get((Resolution.DAY, start), {})):
                    continue
                whole = from_raw(connection, start, start + timedelta(days=1), good)
                whole = {k: v for k, v in whole.items() if k in series}
                if not whole:
                    continue
                rows += _rows(good, (Resolution.DAY, start), whole)
                hours = [
                    (start + timedelta(hours=h), start + timedelta(hours=h + 1)) for h in range(24)
                ]
                for (at, _), part in zip(
                    hours, from_raw_spans(connection, hours, good), strict=True
                ):
                    rows += _rows(good, (Resolution.HOUR, at), {
                        k: v for k, v in part.items() if k in series
                    })  # fmt: skip
                counted += 1
        keep(engine, rows)
    return counted
