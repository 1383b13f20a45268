"""The Cost page: ``service.cost_view.cost`` under the cost model in use (the example list prices
until an operator stores one), per model and per instance, with what the figures' exactness
depends on (good tokens kept, idle time interpolated), and the purchasing advice
(``api.dashboard.purchasing``: the reserved / on-demand split and the idle windows). A range
with nothing metered says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import attribution, purchasing
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.formatting import money, short_model
from infersight.core.cost import CostLine, CostModel, CostResult
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.service import reconcile as rec
from infersight.service.cost_view import cost as priced
from infersight.service.cost_view import good_basis, good_text, idle_method, unit_cost_text

NAME: Final = "cost"
TITLE: Final = "Cost"
DEFAULT_RANGE: Final = "24h"


#: ``by``: the Cost page's who-spent-it dimension (``api.dashboard.attribution``).
PARAMS: Final = (attribution.PARAM,)


def page(app: AppContext, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    model = app.cost_model()
    result = priced(
        app.store,
        ctx.window,
        model,
        ctx.selector,
        ("model", "adapter"),
        finest=app.retention.finest_for(ctx.window, ctx.now),
        slos=app.slo_specs(),
    )
    answer = cost(app, ctx, model, result)
    if answer["available"]:
        # Who spent it is the whole fleet's: the range's one cost read, grouped again, when
        # the page's own is unfiltered.
        fleet = result if ctx.selector == Selector() else None
        answer["attribution"] = attribution.section(app, ctx, query, fleet)
    return answer


def _line(line: CostLine, currency: str) -> dict[str, Any]:
    def per_million(value: Any) -> str:
        # Significant digits below 1 (0.0042 USD), never a unit cost rounded to 0.000.
        return unit_cost_text(value.amount, currency) if value is not None else "–"

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


def _notes(app: AppContext, result: CostResult, ctx: Context, floor: float) -> dict[str, str]:
    """What the page must say about how exact its figures are."""
    good = good_text(result)
    if not result.good_tokens_exact:
        good += " · partial: raw requests of part of the range are gone and were not kept"
    idle = ""
    if idle_method(app.store, floor, ctx.window) == "interpolated":
        idle = (
            f"Idle time under the {floor:.1%} utilisation floor is interpolated within its "
            "5 % histogram bin over ranges longer than 6 h."
        )
    return {"good_note": good, "good_basis": good_basis(result), "idle_note": idle}


def _unit_cost(result: CostResult, ctx: Context) -> tuple[Window, Decimal | None] | None:
    """The range's cost per million tokens for the purchasing advice (unfiltered only)."""
    if ctx.filters:
        return None
    money = result.total.cost_per_million_tokens
    return ctx.window, None if money is None else money.amount


def _series_name(labels: Mapping[str, str]) -> str:
    """A model's line, and a LoRA adapter's beside its base model's (``base · adapter``)."""
    name = short_model(labels.get("model", "")) or "unattributed"
    adapter = labels.get("adapter", "")
    return f"{name} · {adapter}" if adapter else name


def cost(app: AppContext, ctx: Context, model: CostModel, result: CostResult) -> dict[str, Any]:
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
        by_model = [(_series_name(g.labels), float(g.cost / total)) for g in result.groups]
        by_instance = [(i.instance, float(i.total.amount / total)) for i in result.instances]
        bars = [("by model", by_model), ("by instance", by_instance)]
    return {
        "available": True,
        "currency": currency,
        "model_name": result.model_name,
        "example_prices": result.example_prices,
        "total": _line(result.total, currency),
        "groups": [
            {
                **_line(g, currency),
                "model": short_model(g.labels.get("model", "")),
                "adapter": g.labels.get("adapter", ""),
            }
            for g in result.groups
        ],
        "instances": [
            {
                "instance": i.instance,
                "gpus": i.gpus,
                "gpu_names": ", ".join(i.gpu_names),
                "gpu_slices": "; ".join(s.describe() for s in i.slices),
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
        **_notes(app, result, ctx, model.idle_utilisation_floor),
        "unmetered": result.unmetered,
        "unpriced": result.unpriced,
        "purchasing": purchasing.section(app, ctx, _unit_cost(result, ctx)),
        "reconciliation": _reconciliation(app, ctx),
    }


def _reconciliation(app: AppContext, ctx: Context) -> dict[str, Any]:
    """The reconciliation with the imported cloud bills over the page's range (its last
    ``rec.MAX_DAYS`` days), for the whole fleet: the figures are per instance."""
    if ctx.filters:
        return {
            "shown": False,
            "note": "Reconciliation with the bill is per instance, for the "
            "whole fleet: clear the filters to see it.",
        }
    start = max(ctx.window.start, ctx.window.end - timedelta(days=rec.MAX_DAYS - 1))
    start = min(start, ctx.window.end)
    answer = rec.reconcile(
        app.store,
        app.cost_model(),
        start,
        ctx.window.end,
        finest_for=lambda w: app.retention.finest_for(w, ctx.now),
    ).as_dict()
    currency = answer["currency"]

    def m(value: str | None, places: int = 2) -> str:
        return "–" if value is None else money(Decimal(value), currency, places)

    def pct(value: str | None) -> str:
        return "–" if value is None else f"{Decimal(value):+.1f} %"

    def row(item: dict[str, Any]) -> dict[str, Any]:
        drift = item["drift_pct"]
        return {
            **item,
            "billed_text": m(item["billed"]),
            "modelled_text": m(item["modelled"]),
            "drift_text": m(item["drift"]),
            "drift_pct_text": pct(drift),
            "large": drift is not None and abs(Decimal(drift)) >= 5,
            "price_text": m(item["billed_per_gpu_hour"], 3),
            "typed_text": m(item.get("typed_price_per_gpu_hour"), 3),
        }

    unmatched = answer["unmatched"]
    return {
        "shown": True,
        "reconciled": answer["reconciled"],
        "summary": answer["summary"],
        "clipped": start > ctx.window.start,
        "imports": answer["imports"],
        "total": row(answer["total"]),
        "instances": [row(i) for i in answer["instances"]],
        "days": [row(d) for d in answer["days"]],
        "not_seen": [{**u, "billed_text": m(u["billed"])} for u in unmatched["billed_not_seen"]],
        "not_seen_count": unmatched["billed_not_seen_count"],
        "not_seen_total": m(unmatched["billed_not_seen_total"]),
        "not_billed": [
            {**u, "modelled_text": m(u["modelled"])} for u in unmatched["seen_not_billed"]
        ],
        "not_billed_count": unmatched["seen_not_billed_count"],
        "not_billed_total": m(unmatched["seen_not_billed_total"]),
        "other": [(k, m(v)) for k, v in answer["other_charges"].items()],
        "command": "infersight cost use-billed-price --start "
        f"{answer['start']} --end {answer['end']}",
    }
