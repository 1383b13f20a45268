"""What the routes depend on: the app's context (``App``) and the caller's scope (``requires``).

``App`` is ``AppContext`` handed to a route by FastAPI (``app: App`` in its parameters);
``requires(scope)`` admits requests whose bearer token grants ``scope``. Neither adds a
parameter to the OpenAPI document but the bearer security requirement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer

from infersight.api.auth import GRANTS, Scope
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
        granted = tokens.scope_of(token.strip())
        if granted is None:
            raise Unauthorized("unknown API token")
        if scope not in GRANTS[granted]:
            raise Forbidden(f"this token lacks the {scope.value!r} scope")

    return check
