"""The purchasing advice as the Cost and Scaling pages show it (template
``_purchasing.html``): ``service.purchasing`` over the page's range when it spans a week or
more, else over the 28 days that end now (a day says nothing about what to reserve), with
the hours of week in the report time zone."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from infersight.api.context import AppContext, money_results
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.formatting import money
from infersight.core.purchasing import MAX_HOURS
from infersight.core.window import Resolution, Window
from infersight.service.cost_view import unit_cost_text
from infersight.service.purchasing import (
    ADVICE_DAYS,
    Purchasing,
    purchasing,
    purchasing_dict,
    unit_cost,
    with_unit_cost,
)
from infersight.service.snapshots import digest

#: Page ranges shorter than this are advised on the last ``FALLBACK`` instead.
MIN_SPAN: Final = timedelta(days=7)
FALLBACK: Final = timedelta(days=ADVICE_DAYS)


def _window(ctx: Context) -> tuple[Window, str]:
    span = ctx.window.end - ctx.window.start
    if span < MIN_SPAN:
        return Window(
            ctx.now - FALLBACK, ctx.now
        ), "the last 28 days (ranges under a week are too short to buy for)"
    longest = timedelta(hours=MAX_HOURS)
    if span > longest:
        return Window(ctx.window.end - longest, ctx.window.end), "the last 92 days of the range"
    return ctx.window, "this range"


def _judged(app: AppContext, ctx: Context) -> tuple[Purchasing, datetime] | None:
    """The money job's last advice (``service.budgets.MoneyAlerts``) while it is fresh, for a
    range too short to buy for, in the report time zone: purchases are planned from a month
    of hours, and those hours change once an hour, so the job's judgement (at most one
    interval old; returned with the time it was judged at) stands for the page's instead of
    reading 28 days of GPU hours and their cost per view."""
    if ctx.window.end - ctx.window.start >= MIN_SPAN:
        return None
    recent, _ = money_results(app)
    if recent is None or recent.purchasing is None:
        return None
    if recent.purchasing.advice.timezone != app.settings.report_timezone:
        return None
    return recent.purchasing, recent.at


def _key(app: AppContext, *parts: object) -> tuple[object, ...]:
    """A memo key: ``parts`` under the cost model in use and the report time zone."""
    return (*parts, digest(app.cost_model()), app.settings.report_timezone)


def _hours_advice(app: AppContext, ctx: Context, window: Window) -> tuple[Purchasing, datetime]:
    """The advice over ``window``'s whole hours (no cost per million yet) and when it was
    judged: computed by this view, or by an earlier one while as fresh as the money job's
    judgements (``api.hourly``). The advice reads only whole hours that have ended, so a
    range ending now asks the same question until the next hour starts. An empty answer
    is not kept: it may say the hour in progress already holds data."""
    start, end = Resolution.HOUR.ceil(window.start), Resolution.HOUR.floor(window.end)
    model = app.cost_model()

    def compute() -> Purchasing:
        return purchasing(
            app.store,
            model,
            window,
            finest_for=app.retention.finest_for,
            now=ctx.now,
            timezone=app.settings.report_timezone,
            read_unit_cost=False,
        )

    if end <= start:
        return compute(), ctx.now
    return app.hourly.get(
        _key(app, "advice", start, end),
        ctx.now,
        app.jobs.reuse_age("money"),
        compute,
        keep=lambda answer: not answer.advice.empty,
    )


def _unit_cost(app: AppContext, ctx: Context, answer: Purchasing) -> Decimal | None:
    """The cost per million tokens over the hours ``answer`` advises on, kept like the
    advice (the same whole hours, priced by the same model)."""
    a = answer.advice
    value, _ = app.hourly.get(
        _key(app, "unit cost", a.start, a.end),
        ctx.now,
        app.jobs.reuse_age("money"),
        lambda: (
            unit_cost(
                app.store,
                app.cost_model(),
                a,
                finest_for=app.retention.finest_for,
                now=ctx.now,
            ),
        ),
    )
    return value[0]


def section(
    app: AppContext, ctx: Context, per_million: tuple[Window, Decimal | None] | None = None
) -> dict[str, Any]:
    """What ``_purchasing.html`` renders. ``per_million``: a page's unfiltered cost per
    million tokens and the window it is for, used when that is the window advised on (the
    Cost page's own figure, instead of reading the range's cost twice)."""
    window, over = _window(ctx)
    known = per_million is not None and per_million[0] == window
    judged = _judged(app, ctx)
    if judged is not None:  # the money job's advice over the same last 28 days
        answer, at = judged
    else:
        answer, at = _hours_advice(app, ctx, window)
        if known and per_million is not None:
            answer = with_unit_cost(answer, per_million[1])
        elif not answer.advice.empty:
            answer = with_unit_cost(answer, _unit_cost(app, ctx, answer))
    if at < ctx.now:
        over += f", as judged at {at:%H:%M:%S} UTC"
    if ctx.filters:
        over += " for the whole fleet (the filters do not apply)"
    body = purchasing_dict(answer)
    a = answer.advice
    currency = a.currency
    if a.empty:
        hint = body["empty"]
        return {"empty": True, "over": over, "text": hint["text"], "next": hint["next_command"]}
    split = body["split"]
    fill = body["fill"]
    cells = [
        (
            c.hour_of_week,
            c.utilisation,
            f"{c.label} ({a.timezone}): {c.gpu_hours:.1f} GPU-h, "
            + ("no utilisation reported" if c.utilisation is None else f"{c.utilisation:.0%} busy")
            + f", idle {money(c.idle_cost, currency)}",
        )
        for c in a.cells
    ]
    return {
        "empty": False,
        "over": over,
        "start": a.start,
        "end": a.end,
        "hours": a.hours,
        "currency": currency,
        "reserved_gpus": a.reserved_gpus,
        "coverage": a.coverage,
        "gpu_hours": float(a.gpu_hours),
        "split_cost": money(a.split_cost, currency),
        "on_demand_cost": money(a.on_demand_cost, currency),
        "saving": money(a.saving, currency),
        "saving_share": a.saving_share,
        "pools": [
            {
                **p,
                "on_demand": money(pool.pool.on_demand_per_hour, currency),
                "reserved": money(pool.pool.reserved_per_hour, currency),
                "split": money(pool.split.split_cost, currency),
                "all_on_demand": money(pool.split.on_demand_cost, currency),
                "saved": money(pool.split.saving, currency),
            }
            for p, pool in zip(split["pools"], a.pools, strict=True)
        ],
        "unpriced": list(a.unpriced),
        "floor": a.floor,
        "timezone": a.timezone,
        "windows": [
            {**w, "cost": money(window.idle_cost, currency)}
            for w, window in zip(body["idle"]["windows"], a.windows, strict=True)
        ],
        "idle_gpu_hours": a.idle_gpu_hours,
        "idle_cost": money(a.idle_cost, currency),
        "grid": svg.week_grid(
            cells, a.floor, label=f"GPU utilisation by hour of week ({a.timezone})"
        ),
        "fill": fill,
        "per_million_before": unit_cost_text(fill["cost_per_million_tokens_before"], currency),
        "per_million_after": unit_cost_text(fill["cost_per_million_tokens_after"], currency),
        "warnings": body["warnings"],
        "assumptions": body["assumptions"],
    }
