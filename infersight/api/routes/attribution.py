"""``/api/v1/cost/attribution``: who spent it — cost per tenant, team or workload, split three
ways, with goodput (``service.attribution``).

``GET /api/v1/cost/attribution?dimension=tenant&top=20&start=&end=`` (or ``range=``) answers,
per value of the dimension (its ``top`` values by cost apart, the rest folded into
``(other)``, the requests no gateway or client span named under ``(unattributed)``): usage
(the GPU time its requests used), allocation (its share of the whole cost, idle included),
idle (the difference), requests, tokens, GPU-hours, and goodput (good tokens, their share,
their rate and the cost per million of them); and for the fleet: total = usage +
idle/unallocated, exactly. ``top`` says the N and how many values were folded. A token limited
to tenants is answered 403: the answer holds the fleet's total and every tenant's share.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from infersight.api.auth import Scope
from infersight.api.context import AppContext
from infersight.api.deps import App, requires
from infersight.api.params import WINDOW_RULES, KnownQueryRoute, window_query
from infersight.api.reads import read_answer
from infersight.core.attribution import GROUPING_DIMENSIONS, MAX_TOP_N
from infersight.core.timestamps import iso
from infersight.core.window import Window
from infersight.service.attribution import attributed_cost

QueryWindow = Annotated[Window, Depends(window_query)]
router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(requires(Scope.READ))],
    route_class=KnownQueryRoute,
    tags=["cost"],
)


@router.get(
    "/cost/attribution",
    summary="Cost per tenant, team or workload: usage, allocation and idle, with goodput",
    description=WINDOW_RULES
    + " Money fields are decimal strings with six places in `currency`; per line usage +"
    " idle = allocation, and over the lines usage + idle_unallocated = total, exactly.",
)
def get_attribution(
    app: App,
    request: Request,
    response: Response,
    window: QueryWindow,
    dimension: Annotated[
        str,
        Query(
            description="tenant, team or workload",
            json_schema_extra={"enum": list(GROUPING_DIMENSIONS)},
        ),
    ] = "tenant",
    top: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_TOP_N,
            description="values kept apart by cost (default: the attribution_top_n setting)",
        ),
    ] = None,
) -> dict[str, Any]:
    return read_answer(app, request, response, lambda r: _answer(r, window, dimension, top))


def _answer(app: AppContext, window: Window, dimension: str, top: int | None) -> dict[str, Any]:
    now = app.clock()
    answer = attributed_cost(
        app.store.cost,
        window,
        app.cost_model(),
        dimension,
        top or app.settings.attribution_top_n,
        finest=app.retention.finest_for(window, now),
    )
    return {"start": iso(window.start), "end": iso(window.end), **answer.to_json()}
