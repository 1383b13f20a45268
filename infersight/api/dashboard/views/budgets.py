"""The Budgets page: every budget in force (``service.budgets``) with its spend so far against
the linear curve, the projection to the period's end, the burn rate per rule window, the
threshold crossed, its open alert and top spenders; and the cost-per-million-tokens step of
the fleet and each model (the last 6 h against the same hours of the previous 7 days) with its
factors. With no budget stored, the page says how to apply one.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any, Final

from infersight.api.context import AppContext, money_results
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.formatting import money, short_model
from infersight.core.window import format_duration
from infersight.service.budgets import (
    IDLE_LABEL,
    STEP_DAYS,
    BudgetView,
    budget_views,
    cost_step_views,
)
from infersight.service.cost_view import unit_cost_text

NAME: Final = "budgets"
TITLE: Final = "Budgets"
DEFAULT_RANGE: Final = "24h"


def page(app: AppContext, ctx: Context, _query: dict[str, str]) -> dict[str, Any]:
    return budgets(app, ctx)


def _row(view: BudgetView) -> dict[str, Any]:
    budget = view.budget
    scope = ", ".join(f"{k} {v}" for k, v in budget.scope.items()) or "fleet"
    row: dict[str, Any] = {
        "name": budget.name,
        "version": budget.version,
        "scope": scope,
        "period": budget.period.value,
        "amount": money(budget.amount, budget.currency),
        "description": budget.description,
    }
    status, alert = view.status, view.alert
    if status is None:
        return {**row, "problem": view.problem}
    f = status.figures
    projected = f.projected
    rates = f.burn_rates()
    return {
        **row,
        "problem": None,
        "spent": money(f.spent, budget.currency),
        "spent_share": min(1.0, f.spent_fraction),
        "spent_fraction": f.spent_fraction,
        "expected": money(f.expected, budget.currency),
        "expected_share": f.elapsed,
        "ahead": f.spent > f.expected,
        "projected": money(projected, budget.currency),
        "projected_fraction": None if projected is None else float(projected / budget.amount),
        "period_text": f"{f.start:%d %b} – {f.end:%d %b %Y}",
        "elapsed": f.elapsed,
        "burn": [
            {
                "rule": f"{r.severity.value} ≥ {r.burn_rate:g}×",
                "windows": f"{_d(r.long_window)} / {_d(r.short_window)}",
                "long": rates[r.long_window],
                "short": rates[r.short_window],
                "hot": rates[r.long_window] >= r.burn_rate and rates[r.short_window] >= r.burn_rate,
            }
            for r in budget.rules
        ],
        "crossed": None if f.crossed() is None else f"{float(f.crossed() or 0):.0%}",
        "firing": None if status.firing is None else status.firing.value,
        "alert": None if alert is None else {"id": alert.id, "severity": alert.severity.value},
        "top": [
            {
                "model": short_model(line.labels["model"])
                if line.labels.get("model")
                else IDLE_LABEL,
                "instance": line.labels.get("instance", ""),
                "cost": money(line.cost, budget.currency),
                "share": float(line.cost / f.spent) if f.spent else 0.0,
            }
            for line in status.top[:3]
        ],
    }


def _d(window: timedelta) -> str:
    return format_duration(window)


def _steps(app: AppContext, model: Any, ctx: Context) -> list[dict[str, Any]]:
    out = []
    # A page reads, never records: the money job's last judgements while fresh, else judged
    # here at ctx.now.
    recent, age = money_results(app)
    for step in cost_step_views(app.store, model, ctx.now, recent, age):
        name, judged, alert = step.name, step.judged, step.alert
        evidence = {str(e["signal"]): e for e in judged.evidence}
        per = evidence.get("cost_per_million_tokens", {})
        out.append(
            {
                "scope": short_model(name) if name else "fleet",
                "ratio": judged.ratio,
                "now": _unit(per.get("current"), model.currency),
                "before": _unit(per.get("baseline"), model.currency),
                "cause": judged.cause.value if judged.cause and judged.firing else None,
                "factors": dict(judged.factors),
                "firing": judged.firing,
                "alert": None if alert is None else alert.id,
            }
        )
    return out


def _unit(value: Any, currency: str) -> str:
    if value is None:
        return "–"
    return unit_cost_text(Decimal(str(value)), currency)


def budgets(app: AppContext, ctx: Context) -> dict[str, Any]:
    model = app.cost_model()
    recent, age = money_results(app)
    # The money job's last judgements while fresh; else one cost answer per window for all.
    found = budget_views(app.store, model, ctx.now, recent=recent, max_age=age)
    judged = [v.status.figures.at for v in found if v.status is not None]
    return {
        "budgets": [_row(v) for v in found],
        "judged_at": min(judged) if judged else None,
        "steps": _steps(app, model, ctx),
        "step_days": STEP_DAYS,
        "model_name": model.name,
        "currency": model.currency,
        "example_prices": model.example,
    }
