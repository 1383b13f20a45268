"""The Overview page: every SLO with its status, the firing incidents, the fleet's
throughput and the cost per million tokens over the range.

SLO statuses come from ``service.slos`` (the same figures as ``GET /api/v1/slos``); the fleet's
charts from rollup buckets (``service.telemetry``); the cost from ``service.cost_view.cost``
under the cost model in use (long ranges are priced from GPU rollups and kept good-token
counts).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from infersight.api.context import AppContext, slo_results
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.formatting import duration, money, short_model
from infersight.api.dashboard.shared import (
    bucket_span_s,
    bucket_times,
    chart_step,
    covered_s,
    request_series,
)
from infersight.core.burn import Policy
from infersight.core.cost import CostResult
from infersight.core.records import GROUP_LABELS
from infersight.core.slo import GoodputUnit, SliKind, SloSpec, targets_text
from infersight.core.window import format_duration
from infersight.service import telemetry
from infersight.service.cost_view import cost, unit_cost_text
from infersight.service.incidents import list_incidents
from infersight.service.slos import SloView, good_token_cost, with_status

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
    return f"goodput: {targets_text(spec.sli)}"


def slo_rows(app: AppContext, now: datetime) -> list[dict[str, Any]]:
    specs = app.slo_specs()
    first = first_data(app, specs, now)
    # The evaluation job's last cycle while it is fresh (``Jobs.reuse_age``): this process's,
    # or the one the leader stored when the job runs in another worker; else counted here.
    found = with_status(
        app.store,
        specs,
        app.policy,
        now,
        app.retention.finest_for,
        recent=slo_results(app, specs, now),
        max_age=app.jobs.reuse_age("evaluate"),
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
            **backing(v, app.policy, first.get(v.spec.name), now),
        }
        for v in found
    ]


def first_data(app: AppContext, specs: Sequence[SloSpec], now: datetime) -> dict[str, datetime]:
    """Each SLO's first request within its window (SLOs without one are left out)."""
    if not specs:
        return {}
    longest = max(spec.window for spec in specs)
    series = telemetry.first_seen(app.store, now - longest, now)
    out = {}
    for spec in specs:
        pinned = [(GROUP_LABELS.index(name), value) for name, value in spec.selector.items()]
        # A series first seen before the SLO's window began backs all of it (the lookup spans
        # the longest SLO window, so a shorter one starts after many series' first data).
        ats = [
            max(at, now - spec.window)
            for labels, at in series.items()
            if all(labels[i] == value for i, value in pinned)
        ]
        if ats:
            out[spec.name] = min(ats)
    return out


def backing(view: SloView, policy: Policy, first: datetime | None, now: datetime) -> dict[str, Any]:
    """How much data backs the SLO's figures, each burn-rate window's cell, and the state.

    A window longer than the data is not shown as if complete: the first window that holds
    all of the data shows its rate marked partial ("over the 45 min of data so far"); longer
    ones hold the same data and show a dash. The state agrees with the figures: an open
    incident's severity, else the severity the evaluation would open an incident at
    (``Evaluation.opening``; no incident yet),
    else "budget spent" once the budget of the events so far is gone, "burning" while the
    longest window with data burns at 1× or more, else ok."""
    status = view.status
    have = max(now - first, timedelta(0)) if first is not None else timedelta(0)
    rates = status.evaluation.burn_rates
    cells: list[dict[str, Any]] = []
    for window in sorted(policy.windows):
        name = format_duration(window)
        rate = rates.get(window, 0.0)
        if have >= window:
            cells.append({"window": name, "rate": rate, "kind": "full", "title": ""})
        elif have > timedelta(0) and all(c["kind"] == "full" for c in cells):
            title = f"over the {_span(have)} of data so far, not a full {name}"
            cells.append({"window": name, "rate": rate, "kind": "partial", "title": title})
        else:
            title = (
                f"only {_span(have)} of data: no more than the shorter windows hold"
                if have > timedelta(0)
                else "no data in this window"
            )
            cells.append({"window": name, "rate": None, "kind": "none", "title": title})
    window = view.spec.window
    data = None if have >= window else f"{_span(have)} of {duration(window)}"
    backed = [c["rate"] for c in cells if c["rate"] is not None]
    if view.firing is not None:
        severity = view.firing.severity.value
        state = {"label": severity, "kind": f"sev-{severity}", "title": "an incident is open"}
    elif status.evaluation.opening is not None:
        # What the evaluation would open an incident at: with the policy's resolve_after, a
        # rule that still fires over its windows but whose burn is no longer present (the
        # shortest window below its rate) opens none, so it is not shown as an alert.
        severity = status.evaluation.opening.value
        state = {
            "label": severity,
            "kind": f"sev-{severity}",
            "title": "the alert condition holds; no incident is open yet",
        }
    elif status.counts.total and status.budget_remaining <= 0:
        state = {
            "label": "budget spent",
            "kind": "spent",
            "title": "the error budget of the events so far is spent",
        }
    elif backed and backed[-1] >= 1:
        state = {
            "label": "burning",
            "kind": "burning",
            "title": "spending the error budget faster than the SLO window allows",
        }
    else:
        state = {"label": "ok", "kind": "ok", "title": ""}
    return {"data": data, "burns": cells, "state": state}


def _span(delta: timedelta) -> str:
    """``45 min``, ``5 h``, ``3 d``: how much data, rounded down to a whole unit."""
    seconds = int(delta.total_seconds())
    if seconds < 3600:
        return f"{max(seconds // 60, 1)} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def firing_incidents(app: AppContext) -> list[dict[str, Any]]:
    return [{"incident": i.incident, **i.notes} for i in list_incidents(app.store, "firing", 50)]


def fleet(app: AppContext, ctx: Context) -> dict[str, Any]:
    """Throughput totals over the range, and per model (a LoRA adapter beside its base
    model's own line: ``base · adapter``) over time."""
    finest = app.retention.finest_for(ctx.window, ctx.now)
    totals = telemetry.throughput(app.store, ctx.window, ctx.selector, finest=finest)
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
    for spec in app.slo_specs():
        if spec.sli.kind is not SliKind.GOODPUT:
            continue
        finest = app.retention.finest_for(ctx.window, ctx.now)
        found = good_token_cost(app.store, spec, app.cost_model(), ctx.window, finest)
        if found and found["cost_per_million_good_tokens"] is not None:
            per = unit_cost_text(found["cost_per_million_good_tokens"], found["currency"])
            out[spec.name] = f"{per} per 1M good tokens over the range"
    return out


def _cost_result(app: AppContext, ctx: Context, group_by: Sequence[str]) -> CostResult:
    return cost(
        app.store,
        ctx.window,
        app.cost_model(),
        ctx.selector,
        group_by,
        finest=app.retention.finest_for(ctx.window, ctx.now),
        slos=app.slo_specs(),
    )


def cost_summary(app: AppContext, ctx: Context) -> dict[str, Any] | None:
    """The overview's cost per million tokens over the whole range (``None``: nothing metered).

    Long ranges are priced from GPU rollups and kept good-token counts (``service.cost_view``).
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
