"""What the routes depend on: the app's context (``App``) and the caller's scope (``requires``).

``App`` is ``AppContext`` handed to a route by FastAPI (``app: App`` in its parameters);
``requires(scope)`` admits requests whose bearer token grants ``scope`` (unknown tokens are
counted by ``api.auth.FailureLimiter``: 429 past its limit). A token limited to tenants
passes only on routes that limit their answer to a tenant (``api.params.KnownQueryRoute``
marks those whose filters come from ``api.params.common``, which applies the scope): on any
other route it is 403, so a route cannot forget the scope. Neither adds a
parameter to the OpenAPI document but the bearer security requirement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer

from infersight.api.auth import GRANTS, Scope, refuse_scoped
from infersight.api.context import AppContext, context_of
from infersight.core.errors import Forbidden, Unauthorized


def app_context(request: Request) -> AppContext:
    return context_of(request.app)


App = Annotated[AppContext, Depends(app_context)]

#: The bearer scheme as the OpenAPI document declares it. It reads nothing itself
#: (``auto_error=False``); ``requires`` checks the header, so every failure keeps the one
#: error shape.
BEARER: Final = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An API token (INFERSIGHT_API_TOKENS): scope read for queries, admin for "
    "changes as well.",
)


def client_of(request: Request) -> str:
    """The address a request came from (the peer's: a proxy in front counts as one client)."""
    return request.client.host if request.client is not None else "unknown"


def tenants_of(request: Request) -> frozenset[str] | None:
    """The tenants the request's token is limited to (``None``: every tenant)."""
    return getattr(request.state, "tenants", None)


def _honours_tenants(request: Request) -> bool:
    """Whether the matched route limits its answer to a tenant (``TENANT_SCOPED``)."""
    route = request.scope.get("route")
    return bool(getattr(route, "honours_tenants", False))


def requires(scope: Scope) -> Callable[..., None]:
    """A FastAPI dependency that admits requests whose bearer token grants ``scope``.

    It depends on ``BEARER`` with ``scope`` as its scope, so the OpenAPI document lists the
    requirement per operation. The dashboard's session cookie is not accepted here: the JSON
    API wants a bearer token.
    """

    bearer = Security(BEARER, scopes=[scope.value])

    def check(request: Request, app: App, _bearer: Any = bearer) -> None:
        tokens = app.tokens
        if not tokens.enabled:
            return
        header = request.headers.get("authorization", "")
        kind, _, token = header.partition(" ")
        if kind.lower() != "bearer" or not token:
            raise Unauthorized("a bearer token is required")
        granted = tokens.check(token.strip(), client_of(request))
        if granted is None:
            raise Unauthorized("unknown API token")
        if scope not in GRANTS[granted]:
            raise Forbidden(f"this token lacks the {scope.value!r} scope")
        tenants = tokens.tenants_of(token.strip())
        request.state.tenants = tenants
        if tenants is not None and not _honours_tenants(request):
            refuse_scoped(tenants)

    return check
