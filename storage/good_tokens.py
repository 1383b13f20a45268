"""Good tokens per UTC day and series, counted once from raw rows and kept past their retention.

A good token belongs to a successful request whose TTFT and TPOT met a ``GoodRequest``'s limits
(``storage.cost``). Which requests are good depends on limits an operator may change, so it
cannot be rolled up at ingest; instead each closed day is counted exactly from raw rows once
per pair of limits and kept in ``good_token_days`` with the number of requests it was counted
over. A kept day is used while that number still equals the day rollup's request count for
the series (so late data, which changes the rollup, makes the day count again from raw rows);
the maintenance job counts the days retention is about to drop, for the limits of every stored
cost model and the default ones, so cost answers stay exact beyond raw retention.

``count`` answers a window: kept days where they are current, raw rows for the rest (one
grouped aggregate per range or day), and says whether every request was counted.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

from sqlalchemy import ColumnElement, Connection, Engine, and_, case, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError

from core.cost import GoodRequest
from core.records import GROUP_LABELS
from storage.tables import good_token_days, requests

log = logging.getLogger(__name__)
LabelKey = tuple[str, ...]
DAY: Final = timedelta(days=1)


def _good(good: GoodRequest) -> ColumnElement[bool]:
    r = requests.c
    return and_(
        r.status == "ok",
        or_(r.ttft_s.is_(None), r.ttft_s <= good.ttft_s),
        or_(r.tpot_s.is_(None), r.tpot_s <= good.tpot_s),
    )


def from_raw(
    connection: Connection,
    start: datetime,
    end: datetime,
    good: GoodRequest,
    instance: str | None = None,
) -> dict[LabelKey, tuple[int, int]]:
    """Per series: (raw requests, good tokens) over ``[start, end)``, in one grouped scan."""
    r = requests.c
    where = [r.start >= start, r.start < end]
    if instance is not None:
        where.append(r.instance == instance)
    tokens = func.coalesce(r.input_tokens, 0) + func.coalesce(r.output_tokens, 0)
    keys = [r[name] for name in GROUP_LABELS]
    query = (
        select(
            *keys, func.count(), func.coalesce(func.sum(case((_good(good), tokens), else_=0)), 0)
        )
        .where(*where)
        .group_by(*keys)
    )
    return {tuple(row[:4]): (int(row[4]), int(row[5])) for row in connection.execute(query)}


@dataclass
class Counted:
    """Good tokens per series over a window, and what ``count`` learnt on the way."""

    good_tokens: dict[LabelKey, int] = field(default_factory=lambda: defaultdict(int))
    raw_requests: int = 0
    """Requests counted (raw rows, or a kept day's count)."""
    to_keep: list[dict[str, Any]] = field(default_factory=list)
    """Days counted from complete raw rows, to store with ``keep``."""


def _kept(
    connection: Connection, good: GoodRequest, days: Iterable[datetime], instance: str | None
) -> dict[datetime, dict[LabelKey, tuple[int, int]]]:
    wanted = sorted(set(days))
    if not wanted:
        return {}
    k = good_token_days.c
    where = [
        k.ttft_s == good.ttft_s,
        k.tpot_s == good.tpot_s,
        k.day >= wanted[0],
        k.day <= wanted[-1],
    ]
    if instance is not None:
        where.append(k.instance == instance)
    query = select(k.day, *(k[n] for n in GROUP_LABELS), k.requests, k.good_tokens).where(*where)
    out: dict[datetime, dict[LabelKey, tuple[int, int]]] = defaultdict(dict)
    for row in connection.execute(query):
        out[row[0]][tuple(row[1:5])] = (int(row[5]), int(row[6]))
    return out


def count(
    connection: Connection,
    good: GoodRequest,
    day_requests: Mapping[datetime, Mapping[LabelKey, int]],
    ranges: Iterable[tuple[datetime, datetime]],
    instance: str | None = None,
) -> Counted:
    """Good tokens over whole ``day_requests`` days (with each day's rollup request counts per
    series) and over the other ``ranges`` of a window (always from raw rows)."""
    out = Counted()
    for start, end in ranges:
        for key, (n, tokens) in from_raw(connection, start, end, good, instance).items():
            out.raw_requests += n
            out.good_tokens[key] += tokens
    kept = _kept(connection, good, day_requests, instance)
    for day, rolled in sorted(day_requests.items()):
        stored = kept.get(day, {})
        if stored and all(stored.get(key, (-1, 0))[0] == n for key, n in rolled.items()):
            for key, (n, tokens) in stored.items():
                if key in rolled:
                    out.raw_requests += n
                    out.good_tokens[key] += tokens
            continue
        counted = from_raw(connection, day, day + DAY, good, instance)
        for key, (n, tokens) in counted.items():
            out.raw_requests += n
            out.good_tokens[key] += tokens
        if all(counted.get(key, (0, 0))[0] == n for key, n in rolled.items()):
            out.to_keep += _rows(good, day, counted)
    return out


def _rows(
    good: GoodRequest, day: datetime, counted: Mapping[LabelKey, tuple[int, int]]
) -> list[dict[str, Any]]:
    return [
        {
            "ttft_s": good.ttft_s,
            "tpot_s": good.tpot_s,
            "day": day,
            **dict(zip(GROUP_LABELS, key, strict=True)),
            "requests": n,
            "good_tokens": tokens,
        }
        for key, (n, tokens) in counted.items()
    ]


def keep(engine: Engine, rows: list[dict[str, Any]]) -> None:
    """Store counted days (replacing what was kept); a store that refuses writes (a read-only
    replica) only loses the shortcut, so the failure is logged, not raised."""
    if not rows:
        return
    postgres = engine.dialect.name == "postgresql"
    insert = (pg_insert if postgres else sqlite_insert)(good_token_days)
    statement = insert.on_conflict_do_update(
        index_elements=list(good_token_days.primary_key.columns),
        set_={"requests": insert.excluded.requests, "good_tokens": insert.excluded.good_tokens},
    )
    try:
        with engine.begin() as connection:
            connection.execute(statement, sorted(rows, key=_row_key))
    except DBAPIError as exc:
        log.warning("could not keep good-token days: %s", exc.orig)


def _row_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    return (row["ttft_s"], row["tpot_s"], row["day"], *(row[n] for n in GROUP_LABELS))


def keep_days(engine: Engine, goods: Iterable[GoodRequest], days: Iterable[date]) -> int:
    """Count ``days`` from raw rows for each pair of limits not kept yet (the maintenance job,
    before retention drops them). Returns the number of (limits, day) pairs counted."""
    counted = 0
    limits = sorted({(g.ttft_s, g.tpot_s) for g in goods})
    for day in sorted(set(days)):
        start = datetime.combine(day, time(), tzinfo=UTC)
        rows: list[dict[str, Any]] = []
        with engine.connect() as connection:
            for ttft_s, tpot_s in limits:
                good = GoodRequest(ttft_s, tpot_s)
                if _kept(connection, good, [start], None):
                    continue
                raw = from_raw(connection, start, start + DAY, good)
                if raw:
                    rows += _rows(good, start, raw)
                    counted += 1
        keep(engine, rows)
    return counted
