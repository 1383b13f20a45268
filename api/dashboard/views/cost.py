"""View-models of the Cost, Baselines and Capacity pages.

Cost: ``storage.cost.cost`` under the cost model in use (the example list prices until an
operator stores one), per model and per instance. Baselines: the stored baselines, and the
selected one compared with the page's range and filters exactly as
``GET /api/v1/baselines/{name}/compare`` does (a fixed bootstrap seed, so a reload gives the
same verdicts). Capacity: the stored load-test runs, the selected run's levels with its knee
and measured capacity, and the fleet's peak request rate per model against that capacity.
A page whose source holds nothing says so and how to fill it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any, Final

import numpy as np
from markupsafe import Markup

from api.dashboard import charts as svg
from api.dashboard.context import Context
from api.dashboard.views.latency import bucket_times, short_model
from core.baseline_compare import Direction, MetricComparison, Policy, compare
from core.cost import CostLine, CostResult
from core.errors import InfersightError, InvalidInput
from core.loadtest import PhaseSummary, knee_of, measured_capacity, summarise
from core.query import Selector
from core.records import GROUP_LABELS
from core.slo import scope_of
from core.window import Resolution
from service.cost_spec import active_model
from service.cost_view import good_basis, good_text
from storage import baselines as baseline_store
from storage import cost as cost_store
from storage import runs as run_store
from storage import timeseries

MAX_LISTED: Final = 50
#: Bootstrap resamples of a comparison: fewer than the release gate's 1000 (a page must stay
#: fast); the intervals are a little wider, the verdicts the same but at the margin.
BOOTSTRAP: Final = 200


# -- Cost -------------------------------------------------------------------------------------


def _cost_result(state: Any, ctx: Context, group_by: Sequence[str]) -> CostResult:
    return cost_store.cost(
        state.engine,
        ctx.window,
        active_model(state.engine, state.settings.cost_model),
        ctx.selector,
        group_by,
        finest=state.retention.finest_for(ctx.window, ctx.now),
    )


def money(amount: Decimal | None, currency: str, places: int = 2) -> str:
    if amount is None:
        return "–"
    return f"{amount:,.{places}f} {currency}"


def cost_summary(state: Any, ctx: Context) -> dict[str, Any] | None:
    """The overview's cost per million tokens over the whole range (``None``: nothing metered).

    Long ranges are priced from GPU rollups and kept good-token counts (``storage.cost``).
    """
    result = _cost_result(state, ctx, ())
    per_million = result.total.cost_per_million_tokens
    if per_million is None or not result.instances:
        return None
    return {
        "per_million": money(per_million.amount, per_million.currency),
        "detail": f"{money(result.total.cost, result.currency)} over the range"
        + (" · example prices" if result.example_prices else ""),
    }


def _line(line: CostLine, currency: str) -> dict[str, Any]:
    def per_million(value: Any) -> str:
        return money(value.amount, currency, 3) if value is not None else "–"

    return {
        "labels": dict(line.labels),
        "requests": line.requests,
        "tokens": line.tokens,
        "gpu_hours": float(line.gpu_hours),
        "idle_gpu_hours": float(line.idle_gpu_hours),
        "energy_kwh": float(line.energy_kwh),
        "cost": money(line.cost, currency),
        "idle_cost": money(line.idle_cost, currency),
        "per_million": per_million(line.cost_per_million_tokens),
        "per_million_input": per_million(line.cost_per_million_input_tokens),
        "per_million_output": per_million(line.cost_per_million_output_tokens),
        "per_million_good": per_million(line.cost_per_million_good_tokens),
        "good_basis": line.good_basis,
        "tokens_per_joule": line.tokens_per_joule,
        "utilisation": line.utilisation,
    }


def _notes(result: CostResult, ctx: Context, floor: float) -> dict[str, str]:
    """What the page must say about how exact its figures are."""
    good = good_text(result)
    if not result.good_tokens_exact:
        good += " · partial: raw requests of part of the range are gone and were not kept"
    idle = ""
    if cost_store.idle_method(floor, ctx.window) == "interpolated":
        idle = (
            f"Idle time under the {floor:.1%} utilisation floor is interpolated within its "
            "5 % histogram bin over ranges longer than 6 h."
        )
    return {"good_note": good, "good_basis": good_basis(result), "idle_note": idle}


def cost(state: Any, ctx: Context) -> dict[str, Any]:
    model = active_model(state.engine, state.settings.cost_model)
    result = cost_store.cost(
        state.engine,
        ctx.window,
        model,
        ctx.selector,
        ("model",),
        finest=state.retention.finest_for(ctx.window, ctx.now),
    )
    if not result.instances:
        return {
            "available": False,
            "reason": "No GPU samples or requests in this range, so there is nothing to price.",
            "hint": "Sidecars report GPU time; widen the range or check the filters.",
        }
    currency = result.currency
    total = result.total.cost
    bars = []
    if total > 0:
        by_model = [
            (short_model(g.labels.get("model", "")) or "unattributed", float(g.cost / total))
            for g in result.groups
        ]
        by_instance = [(i.instance, float(i.total.amount / total)) for i in result.instances]
        bars = [("by model", by_model), ("by instance", by_instance)]
    return {
        "available": True,
        "currency": currency,
        "model_name": result.model_name,
        "example_prices": result.example_prices,
        "total": _line(result.total, currency),
        "groups": [
            {**_line(g, currency), "model": short_model(g.labels.get("model", ""))}
            for g in result.groups
        ],
        "instances": [
            {
                "instance": i.instance,
                "gpus": i.gpus,
                "gpu_names": ", ".join(i.gpu_names),
                "gpu_hours": float(i.gpu_hours),
                "idle_gpu_hours": float(i.idle_gpu_hours),
                "energy_kwh": float(i.energy_kwh),
                "total": money(i.total.amount, currency),
                "idle_cost": money(i.idle_cost.amount, currency),
                "idle_share": float(i.idle_cost.amount / i.total.amount)
                if i.total.amount
                else None,
                "utilisation": i.utilisation,
            }
            for i in result.instances
        ],
        "split": svg.stacked_bars(bars, label="shares of the range's cost"),
        **_notes(result, ctx, model.idle_utilisation_floor),
        "unmetered": result.unmetered,
        "unpriced": result.unpriced,
    }


# -- Baselines --------------------------------------------------------------------------------


def baselines(state: Any, ctx: Context, name: str) -> dict[str, Any]:
    stored = baseline_store.list_baselines(state.engine, MAX_LISTED)
    if not stored:
        return {
            "available": False,
            "reason": "No baselines are stored yet.",
            "hint": "Capture one with infersight baseline capture, or from a load test "
            "with infersight loadtest --capture-baseline.",
        }
    chosen = next((b for b in stored if b.name == name), None) if name else stored[0]
    if chosen is None:
        raise InvalidInput(f"no baseline named {name!r}")
    # Like for like: without filters on the page, the window is read with the baseline's own.
    selector = ctx.selector if ctx.filters else _selector_of(chosen.labels)
    cost_model = active_model(state.engine, state.settings.cost_model)
    out: dict[str, Any] = {
        "available": True,
        "baselines": stored,
        "chosen": chosen,
        "scope": scope_of(selector),
    }
    try:
        candidate = baseline_store.capture_window(
            state.engine,
            f"window@{int(ctx.window.start.timestamp())}",
            ctx.window,
            selector,
            ctx.now,
            finest=state.retention.finest_for(ctx.window, ctx.now),
            exact_max_rows=0,  # sketches (±1 %): a page must stay fast over any range
            cost_model=cost_model,
        )
    except InfersightError as exc:
        out["comparison"], out["comparison_error"] = None, exc.message
        return out
    result = compare(chosen, candidate, np.random.default_rng(0), Policy(resamples=BOOTSTRAP))
    out["comparison"], out["comparison_error"] = result, ""
    return out


def _selector_of(labels: Mapping[str, str]) -> Selector:
    return Selector(**{k: v for k, v in labels.items() if k in GROUP_LABELS})


# -- Capacity ---------------------------------------------------------------------------------


def _levels(summaries: Sequence[PhaseSummary]) -> list[dict[str, Any]]:
    top = max((s.throughput_rps for s in summaries), default=0.0) or 1.0
    return [
        {
            "label": s.label,
            "concurrency": s.concurrency,
            "requests": s.requests,
            "errors": s.errors,
            "rps": s.throughput_rps,
            "rps_share": s.throughput_rps / top,
            "tokens_per_s": s.output_tokens_per_s,
            "ttft_p99": s.quantile("ttft", "0.99"),
            "tpot_p99": s.quantile("tpot", "0.99"),
            "e2e_p50": s.quantile("e2e", "0.5"),
        }
        for s in summaries
    ]


def _peak_rates(state: Any, ctx: Context) -> dict[str, dict[str, Any]]:
    """Per model: the busiest bucket's request rate, the mean rate and the instances serving.

    Peaks are what capacity is planned for, so buckets are as fine as the range allows at a
    bounded cost: minutes up to a day, hours up to a month, days beyond.
    """
    span = ctx.window.end - ctx.window.start
    wanted = (
        Resolution.MINUTE
        if span <= timedelta(days=1)
        else Resolution.HOUR
        if span <= timedelta(days=31)
        else Resolution.DAY
    )
    finest = state.retention.finest_for(ctx.window, ctx.now)
    order = (Resolution.MINUTE, Resolution.HOUR, Resolution.DAY)
    step = max(wanted, finest, key=order.index)
    per_series = timeseries.request_series(
        state.engine, ctx.window, step, ctx.selector, ("model", "instance")
    )
    out: dict[str, dict[str, Any]] = {}
    for (model, instance), buckets in per_series.items():
        entry = out.setdefault(model, {"buckets": {}, "instances": set()})
        entry["instances"].add(instance)
        for at, counts in buckets.items():
            entry["buckets"][at] = entry["buckets"].get(at, 0) + counts.requests
    seconds = float(step.seconds)
    covered = max(len(bucket_times(ctx, step)), 1) * seconds
    return {
        model: {
            "peak_rps": max(e["buckets"].values()) / seconds,
            "mean_rps": sum(e["buckets"].values()) / covered,
            "instances": sorted(e["instances"]),
            "step": step.value,
            "capacity_rps": None,
            "load": None,
        }
        for model, e in sorted(out.items())
    }


def capacity(state: Any, ctx: Context, run_id: str = "") -> dict[str, Any]:
    runs = run_store.list_runs(state.engine, MAX_LISTED)
    fleet = _peak_rates(state, ctx)
    if not runs:
        return {
            "available": False,
            "reason": "No load-test runs are stored yet, so no capacity has been measured.",
            "hint": "Measure one with infersight loadtest --scenario step (it is stored), "
            "then plan with infersight capacity plan.",
            "fleet": fleet,
        }
    if run_id and not run_id.isdigit():
        raise InvalidInput("run must be a load-test run id")
    listing = next((r for r in runs if str(r.id) == run_id), None) if run_id else runs[0]
    if listing is None:
        raise InvalidInput(f"no load-test run {run_id}")
    run = run_store.get_run(state.engine, listing.id)
    summaries = summarise(run)
    knee = knee_of(summaries)
    try:
        best = measured_capacity(summaries)
        capacity_rps: float | None = best.throughput_rps
    except InvalidInput:
        best, capacity_rps = None, None
    for model, entry in fleet.items():
        same = capacity_rps is not None and model == run.model
        entry["capacity_rps"] = capacity_rps if same else None
        total = (capacity_rps or 0.0) * len(entry["instances"])
        entry["load"] = entry["peak_rps"] / total if same and total else None
    return {
        "available": True,
        "runs": runs,
        "run": listing,
        "levels": _levels(summaries),
        "knee": knee,
        "best": best,
        "fleet": fleet,
    }


# -- comparison cells (template helpers) ------------------------------------------------------


def metric_value(m: MetricComparison, value: float | None) -> str:
    if value is None:
        return "–"
    if m.unit == "s":
        return svg.seconds(value)
    if m.unit == "ratio":
        return f"{value * 100:.3g} %"
    if m.unit == "currency":
        return f"{value:.4f}"
    return f"{svg.plain(value)} {m.unit}"


def metric_change(m: MetricComparison) -> str:
    if m.change is None:
        return "–"
    if m.absolute:
        return f"{m.change * 100:+.2f} pp" if m.unit == "ratio" else f"{m.change:+.3g}"
    return f"{m.change * 100:+.1f} %"


def change_bar(m: MetricComparison) -> Markup:
    """The change and its interval on a symmetric axis, with the threshold on the worse side."""
    if m.change is None:
        return Markup("")
    values = [abs(m.change), m.threshold * 2]
    values += [abs(v) for v in (m.ci_low, m.ci_high) if v is not None]
    scale = max(values) or 1.0

    def pos(value: float) -> float:
        return 50 + max(-1.0, min(1.0, value / scale)) * 48

    parts = ['<div class="change"><span class="zero"></span>']
    if m.direction is not Direction.NEUTRAL:
        sign = 1 if m.direction is Direction.LOWER_IS_BETTER else -1
        parts.append(f'<span class="threshold" style="left:{pos(sign * m.threshold):.1f}%"></span>')
    if m.ci_low is not None and m.ci_high is not None:
        left, right = pos(m.ci_low), pos(m.ci_high)
        parts.append(f'<span class="ci" style="left:{left:.1f}%;width:{right - left:.1f}%"></span>')
    kind = "worse" if m.worse else ("better" if m.change and m.direction.value != "neutral" else "")
    parts.append(f'<span class="est {kind}" style="left:{pos(m.change):.1f}%"></span></div>')
    return Markup("".join(parts))  # noqa: S704 - numbers and fixed class names only
