"""The web dashboard's routes: server-rendered pages under ``/ui/`` (``/`` redirects to the
overview), the login form and the static assets.

Pages are Jinja2 templates from the ``dashboards`` data package, filled by the view-models in
``api.dashboard.views`` (one module a page: its ``page`` function, name, title and default
range); charts are SVG made on the server (``api.dashboard.charts``), so the pages work offline
and need no CDN. The stylesheet and the small script (legend toggles, auto-submitting filters,
auto-refresh) are served from ``dashboards/static`` at ``/ui/static/``.

With API tokens configured, a page needs a session (``api.dashboard.session``: a login form
that takes a token and sets an HttpOnly, SameSite=Strict cookie) or a bearer header; without
one the browser is sent to ``/ui/login``. Every page is read-only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from infersight.api import reads
from infersight.api.auth import tenant_filter
from infersight.api.context import AppContext, context_of
from infersight.api.dashboard import formatting, shared
from infersight.api.dashboard import session as auth
from infersight.api.dashboard.context import (
    FILTERS,
    RANGES,
    REFRESH,
    Context,
    parse_context,
)
from infersight.api.dashboard.views import (
    baselines,
    budgets,
    capacity,
    cost,
    gpus,
    incident,
    incidents,
    latency,
    overview,
    scaling,
    slo,
)
from infersight.api.deps import App, client_of
from infersight.core.errors import InvalidInput, NotFound
from infersight.core.records import ATTRIBUTED_LABELS

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
Build = Callable[[AppContext, Context, dict[str, str]], dict[str, Any]]

#: The pages of the navigation, in its order.
VIEWS: Final = (overview, latency, gpus, cost, budgets, incidents, baselines, capacity, scaling)
PAGES: Final = tuple((view.NAME, view.TITLE) for view in VIEWS)
STATIC: Final = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}
MAX_LOGIN_BODY: Final = 4096
#: The pages whose every figure is limited to the viewer's tenants (``Context.tenants``;
#: incidents: those of SLOs within them): the only ones a token limited to tenants may see
#: (``api.auth``). The others answer 403 with a page that says why (``_needs_unscoped``).
TENANT_PAGES: Final = frozenset({"latency", "incidents", "incident"})
#: A page whose data may be older than this says so (``api.reads``: a standby behind).
STALE_NOTE_S: Final = 10.0


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("infersight.dashboards", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        # The templates ship in the package: no stat of each one per page view.
        auto_reload=False,
    )
    env.filters.update(formatting.FILTERS)
    env.globals.update(
        pages=PAGES,
        ranges=list(RANGES),
        refreshes=list(REFRESH),
        filter_labels=FILTERS,
        attributed_labels=ATTRIBUTED_LABELS,
        **formatting.HELPERS,
    )
    return env


_ENV = _environment()


def compile_templates() -> None:
    """Compile every template now (once per process; ``create_app`` calls it): sixteen views
    that open at once after a start otherwise each compiled the same templates."""
    for name in _ENV.list_templates(extensions=["html"]):
        _ENV.get_template(name)


def _render(name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    html = _ENV.get_template(name).render(**values)
    return HTMLResponse(
        html,
        status_code=status_code,
        headers={
            # Everything the page needs comes from this server: no inline script, no CDN.
            "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )


def _stale_note(staleness_s: float | None) -> str:
    """What the page says of its data's age: nothing while it is fresher than
    ``STALE_NOTE_S`` (a cached page is up to the answer TTL old anyway)."""
    if staleness_s is None:
        return "The standby this page was read from cannot say how far behind it is."
    if staleness_s < STALE_NOTE_S:
        return ""
    behind = formatting.duration(timedelta(seconds=round(staleness_s)))
    return (
        f"This page was read from a standby {behind} behind the primary: the newest data "
        "may be missing."
    )


def _needs_unscoped(
    app: AppContext, now: datetime, page: str, tenants: frozenset[str], common: dict[str, Any]
) -> Response:
    """The 403 page a viewer limited to tenants gets on a page that cannot be limited to
    them: what it shows instead, and what would show it."""
    title = dict(PAGES).get(page, page)
    open_to = ", ".join(title for name, title in PAGES if name in TENANT_PAGES)
    message = (
        f"The {title} page shows figures that cannot be limited to a tenant (the fleet's GPUs, "
        f"instances and their cost, capacity). Your token is limited to "
        f"{', '.join(sorted(tenants))}: sign in with an unscoped read token to see this page. "
        f"The pages that show your tenants' data: {open_to}."
    )
    ctx = parse_context({}, now, app.settings.max_query_days)
    links = [(f"Go to {title}", f"/ui/{name}") for name, title in PAGES if name in TENANT_PAGES]
    error = {
        "title": "This page needs an unscoped token",
        "message": message,
        "details": {"tenants": ", ".join(sorted(tenants))},
        "links": links,
    }
    return _render("error.html", 403, ctx=ctx, menus={}, status=403, error=error, **common)


def _login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303)


#: The query parameters every page reads (``context.parse_context``).
CONTEXT_PARAMS: Final = frozenset(("range", "start", "end", "refresh", *FILTERS))


def _page(
    page: str,
    build: Build,
    *,
    route: str,
    params: tuple[str, ...] = (),
    default_range: str = "1h",
    template: str = "",
) -> Callable[..., Response]:
    """The handler of the page at ``route`` (its path template, which keys its kept answers).

    Only the context's parameters and the page's own ``params`` (with the path's) reach the
    page and its cache key: any other parameter is ignored, so it can neither pick another
    page's kept answer nor fill the cache with copies of one page.
    """
    known = CONTEXT_PARAMS | set(params)

    def handler(request: Request, app: App) -> Response:
        now = app.clock()
        scope = auth.viewer_scope(app, request, now)
        if not auth.can_read(scope):
            return _login_redirect(request)
        asked = {k: v for k, v in request.query_params.items() if k in known}
        query = {**asked, **request.path_params}
        tenants = auth.viewer_tenants(app, request)
        common = {
            "page": page,
            "auth_on": app.tokens.enabled,
            "role": "viewer" if scope is not None and scope.value == "read" else "admin",
        }
        cache_query = query
        if tenants is not None:  # a token limited to tenants: only pages that honour it
            if page not in TENANT_PAGES:
                return _needs_unscoped(app, now, page, tenants, common)
            # A tenant outside the scope is 403; none named: all of the viewer's tenants.
            tenant_filter(tenants, query.get("tenant") or None)
            cache_query = {**query, "\0tenants": "|".join(sorted(tenants))}
        started = time.perf_counter()
        try:
            ctx = parse_context(query, now, app.settings.max_query_days, default_range)
            if tenants is not None:
                ctx = replace(ctx, tenants=tenants)

            def compute(reading: AppContext) -> tuple[dict[str, Any], dict[str, list[str]]]:
                return build(reading, ctx, query), shared.menus(reading, ctx)

            answer: reads.Stamped = app.answers.get_or_compute(
                app.answers.key(route, cache_query, now), lambda: reads.stamped(app, now, compute)
            )
            data, menus = answer.value
            if tenants is not None:  # the tenant menu names the viewer's tenants alone
                menus = {**menus, "tenant": [t for t in menus.get("tenant", []) if t in tenants]}
            staleness = answer.staleness_s(time.monotonic())
        except (InvalidInput, NotFound) as exc:
            ctx = parse_context({}, now, app.settings.max_query_days, default_range)
            status = 400 if isinstance(exc, InvalidInput) else 404
            return _render(
                "error.html", status, ctx=ctx, menus={}, error=exc, status=status, **common
            )
        elapsed_ms = (time.perf_counter() - started) * 1000
        values = {"ctx": ctx, "menus": menus, **common, **data}  # a page may refine ctx
        rendered = _render(
            template or f"{page}.html",
            elapsed_ms=elapsed_ms,
            stale_note=_stale_note(staleness),
            **values,
        )
        reads.stamp_response(rendered, staleness)
        return rendered

    handler.__name__ = f"page_{template.removesuffix('.html') or page}"
    return handler


for _view in VIEWS:
    _route = f"/ui/{_view.NAME}"
    router.add_api_route(
        _route,
        _page(_view.NAME, _view.page, route=_route, params=getattr(_view, "PARAMS", ()),
              default_range=_view.DEFAULT_RANGE),
        methods=["GET"],
    )  # fmt: skip
_INCIDENT_ROUTE: Final = "/ui/incidents/{incident_id}"
router.add_api_route(
    _INCIDENT_ROUTE,
    _page(incident.NAME, incident.page, route=_INCIDENT_ROUTE,
          default_range=incident.DEFAULT_RANGE, template=incident.TEMPLATE),
    methods=["GET"],
)  # fmt: skip
_SLO_ROUTE: Final = "/ui/slos/{slo_name}"
router.add_api_route(
    _SLO_ROUTE,
    _page(slo.NAME, slo.page, route=_SLO_ROUTE, default_range=slo.DEFAULT_RANGE,
          template=slo.TEMPLATE),
    methods=["GET"],
)  # fmt: skip


@router.get("/")
@router.get("/ui")
@router.get("/ui/")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/overview", status_code=307)


# -- errors on a browser's paths ---------------------------------------------------------------

#: Paths that never get an HTML error: the JSON API and the machine endpoints.
_MACHINE_PATHS: Final = ("/api/", "/openapi.json", "/metrics", "/healthz", "/docs", "/redoc")


def _is_browser_path(request: Request) -> bool:
    path = request.url.path
    if path == "/ui" or path.startswith("/ui/"):
        return True
    if path.startswith(_MACHINE_PATHS):
        return False
    return "text/html" in request.headers.get("accept", "")


def error_page(
    request: Request, status: int, message: str, details: dict[str, Any]
) -> Response | None:
    """The dashboard's error page (its navigation, a link home) for an error on a browser's
    path: under ``/ui/``, or elsewhere outside the API when the client asks for HTML; else
    ``None`` (the JSON error shape). ``api.errors.install`` calls it."""
    if not _is_browser_path(request):
        return None
    app = context_of(request.app)
    now = app.clock()
    try:
        scope = auth.viewer_scope(app, request, now)
    except Exception:  # the store is down: the page still renders, signed out
        scope = None
    if status == 404:
        message = f"There is no page at {request.url.path}."
    ctx = parse_context({}, now, app.settings.max_query_days)
    # A 503 passes (the store was slow, or the answers' turns were taken): the same view again,
    # by the path as it was sent (``url.path`` is decoded: ``a%2Fb`` would be two segments).
    raw = request.scope.get("raw_path") or request.url.path.encode()
    path = raw.decode("latin-1")
    retry = ""
    if status == 503 and path.startswith("/ui/"):
        retry = path + (f"?{request.url.query}" if request.url.query else "")
    return _render(
        "error.html",
        status,
        ctx=ctx,
        menus={},
        page="",
        status=status,
        retry=retry,
        error={"message": message, "details": {} if status == 404 else details},
        auth_on=app.tokens.enabled and scope is not None,
        role="viewer" if scope is not None and scope.value == "read" else "admin",
    )


# -- login ------------------------------------------------------------------------------------


@router.get("/ui/login")
def login_form(app: App, next: str = "") -> Response:
    if not app.tokens.enabled:
        return RedirectResponse(auth.safe_next(next), status_code=303)
    return _render("login.html", next=auth.safe_next(next), error="")


@router.post("/ui/login")
async def login(request: Request, app: App) -> Response:
    # A sign-in posted from another site (a login CSRF) never gets here: api.origin refuses it.
    body = await request.body()
    if len(body) > MAX_LOGIN_BODY:
        raise InvalidInput("the login form is too large")
    form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
    target = auth.safe_next(form.get("next"))
    token = form.get("token", "").strip()
    scope = app.tokens.check(token, client_of(request)) if token and app.tokens.enabled else None
    if scope is None:
        log.info("dashboard login refused (unknown token)")
        return _render("login.html", 401, next=target, error="That token is not valid.")
    response = RedirectResponse(target, status_code=303)
    auth.set_session(response, request, auth.issue(token, app.clock()))
    return response


@router.post("/ui/logout")
def logout(request: Request, app: App) -> Response:
    if app.tokens.enabled:
        auth.revoke(app, request, app.clock())
    response = RedirectResponse("/ui/login", status_code=303)
    auth.clear_session(response)
    return response


@router.get("/ui/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:
        raise NotFound(f"no static file {name!r}")
    data = resources.files("infersight.dashboards").joinpath("static", name).read_bytes()
    return Response(data, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})
