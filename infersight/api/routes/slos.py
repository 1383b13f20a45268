"""``/api/v1/slos[/{name}]``: SLOs with their live status.

SLO definitions are changed with PUT and DELETE (admin scope).

A definition is sent as an infersight/v1 or OpenSLO v1 document in YAML or JSON; it is
answered in infersight/v1 form plus ``status`` (SLI, objective, budget remaining, burn rate
per window) and ``alert`` (the open incident of the SLO's scope, if any). One goodput SLO's
answer adds ``good_token_cost``: its scope's cost per million good tokens over its window.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from starlette.concurrency import run_in_threadpool

from infersight.api.auth import Scope, check_within_scope
from infersight.api.context import AppContext
from infersight.api.deps import App, requires
from infersight.api.limits import check_document
from infersight.api.params import KnownQueryRoute, TenantScope
from infersight.core.errors import InvalidInput
from infersight.core.slo import NAME_PATTERN, SliKind, SloSpec
from infersight.core.window import Window
from infersight.service import slos
from infersight.service.apply import apply
from infersight.service.documents import read_document
from infersight.service.incidents import incident_dict
from infersight.service.slos import good_token_cost, with_status
from infersight.service.specs import SLO, load_document, to_document

router = APIRouter(prefix="/api/v1/slos", route_class=KnownQueryRoute, tags=["slos"])
_READ = [Depends(requires(Scope.READ))]
_ADMIN = [Depends(requires(Scope.ADMIN))]


def _views(app: AppContext, specs: list[SloSpec]) -> list[dict[str, Any]]:
    """Definitions with their status and open incident."""
    found = with_status(app.store, specs, app.policy, app.clock(), app.retention.finest_for)
    return [
        {
            **to_document(v.spec),
            "status": v.status.to_dict(),
            "alert": incident_dict(v.firing) if v.firing is not None else None,
        }
        for v in found
    ]


@router.get("", dependencies=_READ, summary="Every SLO with its status")
def list_slos(app: App, tenants: TenantScope) -> dict[str, Any]:
    # A token limited to tenants: the SLOs whose selector lies within them (service.slos).
    return {"slos": _views(app, slos.list_slos(app.store, tenants))}


@router.get("/{name}", dependencies=_READ, summary="One SLO with its status")
def get_slo(app: App, name: str, tenants: TenantScope) -> dict[str, Any]:
    spec = slos.get_slo(app.store, name)
    check_within_scope(tenants, dict(spec.selector.items()), f"SLO {name!r}")
    answer = _views(app, [spec])[0]
    if spec.sli.kind is SliKind.GOODPUT:
        # What the SLO's good tokens cost over its window, held to its own targets.
        now = app.clock()
        window = Window.last(spec.window, now)
        answer["good_token_cost"] = good_token_cost(
            app.store, spec, app.cost_model(), window, app.retention.finest_for(window, now)
        )
    return answer


@router.put(
    "/{name}",
    dependencies=_ADMIN,
    summary="Create or replace an SLO (infersight/v1 or OpenSLO v1, YAML or JSON body)",
    description="The body is an SLO document; one that does not describe a valid SLO, or "
    "whose metadata.name differs from the path, is answered 400.",
    status_code=200,
    responses={201: {"description": "Created"}, 200: {"description": "Replaced"}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                media: {"schema": {"type": "object", "description": "an SLO document"}}
                for media in ("application/yaml", "application/json")
            },
        }
    },
)
async def put_slo(
    request: Request,
    app: App,
    name: Annotated[str, Path(pattern=f"^{NAME_PATTERN.pattern}$")],
    response: Response,
) -> dict[str, Any]:
    data = load_document(await request.body())
    check_document(data)  # a YAML body's strings (a JSON body's: api.limits.TextGuard)
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and "name" not in metadata:
        metadata["name"] = name
    document = read_document(data, [SLO])
    spec: SloSpec = document.value
    if spec.name != name:
        raise InvalidInput(
            "metadata.name differs from the name in the path",
            details={"path": name, "metadata.name": spec.name},
        )
    # An async route runs on the event loop: the store's work goes to the threadpool, so a
    # slow write never holds up the worker's other requests.
    outcome = await run_in_threadpool(apply, app.store, [document], now=app.clock())
    response.status_code = 201 if outcome.applied[0].created else 200
    return to_document(spec)


@router.delete("/{name}", dependencies=_ADMIN, status_code=204, summary="Delete an SLO")
def delete_slo(app: App, name: str) -> Response:
    slos.delete_slo(app.store, name)
    app.evaluator.retire(name, app.clock())
    return Response(status_code=204)
