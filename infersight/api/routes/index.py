"""``GET /api/v1/``: an index of the JSON API, the URL ``infersight demo`` prints.

It is generated from the app's routes, never written by hand: every operation under
``/api/v1`` of the OpenAPI document FastAPI builds from them, grouped by its tag (else the first
segment of its path), with its method, summary and a link, the groups' descriptions taken from
the document's tags, and where the full reference lives (``/openapi.json``, ``/docs``,
``/redoc``). It is behind the read scope like the rest of the API, and is itself left out of
the OpenAPI document (an index of the document, not an operation of the API).
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Depends, Request

from infersight.api.auth import Scope
from infersight.api.deps import requires
from infersight.api.params import KnownQueryRoute

PREFIX: Final = "/api/v1"
router = APIRouter(
    prefix=PREFIX,
    dependencies=[Depends(requires(Scope.READ))],
    route_class=KnownQueryRoute,
    include_in_schema=False,
)


def _group_of(path: str, operation: dict[str, Any]) -> str:
    tags = operation.get("tags") or []
    if tags:
        return str(tags[0])
    return path.removeprefix(PREFIX + "/").split("/", 1)[0] or "api"


def index_of(request: Request) -> dict[str, Any]:
    """The index of ``request.app``'s documented ``/api/v1`` operations.

    Read from the app's OpenAPI document, which FastAPI generates from the routes (and caches),
    so the index lists exactly what ``/docs`` documents, grouped by the same tags.
    """
    app = request.app
    document: dict[str, Any] = app.openapi()
    base = str(request.base_url).rstrip("/")  # as the caller reached us (root path included)
    described = {
        str(t.get("name")): str(t.get("description", ""))
        for t in document.get("tags", [])
        if isinstance(t, dict)
    }
    groups: dict[str, list[dict[str, Any]]] = {}
    for path, item in document.get("paths", {}).items():
        if not path.startswith(PREFIX + "/"):
            continue
        for method, operation in item.items():
            groups.setdefault(_group_of(path, operation), []).append(
                {
                    "method": method.upper(),
                    "path": path,
                    "href": base + path,
                    "summary": operation.get("summary") or operation.get("operationId", ""),
                }
            )
    return {
        "api": app.title,
        "version": app.version,
        "documentation": {"openapi": "/openapi.json", "docs": "/docs", "redoc": "/redoc"},
        "health": {"readiness": "/healthz", "liveness": "/livez", "metrics": "/metrics"},
        "groups": [
            {
                "name": name,
                "description": described.get(name, ""),
                "endpoints": sorted(endpoints, key=lambda e: (e["path"], e["method"])),
            }
            for name, endpoints in groups.items()
        ],
    }


@router.get("/", summary="An index of the API: its areas and endpoints, with links")
def api_index(request: Request) -> dict[str, Any]:
    return index_of(request)
