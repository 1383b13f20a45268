"""``create_app(settings, store, clock)``: the API service, built from its arguments only.

The app's context (``api.context.build_context``: tokens, policy, rules, evaluator, the
scheduled jobs) is built once; the app adds the routes (``api.routes``, ``api.dashboard``), the
one error shape (an HTML page on the dashboard's paths), request limits (a body's size; no
control character in any parameter, ``api.limits``), the OpenAPI document
with ``/docs`` and ``/redoc`` served offline (``api.docs``), ``/metrics`` (its own registry) and
``/healthz``. The scheduled jobs start with the app's lifespan when ``settings.run_jobs``
(``infersight serve`` runs it under uvicorn).

Given ``prepare`` (the migrations, in ``infersight serve``), the app starts whether or not the
store answers: ``api.startup.StoreGate`` retries ``prepare`` with backoff and starts the jobs
once it succeeds; until then ``/healthz`` answers 503 ``"degraded: waiting for the store
since …"`` and requests that need the store answer 503 ``unavailable``.
"""

from __future__ import annotations

from typing import Final, Unpack

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from sqlalchemy import Engine

from infersight.api import docs, errors, metrics, openapi
from infersight.api.context import Clock, Wiring, build_context, listen_host, system_clock
from infersight.api.dashboard import routes as dashboard
from infersight.api.limits import BodyLimit, TextGuard
from infersight.api.origin import AllowedHosts, OriginGuard
from infersight.api.params import KnownQueryRoute
from infersight.api.routes import (
    attribution,
    baselines,
    bills,
    budgets,
    capacity,
    cost,
    incidents,
    index,
    ingest,
    profiles,
    purchasing,
    query,
    scaling,
    slos,
)
from infersight.api.settings import ApiSettings
from infersight.api.startup import add_healthz, install_store_errors, lifecycle
from infersight.storage.seam import Store

#: In the order they are matched and documented.
ROUTERS: Final[tuple[APIRouter, ...]] = (
    query.router,
    slos.router,
    incidents.router,
    cost.router,
    attribution.router,
    bills.router,
    budgets.router,
    capacity.router,
    baselines.router,
    scaling.router,
    purchasing.router,
    ingest.router,
    profiles.router,
    profiles.ingest_router,
    index.router,
    dashboard.router,
    docs.router,
)


def _check_query_routes(app: FastAPI) -> None:
    """Every documented route under ``/api/v1`` refuses unknown query parameters."""
    # FastAPI keeps an included router as one entry of ``app.routes``: walk its contexts.
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if not isinstance(route, APIRoute) or not context.include_in_schema:
            continue
        path = context.path or ""
        if path.startswith("/api/v1/") and not isinstance(route, KnownQueryRoute):
            raise TypeError(f"{path} is not a KnownQueryRoute (api.params)")


def create_app(
    settings: ApiSettings,
    store: Store | Engine,
    clock: Clock = system_clock,
    **wiring: Unpack[Wiring],
) -> FastAPI:
    """The API for ``store`` (``service.store.open_store``'s; an engine is wrapped in the SQL
    store; ``wiring``: see ``api.context.Wiring``). Raises ``ConfigurationError`` for unsafe
    settings."""
    context = build_context(settings, store, clock, **wiring)
    dashboard.compile_templates()
    app = FastAPI(
        title="infersight",
        summary="SLO and cost observability for LLM inference fleets",
        version="v1",
        docs_url=None,  # api.docs serves /docs and /redoc without a CDN
        redoc_url=None,
        lifespan=lifecycle(context.jobs, settings.run_jobs, context.store_gate),
    )
    app.state.context = context
    errors.install(app, html=dashboard.error_page)
    install_store_errors(app, html=dashboard.error_page)
    openapi.install(app, auth=context.tokens.enabled)
    app.add_middleware(TextGuard, html=dashboard.error_page)  # inside BodyLimit: bounded
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    allowed = AllowedHosts(listen_host(settings), settings.allowed_hosts.split(","))
    app.add_middleware(OriginGuard, allowed=allowed)  # outermost: before anything is read
    for routes in ROUTERS:
        app.include_router(routes)
    _check_query_routes(app)
    metrics.install(app, context)
    add_healthz(app, context.store, context.jobs, context.store_gate, worker=context.worker)
    return app
