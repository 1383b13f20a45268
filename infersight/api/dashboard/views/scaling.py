"""The Scaling page: every model's newest replica recommendation (observed and desired
instances, driver, reason, staleness; one per pool, prefill and decode, for a disaggregated
model), and per model (and pool) over the range: desired against observed
instances (``service.scaling.history``), demand against the recorded forecast with the forecast
band — the lowest to the highest request rate at the same time of week in the policy's
``history_weeks`` previous weeks — and the reason of the latest change of the desired count.

The reserved / on-demand split and the idle windows (#17's purchasing advice,
``api.dashboard.purchasing``) fill the template's ``purchasing`` block (section
``#purchasing``), as on the Cost page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard import purchasing, shared
from infersight.api.dashboard.context import Context
from infersight.core.query import Selector
from infersight.core.scaling import Recommendation
from infersight.core.window import Window
from infersight.service.scaling import MAX_HISTORY_WEEKS, choose_policy, current, policies
from infersight.service.scaling import history as recommendations

NAME: Final = "scaling"
TITLE: Final = "Scaling"
DEFAULT_RANGE: Final = "24h"
#: The most models charted on one page (the table lists every one).
MAX_CHARTED: Final = 12
WEEK: Final = timedelta(days=7)


def page(app: AppContext, ctx: Context, _query: dict[str, str]) -> dict[str, Any]:
    return scaling(app, ctx)


def _per_bucket(
    history: Sequence[Recommendation], step_s: int, value: str
) -> list[tuple[datetime, float | None]]:
    """The newest value of ``value`` in each ``step_s`` bucket (a step line)."""
    out: dict[datetime, float | None] = {}
    for rec in history:
        at = datetime.fromtimestamp(rec.at // step_s * step_s, UTC)
        got = getattr(rec, value)
        out[at] = None if got is None else float(got)
    return sorted(out.items())


def _demand(
    app: AppContext, ctx: Context, model: str, window: Window, shift: timedelta
) -> dict[datetime, float]:
    """Requests per second of ``model`` per chart bucket of ``window``, moved by ``shift``."""
    shifted = dataclasses.replace(ctx, window=window)
    step = shared.chart_step(app, shifted)
    series = shared.request_series(app, window, step, Selector(model=model))
    buckets = series.get((), {})
    out: dict[datetime, float] = {}
    for at, counts in buckets.items():
        out[at + shift] = counts.requests / shared.bucket_span_s(at, step, window)
    return out


def _band(app: AppContext, ctx: Context, model: str, weeks: int) -> tuple[svg.Band | None, int]:
    """The lowest and highest rate per bucket over the previous ``weeks`` weeks that saw the
    model (a bucket without requests in such a week counts 0), and how many weeks did."""
    per_week = _weeks(app, ctx, model, weeks)
    if not per_week:
        return None, 0
    times = sorted({at for week in per_week for at in week})
    points = [
        (
            at,
            min(week.get(at, 0.0) for week in per_week),
            max(week.get(at, 0.0) for week in per_week),
        )
        for at in times
    ]
    name = f"same time of week, previous {len(per_week)} week{'s' if len(per_week) > 1 else ''}"
    return svg.Band(name, points), len(per_week)


def _weeks(app: AppContext, ctx: Context, model: str, weeks: int) -> list[dict[datetime, float]]:
    """The previous ``weeks`` weeks' rates per bucket, each moved onto this range (the weeks
    with requests only, newest first). The weeks with the same chart buckets are read
    together, once over the span they cover (a 30-day range: one read instead of four;
    retention may give older weeks coarser rollups, so a 24-hour range reads its newest week
    apart from the older ones).

    Read together, the span's buckets are whole where a week's range cuts one: a week's first
    and last buckets give the rate over the whole bucket at that time of week, where a read
    of the week alone gave the rate over the part inside its range (the band compares times
    of week, not ranges)."""
    windows = {
        k: Window(ctx.window.start - k * WEEK, ctx.window.end - k * WEEK)
        for k in range(1, weeks + 1)
    }
    by_step: dict[shared.ChartStep, list[int]] = {}
    for k, window in windows.items():
        step = shared.chart_step(app, dataclasses.replace(ctx, window=window))
        by_step.setdefault(step, []).append(k)
    found: dict[int, dict[datetime, float]] = {}
    for step, ks in by_step.items():
        if WEEK.total_seconds() % step.seconds:  # a week's buckets are not the span's
            for k in ks:
                found[k] = _demand(app, ctx, model, windows[k], k * WEEK)
            continue
        span = Window(windows[max(ks)].start, windows[min(ks)].end)
        series = shared.request_series(app, span, step, Selector(model=model)).get((), {})
        rates = {at: c.requests / shared.bucket_span_s(at, step, span) for at, c in series.items()}
        for k in ks:
            first, last = step.floor(windows[k].start), windows[k].end
            found[k] = {at + k * WEEK: r for at, r in rates.items() if first <= at < last}
    return [found[k] for k in sorted(found) if found[k]]


def _latest_change(history: Sequence[Recommendation]) -> Recommendation | None:
    """The newest recommendation whose desired count differs from the one before it."""
    for newer, older in zip(reversed(history), list(reversed(history))[1:], strict=False):
        if newer.desired != older.desired:
            return newer
    return None


def _model_charts(
    app: AppContext, ctx: Context, model: str, pool: str, weeks: int
) -> dict[str, Any]:
    history = recommendations(app.store, model, ctx.window.start, ctx.window.end, pool)
    name = f"{model} ({pool} pool)" if pool else model
    demand_all = _demand(app, ctx, model, ctx.window, timedelta(0))
    # The axis starts where this model's data does: an hour of recommendations on a 24-hour
    # axis was squashed against its right edge, in 24-hour buckets.
    start = _axis_start(ctx.window, [rec.at for rec in history], list(demand_all))
    shown = ctx
    if start > ctx.window.start:
        shown = dataclasses.replace(ctx, window=Window(start, ctx.window.end))
        demand_all = _demand(app, shown, model, shown.window, timedelta(0))
    band, band_weeks = _band(app, shown, model, weeks)
    demand = sorted(demand_all.items())
    step_s = svg.bucket_seconds(shown.window.seconds)
    instances = svg.line_chart(
        [
            svg.Series("desired", _per_bucket(history, step_s, "desired")),
            svg.Series("observed", _per_bucket(history, step_s, "observed")),
        ],
        start,
        ctx.window.end,
        svg.unit("inst."),
        label=f"desired and observed instances of {name}",
        empty="no recommendation in this range",
    )
    forecast = svg.line_chart(
        [
            svg.Series("demand", [(at, v) for at, v in demand]),
            svg.Series("forecast (recorded)", _per_bucket(history, step_s, "forecast_rps")),
        ],
        start,
        ctx.window.end,
        svg.unit("req/s"),
        label=f"demand and forecast of {name}",
        empty="no requests or forecast in this range",
        band=band,
    )
    change = _latest_change(history)
    return {
        "model": model,
        "pool": pool,
        "instances_chart": instances,
        "forecast_chart": forecast,
        "band_weeks": band_weeks,
        "change": change,
        "change_at": None if change is None else datetime.fromtimestamp(change.at, UTC),
        "recommendations": len(history),
        "since": start if start > ctx.window.start else None,
    }


def _axis_start(
    window: Window, recommended: Sequence[float], demand: Sequence[datetime]
) -> datetime:
    """Where a model's charts start: the range's start, or, when its data (recommendations,
    requests) begins in the last half of the range, a twentieth of the range before it,
    rounded down to a whole ten minutes."""
    first = [datetime.fromtimestamp(min(recommended), UTC)] if recommended else []
    first += [min(demand)] if demand else []
    if not first:
        return window.start
    earliest = min(first)
    span = window.end - window.start
    if earliest - window.start < span / 2:
        return window.start
    at = earliest - span / 20
    return max(window.start, at - timedelta(seconds=at.timestamp() % 600))


def scaling(app: AppContext, ctx: Context) -> dict[str, Any]:
    stored = policies(app.store)
    found = [
        c
        for c in current(app.store, ctx.now)
        if ctx.selector.model is None or c.recommendation.model == ctx.selector.model
    ]
    rows = [
        {
            **c.to_dict(),
            "at_time": datetime.fromtimestamp(c.recommendation.at, UTC),
        }
        for c in found
    ]
    models = [
        _model_charts(
            app,
            ctx,
            c.recommendation.model,
            c.recommendation.pool,
            min(choose_policy(stored, c.recommendation.model).history_weeks, MAX_HISTORY_WEEKS),
        )
        for c in found[:MAX_CHARTED]
    ]
    return {
        "rows": rows,
        "models": models,
        "more_models": max(len(found) - MAX_CHARTED, 0),
        "purchasing": purchasing.section(app, ctx),
    }
