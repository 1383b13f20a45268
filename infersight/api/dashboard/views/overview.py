"""The Overview page: every SLO with its status, the firing incidents, the fleet's
throughput and the cost per million tokens over the range.

SLO statuses come from ``service.slos`` (the same figures as ``GET /api/v1/slos``); the fleet's
charts from rollup buckets (``storage.timeseries``); the cost from ``storage.cost`` under the
cost model in use (long ranges are priced from GPU rollups and kept good-token counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.formatting import money, short_model
from infersight.api.dashboard.shared import (
    bucket_span_s,
    bucket_times,
    chart_step,
    covered_s,
    request_series,
)
from infersight.core.cost import CostResult
from infersight.core.slo import GoodputUnit, SliKind, SloSpec
from infersight.core.window import format_duration
from infersight.service.cost_view import unit_cost_text
from infersight.service.incidents import annotate
from infersight.service.slos import good_token_cost, with_status
from infersight.storage import cost as cost_store
from infersight.storage import incidents, queries, slo_store

NAME: Final = "overview"
TITLE: Final = "Overview"
DEFAULT_RANGE: Final = "1h"


def page(app: AppContext, ctx: Context, _query: dict[str, str]) -> dict[str, Any]:
    return {**overview(app, ctx), "cost": cost_summary(app, ctx)}


def sli_text(spec: SloSpec) -> str:
    if spec.sli.kind is SliKind.AVAILABILITY:
        return "requests succeed"
    if spec.sli.kind is SliKind.GOODPUT:
        return goodput_text(spec)
    assert spec.sli.threshold_s is not None
    return f"{(spec.sli.metric or '').upper()} ≤ {svg.seconds(spec.sli.threshold_s)}"


def goodput_text(spec: SloSpec) -> str:
    """``goodput: TTFT ≤ 2 s and TPOT ≤ 100 ms``: the targets that hold together (the row
    says what an event is: ``unit``)."""
    joint = " and ".join(f"{m.upper()} ≤ {svg.seconds(s)}" for m, s in spec.sli.targets)
    return f"goodput: {joint}"


def slo_rows(app: AppContext, now: datetime) -> list[dict[str, Any]]:
    specs = slo_store.list_slos(app.engine)
    # The evaluation job's last cycle while it is at most one interval old (the job runs in
    # this process); else counted here.
    found = with_status(
        app.engine,
        specs,
        app.policy,
        now,
        app.retention.finest_for,
        recent=app.evaluator.latest,
        max_age=timedelta(seconds=app.settings.evaluation_interval_s),
    )
    return [
        {
            "name": v.spec.name,
            "description": v.spec.description,
            "sli": sli_text(v.spec),
            "unit": "output tokens" if v.spec.sli.per is GoodputUnit.TOKEN else "requests",
            "scope": v.spec.scope,
            "objective": v.spec.objective,
            "window": v.spec.window,
            "value": v.status.sli,
            "events": v.status.counts.total,
            "budget": v.status.budget_remaining,
            "burn_rates": v.status.burn_rates(),
            "firing": v.firing.severity.value if v.firing else None,
            "at": v.status.at,
        }
        for v in found
    ]


def firing_incidents(app: AppContext) -> list[dict[str, Any]]:
    found = incidents.list_incidents(app.engine, "firing", 50)
    notes = annotate(app.engine, found)
    return [{"incident": i, **notes[i.id]} for i in found]


def fleet(app: AppContext, ctx: Context) -> dict[str, Any]:
    """Throughput totals over the range, and per model (a LoRA adapter beside its base
    model's own line: ``base · adapter``) over time."""
    finest = app.retention.finest_for(ctx.window, ctx.now)
    totals = queries.throughput(app.engine, ctx.window, ctx.selector, finest=finest)
    step = chart_step(app, ctx)
    per_model = request_series(app, ctx.window, step, ctx.selector, ["model", "adapter"])
    times = bucket_times(ctx, step)
    rate, tokens = [], []
    for labels, buckets in sorted(per_model.items()):
        name = short_model(labels[0]) + (f" · {labels[1]}" if labels[1] else "")
        rate.append(
            svg.Series(
                name,
                [
                    (t, buckets[t].requests / bucket_span_s(t, step, ctx.window))
                    if t in buckets
                    else (t, None)
                    for t in times
                ],
            )
        )
        tokens.append(
            svg.Series(
                name,
                [
                    (t, buckets[t].output_tokens / bucket_span_s(t, step, ctx.window))
                    if t in buckets
                    else (t, None)
                    for t in times
                ],
            )
        )
    end = ctx.window.end
    start = times[0] if times else ctx.window.start
    covered = covered_s(ctx, step.seconds, [at for b in per_model.values() for at in b])
    total = totals[0] if totals else None
    return {
        "totals": total,
        "requests_per_s": total.requests / covered if total and covered else None,
        "tokens_per_s": total.output_tokens / covered if total and covered else None,
        "covered": format_duration(timedelta(seconds=int(covered))) if covered else None,
        "rate_chart": svg.line_chart(
            rate, start, end, svg.unit("req/s"), label="requests per second by model"
        ),
        "tokens_chart": svg.line_chart(
            tokens, start, end, svg.unit("tok/s"), label="output tokens per second by model"
        ),
        "step": step,
    }


def overview(app: AppContext, ctx: Context) -> dict[str, Any]:
    return {
        "slos": slo_rows(app, ctx.now),
        "burn_windows": [format_duration(w) for w in sorted(app.policy.windows)],
        "firing": firing_incidents(app),
        "fleet": fleet(app, ctx),
        "good_costs": goodput_costs(app, ctx),
    }


def goodput_costs(app: AppContext, ctx: Context) -> dict[str, str]:
    """Per goodput SLO: its scope's cost per million good tokens over the range, held to its
    own targets (``service.slos.good_token_cost``); only goodput SLOs are priced."""
    out = {}
    for spec in slo_store.list_slos(app.engine):
        if spec.sli.kind is not SliKind.GOODPUT:
            continue
        finest = app.retention.finest_for(ctx.window, ctx.now)
        found = good_token_cost(app.engine, spec, app.cost_model(), ctx.window, finest)
        if found and found["cost_per_million_good_tokens"] is not None:
            per = unit_cost_text(found["cost_per_million_good_tokens"], found["currency"])
            out[spec.name] = f"{per} per 1M good tokens over the range"
    return out


def _cost_result(app: AppContext, ctx: Context, group_by: Sequence[str]) -> CostResult:
    return cost_store.cost(
        app.engine,
        ctx.window,
        app.cost_model(),
        ctx.selector,
        group_by,
        finest=app.retention.finest_for(ctx.window, ctx.now),
    )


def cost_summary(app: AppContext, ctx: Context) -> dict[str, Any] | None:
    """The overview's cost per million tokens over the whole range (``None``: nothing metered).

    Long ranges are priced from GPU rollups and kept good-token counts (``storage.cost``).
    """
    result = _cost_result(app, ctx, ())
    per_million = result.total.cost_per_million_tokens
    if per_million is None or not result.instances:
        return None
    return {
        "per_million": money(per_million.amount, per_million.currency),
        "detail": f"{money(result.total.cost, result.currency)} over the range"
        + (" · example prices" if result.example_prices else ""),
    }
