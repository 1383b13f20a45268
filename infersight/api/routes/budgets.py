"""``/api/v1/budgets[/{name}]``: budgets in force with their spend, projection and burn.

Budgets are applied as ``kind: Budget`` documents (``infersight budget apply``; each change a
new version). Each answer is the budget's document plus ``status`` (``service.budgets.
BudgetStatus``: spent, the linear curve's allowance by now, the projection to the period's
end, the burn rate per rule window, the threshold crossed, the top spenders) and ``alert``
(its open incident, if any). A token limited to tenants sees the budgets of its tenants only.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from infersight.api.auth import Scope, check_within_scope
from infersight.api.context import money_results
from infersight.api.deps import App, requires
from infersight.api.params import KnownQueryRoute, TenantScope
from infersight.service import budgets as service
from infersight.service.budgets import BudgetView, SpendReader, to_document
from infersight.service.incidents import incident_dict

router = APIRouter(
    prefix="/api/v1/budgets",
    dependencies=[Depends(requires(Scope.READ))],
    route_class=KnownQueryRoute,
    tags=["budgets"],
)


def _view(view: BudgetView) -> dict[str, Any]:
    budget, alert = view.budget, view.alert
    return {
        **to_document(budget),
        "version": budget.version,
        "status": view.status.to_dict() if view.status is not None else None,
        "problem": view.problem,
        "alert": incident_dict(alert) if alert is not None else None,
    }


@router.get(
    "",
    summary="Every budget in force with its spend, projection and burn rates",
    description="Each budget's newest version, as its document plus status (money as decimal "
    "strings with six places in the budget's currency) and its open alert; problem says why a "
    "budget could not be evaluated (a currency other than the cost model's).",
)
def list_budgets(app: App, tenants: TenantScope) -> dict[str, Any]:
    # One cost answer per window for all; a token limited to tenants: its tenants' budgets.
    # The money job's last judgements while fresh (those its alerts were decided on).
    recent, age = money_results(app)
    views = service.budget_views(
        app.store, app.cost_model(), app.clock(), tenants, recent=recent, max_age=age
    )
    return {"budgets": [_view(v) for v in views]}


@router.get(
    "/{name}",
    summary="One budget with its spend, projection, burn rates and versions",
    description="As in the list, plus versions: every version applied, oldest first.",
)
def get_budget(app: App, name: str, tenants: TenantScope) -> dict[str, Any]:
    budget = service.get_budget(app.store, name)
    check_within_scope(tenants, dict(budget.scope), f"budget {name!r}")
    reader = SpendReader(app.store, app.cost_model())
    answer = _view(service.budget_view(app.store, budget, reader, app.clock()))
    answer["versions"] = [
        {"version": v, "applied_at": at.isoformat().replace("+00:00", "Z")}
        for v, at in service.budget_versions(app.store, name)
    ]
    return answer
