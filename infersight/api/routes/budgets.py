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

from infersight.api.auth import Scope, check_within_scope, within_scope
from infersight.api.context import AppContext
from infersight.api.deps import App, requires
from infersight.api.params import KnownQueryRoute, TenantScope
from infersight.core.budget import Budget
from infersight.core.errors import InvalidInput
from infersight.service.budgets import SpendReader, budget_status, to_document
from infersight.service.incidents import incident_dict
from infersight.storage import budgets as budget_store
from infersight.storage import incidents

router = APIRouter(
    prefix="/api/v1/budgets",
    dependencies=[Depends(requires(Scope.READ))],
    route_class=KnownQueryRoute,
    tags=["budgets"],
)


def _view(app: AppContext, budget: Budget, reader: SpendReader) -> dict[str, Any]:
    try:
        status: dict[str, Any] | None = budget_status(
            app.store, budget, reader.model, app.clock(), reader
        ).to_dict()
        problem = None
    except InvalidInput as exc:
        status, problem = None, str(exc)
    with app.engine.connect() as connection:
        alert = incidents.firing(connection, budget.alert_name, budget.scope_text)
    return {
        **to_document(budget),
        "version": budget.version,
        "status": status,
        "problem": problem,
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
    found = [
        b for b in budget_store.list_budgets(app.engine) if within_scope(tenants, dict(b.scope))
    ]
    reader = SpendReader(app.store, app.cost_model())  # one cost answer per window for all
    return {"budgets": [_view(app, b, reader) for b in found]}


@router.get(
    "/{name}",
    summary="One budget with its spend, projection, burn rates and versions",
    description="As in the list, plus versions: every version applied, oldest first.",
)
def get_budget(app: App, name: str, tenants: TenantScope) -> dict[str, Any]:
    budget = budget_store.get_budget(app.engine, name)
    check_within_scope(tenants, dict(budget.scope), f"budget {name!r}")
    answer = _view(app, budget, SpendReader(app.store, app.cost_model()))
    answer["versions"] = [
        {"version": v, "applied_at": at.isoformat().replace("+00:00", "Z")}
        for v, at in budget_store.versions(app.engine, name)
    ]
    return answer
