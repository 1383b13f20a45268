"""``create_app(settings, engine, clock)``: the API service, built from its arguments only.

Wires the routes, the one error shape, request limits, authentication, ``/metrics`` (its own
registry), ``/healthz`` and the scheduled jobs (started with the app's lifespan when
``settings.run_jobs``; ``infersight serve`` runs it under uvicorn).

Given ``prepare`` (the migrations, in ``infersight serve``), the app starts whether or not the
store answers: ``api.startup.StoreGate`` retries ``prepare`` with backoff and starts the jobs
once it succeeds; until then ``/healthz`` answers 503 ``"degraded: waiting for the store
since …"`` and requests that need the store answer 503 ``unavailable``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from fastapi import Depends, FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine

from alerts.notify import Notifier
from alerts.routing import Router
from alerts.rules import load_rules
from api import errors, openapi
from api.auth import Scope, check_exposure, parse_tokens, requires
from api.dashboard import routes as dashboard
from api.limits import BodyLimit
from api.metrics import CostCollector, StoreCollector, registry_for
from api.origin import AllowedHosts, OriginGuard
from api.routes import alerts, baselines, capacity, cost, query, slos
from api.settings import ApiSettings
from api.startup import add_healthz, install_store_errors, lifecycle
from core.burn import IncidentListener, Policy
from service.cost_spec import active_model
from service.diagnosis import DiagnosisListener
from service.evaluation import Evaluator, default_policy
from service.jobs import Jobs, LeaderLock, leader_lock
from service.notifications import Announcer, Delivery, FollowUp
from service.reports import WeeklyReports, parse_schedule
from storage.maintenance import RetentionPolicy
from storage.queries import DEFAULT_EXACT_MAX_ROWS

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


def create_app(
    settings: ApiSettings,
    engine: Engine,
    clock: Clock = system_clock,
    *,
    retention: RetentionPolicy | None = None,
    exact_max_rows: int = DEFAULT_EXACT_MAX_ROWS,
    policy: Policy | None = None,
    listeners: Sequence[IncidentListener] = (),
    lock: LeaderLock | None = None,
    notifiers: Mapping[str, Notifier] | None = None,
    router: Router | None = None,
    dashboard_url: str = "",
    prepare: Callable[[], object] | None = None,
) -> FastAPI:
    """The API for ``engine``'s store. Raises ``ConfigurationError`` for unsafe settings."""
    tokens = parse_tokens(settings.api_tokens, settings.api_tokens_file)
    host = settings.listen.rpartition(":")[0] or settings.listen
    check_exposure(host, tokens, settings.insecure_no_auth)
    retention = retention or RetentionPolicy()
    policy = policy or default_policy()
    rules = load_rules()
    # Diagnosis first: the listeners after it (notifications) find the incident diagnosed.
    announcer = Announcer(engine, notifiers, clock, router, dashboard_url) if notifiers else None
    delivery = Delivery(engine, notifiers) if notifiers else None
    diagnosis = DiagnosisListener(engine, pack=rules, announce=announcer)
    listeners = (diagnosis, *listeners)

    evaluator = Evaluator(engine, policy, listeners, retention.finest_for)
    jobs = Jobs(
        engine,
        evaluator,
        retention,
        clock,
        lock or leader_lock(engine),
        settings.evaluation_interval_s,
        settings.maintenance_interval_s,
        deliver=FollowUp(diagnosis, delivery),
        report=WeeklyReports(
            engine,
            lambda: active_model(engine, settings.cost_model),
            settings.report_timezone,
            retention.finest_for,
            notifiers=list(notifiers or {}),
            base_url=dashboard_url,
        ),
        report_cron={
            **parse_schedule(settings.report_schedule),
            "timezone": settings.report_timezone,
        },
    )

    lifespan, gate = lifecycle(jobs, settings.run_jobs, prepare)

    app = FastAPI(
        title="infersight",
        summary="SLO and cost observability for LLM inference fleets",
        version="v1",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.clock = clock
    app.state.tokens = tokens
    app.state.retention = retention
    app.state.exact_max_rows = exact_max_rows
    app.state.policy = policy
    app.state.evaluator = evaluator
    app.state.rules = rules
    app.state.delivery = delivery
    app.state.jobs = jobs
    app.state.store_gate = gate
    registry = registry_for(
        StoreCollector(engine, policy, clock, retention.finest_for, exact_max_rows),
        CostCollector(
            engine, lambda: active_model(engine, settings.cost_model), clock, retention.finest_for
        ),
        ttl_s=settings.metrics_cache_s,
    )

    errors.install(app)
    install_store_errors(app)
    openapi.install(app, auth=tokens.enabled)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    allowed = AllowedHosts(host, settings.allowed_hosts.split(","))
    app.add_middleware(OriginGuard, allowed=allowed)  # outermost: before anything is read
    for routes in (
        query.router,
        slos.router,
        alerts.router,
        cost.router,
        capacity.router,
        baselines.router,
        dashboard.router,
    ):
        app.include_router(routes)

    @app.get("/metrics", dependencies=[Depends(requires(Scope.READ))], include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    add_healthz(app, engine, jobs, gate)
    return app
