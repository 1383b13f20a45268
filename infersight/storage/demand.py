"""A model's recorded demand per minute of one day, for the scaling backtest's ``--from-store``.

``day_minutes`` reads the request rollups: the minute buckets of the day (summed over
instances, tenants and priorities), else — where the minute rollups have been retained away —
the hour buckets spread evenly over their minutes. ``recorded_demand`` returns that day and
the same day 1, 2, … weeks earlier (the recommender's same-time-of-day history), and raises
``NotFound`` naming the model and the day when the day itself holds no request, so that a
backtest never replays an empty store as a day of zero demand. Every read is bounded by its
day (at most 1,440 minute buckets per instance) and by ``MAX_ROWS``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

from sqlalchemy import Engine, func, select

from infersight.core.errors import InvalidInput, NotFound
from infersight.core.window import Resolution
from infersight.storage.tables import request_rollups

MINUTES_PER_DAY: Final = 1440
MAX_ROWS: Final = 200_000
MAX_WEEKS: Final = 12


@dataclass(frozen=True, slots=True)
class RecordedDemand:
    model: str
    day: date
    minutes: tuple[float, ...]  # requests in each minute of the day, from midnight UTC
    history: tuple[tuple[float, ...], ...]  # the same day 1, 2, … weeks earlier (with traffic)
    weeks_without_data: tuple[int, ...]  # which earlier weeks held no request

    @property
    def requests(self) -> float:
        return sum(self.minutes)


def _counts(engine: Engine, model: str, start: datetime, resolution: Resolution) -> list[float]:
    r = request_rollups.c
    end = start + timedelta(days=1)
    query = (
        select(r.bucket, func.sum(r.requests))
        .where(
            r.resolution == resolution.value,
            r.model == model,
            r.bucket >= start,
            r.bucket < end,
        )
        .group_by(r.bucket)
        .limit(MAX_ROWS)
    )
    out = [0.0] * MINUTES_PER_DAY
    width = resolution.seconds // 60
    with engine.connect() as connection:
        for bucket, n in connection.execute(query):
            at = bucket if bucket.tzinfo else bucket.replace(tzinfo=UTC)
            first = int((at - start).total_seconds() // 60)
            for m in range(max(0, first), min(MINUTES_PER_DAY, first + width)):
                out[m] += float(n or 0) / width
    return out


def day_minutes(engine: Engine, model: str, day: date) -> list[float]:
    """Requests per minute of ``model`` on ``day`` (UTC): minute rollups, else hour rollups."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    minutes = _counts(engine, model, start, Resolution.MINUTE)
    if any(minutes):
        return minutes
    return _counts(engine, model, start, Resolution.HOUR)


def recorded_demand(engine: Engine, model: str, day: date, weeks: int = 4) -> RecordedDemand:
    """``model``'s day and its ``weeks`` earlier same weekdays; ``NotFound`` without traffic."""
    if not model:
        raise InvalidInput("a model name is needed")
    if not 0 <= weeks <= MAX_WEEKS:
        raise InvalidInput(f"weeks must be in [0, {MAX_WEEKS}]", details={"weeks": weeks})
    minutes = day_minutes(engine, model, day)
    if not any(minutes):
        raise NotFound(
            f"the store holds no request of model {model!r} on {day.isoformat()} "
            "(no minute or hour rollups)",
            details={"model": model, "day": day.isoformat()},
        )
    history: list[tuple[float, ...]] = []
    empty: list[int] = []
    for k in range(1, weeks + 1):
        week = day_minutes(engine, model, day - timedelta(weeks=k))
        if any(week):
            history.append(tuple(week))
        else:
            empty.append(k)
    return RecordedDemand(model, day, tuple(minutes), tuple(history), tuple(empty))


def busiest_models(engine: Engine, day: date, limit: int = 20) -> Sequence[str]:
    """The models with requests on ``day``, busiest first (for a helpful error message)."""
    r = request_rollups.c
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    query = (
        select(r.model, func.sum(r.requests).label("n"))
        .where(r.bucket >= start, r.bucket < start + timedelta(days=1))
        .group_by(r.model)
        .order_by(func.sum(r.requests).desc())
        .limit(limit)
    )
    with engine.connect() as connection:
        return [str(m) for m, _ in connection.execute(query)]
