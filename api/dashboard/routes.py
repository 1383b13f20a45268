"""The web dashboard: server-rendered pages under ``/ui/`` (``/`` redirects to the overview).

Pages are Jinja2 templates from the ``dashboards`` data package, filled by the view-models in
``api.dashboard_views`` / ``api.dashboard_fleet`` / ``api.dashboard_more``; charts are SVG
made on the server (``api.dashboard_svg``), so the pages work offline and need no CDN. The
stylesheet and the small script (legend toggles, auto-submitting filters, auto-refresh) are
served from ``dashboards/static`` at ``/ui/static/``.

With API tokens configured, a page needs a session (``api.dashboard_auth``: a login form
that takes a token and sets an HttpOnly, SameSite=Strict cookie) or a bearer header; without
one the browser is sent to ``/ui/login``. Every page is read-only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from api.dashboard import charts as svg
from api.dashboard import session as auth
from api.dashboard.context import RANGES, REFRESH, Context, parse_context, parse_quantile
from api.dashboard.views import cost as more
from api.dashboard.views import gpus as fleet
from api.dashboard.views import incident as one_incident
from api.dashboard.views import latency as views
from core.errors import InvalidInput, NotFound
from core.signals import SIGNALS
from core.timestamps import iso
from core.window import Window, format_duration

log = logging.getLogger(__name__)
router = APIRouter(include_in_schema=False)
Build = Callable[[Any, Context, dict[str, str]], dict[str, Any]]

PAGES: Final = (
    ("overview", "Overview"),
    ("latency", "Latency"),
    ("gpus", "GPUs"),
    ("cost", "Cost"),
    ("incidents", "Incidents"),
    ("baselines", "Baselines"),
    ("capacity", "Capacity"),
)
STATIC: Final = {"app.css": "text/css; charset=utf-8", "app.js": "text/javascript; charset=utf-8"}
MAX_LOGIN_BODY: Final = 4096


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dashboards", "templates"),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        seconds=lambda v: "–" if v is None else svg.seconds(v),
        percent=lambda v, digits=1: "–" if v is None else f"{v * 100:.{digits}f} %",
        number=lambda v: "–" if v is None else svg.plain(v),
        iso=lambda v: "" if v is None else iso(v),
        when=lambda v: "" if v is None else v.strftime("%Y-%m-%d %H:%M UTC"),
        duration=_duration,
        objective=lambda v: f"{v * 100:.6g} %",
        burn=_burn,
    )
    env.globals.update(
        pages=PAGES,
        ranges=list(RANGES),
        refreshes=list(REFRESH),
        signal_label=_signal_label,
        signal_value=_signal_value,
        metric_value=more.metric_value,
        metric_change=more.metric_change,
        change_bar=more.change_bar,
    )
    return env


def _duration(delta: timedelta) -> str:
    days, rest = divmod(int(delta.total_seconds()), 86400)
    if days and not rest:
        return f"{days} days" if days > 1 else "1 day"
    return format_duration(delta)


def _burn(rate: float) -> str:
    if rate >= 10:
        return f"{rate:,.0f}×"
    return f"{rate:.2g}×" if rate else "0"


def _signal_label(name: str) -> str:
    """A diagnosis signal in words (``core.signals.SIGNALS``: ``unit: meaning``)."""
    meaning = SIGNALS.get(name, "").partition(": ")[2]
    return meaning or name.replace("_", " ")


def _signal_value(name: str, value: float | None) -> str:
    if value is None:
        return "–"
    unit = SIGNALS.get(name, "").partition(":")[0]
    if unit == "s":
        return svg.seconds(value)
    if unit == "ratio":
        return f"{value * 100:.3g} %"
    if unit in ("count", "tokens", ""):
        return svg.plain(value)
    return f"{svg.plain(value)} {unit}"


_ENV = _environment()


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


def _login_redirect(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303)


def _page(
    page: str, build: Build, *, default_range: str = "1h", template: str = ""
) -> Callable[..., Response]:
    def handler(request: Request) -> Response:
        state = request.app.state
        now = state.clock()
        scope = auth.viewer_scope(request, now)
        if not auth.can_read(scope):
            return _login_redirect(request)
        query = {**request.query_params, **request.path_params}
        common = {
            "page": page,
            "auth_on": state.tokens.enabled,
            "role": "viewer" if scope is not None and scope.value == "read" else "admin",
        }
        started = time.perf_counter()
        try:
            ctx = parse_context(query, now, state.settings.max_query_days, default_range)
            data = build(state, ctx, query)
            menus = views.menus(state, ctx)
        except (InvalidInput, NotFound) as exc:
            ctx = parse_context({}, now, state.settings.max_query_days, default_range)
            return _render(
                "error.html", 400 if isinstance(exc, InvalidInput) else 404,
                ctx=ctx, menus={}, error=exc, **common,
            )  # fmt: skip
        elapsed_ms = (time.perf_counter() - started) * 1000
        values = {"ctx": ctx, "menus": menus, **common, **data}  # a page may refine ctx
        return _render(template or f"{page}.html", elapsed_ms=elapsed_ms, **values)

    handler.__name__ = f"page_{template.removesuffix('.html') or page}"
    return handler


# -- pages ------------------------------------------------------------------------------------


def _overview(state: Any, ctx: Context, _query: dict[str, str]) -> dict[str, Any]:
    return {**views.overview(state, ctx), "cost": more.cost_summary(state, ctx)}


def _latency(state: Any, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    q = parse_quantile(query.get("q", ""))
    heat = query.get("heatmap", "ttft")
    if heat not in views.LATENCY_METRICS:
        raise InvalidInput("heatmap must be ttft, tpot or e2e")
    ctx_q = ctx.with_extra(**({"q": f"{q:g}"} if q != 0.99 else {}))
    ctx_q = ctx_q.with_extra(**({"heatmap": heat} if heat != "ttft" else {}))
    return {"q": q, "heat_metric": heat, **views.latency(state, ctx_q, q, heat), "ctx": ctx_q}


def _gpus(state: Any, ctx: Context, _query: dict[str, str]) -> dict[str, Any]:
    return fleet.gpus(state, ctx)


def _incidents(state: Any, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    which = query.get("state", "all")
    if which not in ("all", "firing", "resolved"):
        raise InvalidInput("state must be all, firing or resolved")
    ctx_s = ctx.with_extra(**({"state": which} if which != "all" else {}))
    return {
        **fleet.incident_list(state, ctx_s, which),
        "state_filter": which,
        "ctx": ctx_s,
        "duration_text": fleet.duration_text,
    }


def _incident(state: Any, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    return {
        **one_incident.detail(state, ctx, one_incident.incident_id_of(query)),
        "duration_text": fleet.duration_text,
    }


def _cost(state: Any, ctx: Context, _query: dict[str, str]) -> dict[str, Any]:
    return more.cost(state, ctx)


def _baselines(state: Any, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    name = query.get("baseline", "")
    ctx_b = ctx.with_extra(**({"baseline": name} if name else {}))
    return {**more.baselines(state, ctx_b, name), "ctx": ctx_b}


def _capacity(state: Any, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    run = query.get("run", "")
    ctx_r = ctx.with_extra(**({"run": run} if run else {}))
    return {**more.capacity(state, ctx_r, run), "ctx": ctx_r}


_BUILDERS: Final[dict[str, tuple[Build, str]]] = {
    "overview": (_overview, "1h"),
    "latency": (_latency, "1h"),
    "gpus": (_gpus, "1h"),
    "cost": (_cost, "24h"),
    "incidents": (_incidents, "24h"),
    "baselines": (_baselines, "1h"),
    "capacity": (_capacity, "24h"),
}
for _name, (_build, _default) in _BUILDERS.items():
    router.add_api_route(
        f"/ui/{_name}", _page(_name, _build, default_range=_default), methods=["GET"]
    )


router.add_api_route(
    "/ui/incidents/{incident_id}",
    _page("incidents", _incident, default_range="24h", template="incident.html"),
    methods=["GET"],
)


@router.get("/")
@router.get("/ui")
@router.get("/ui/")
def home() -> RedirectResponse:
    return RedirectResponse("/ui/overview", status_code=307)


# -- login ------------------------------------------------------------------------------------


@router.get("/ui/login")
def login_form(request: Request, next: str = "") -> Response:
    if not request.app.state.tokens.enabled:
        return RedirectResponse(auth.safe_next(next), status_code=303)
    return _render("login.html", next=auth.safe_next(next), error="")


@router.post("/ui/login")
async def login(request: Request) -> Response:
    # A sign-in posted from another site (a login CSRF) never gets here: api.origin refuses it.
    body = await request.body()
    if len(body) > MAX_LOGIN_BODY:
        raise InvalidInput("the login form is too large")
    form = {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
    target = auth.safe_next(form.get("next"))
    token = form.get("token", "").strip()
    state = request.app.state
    scope = state.tokens.scope_of(token) if token and state.tokens.enabled else None
    if scope is None:
        log.info("dashboard login refused (unknown token)")
        return _render("login.html", 401, next=target, error="That token is not valid.")
    response = RedirectResponse(target, status_code=303)
    auth.set_session(response, request, auth.issue(token, state.clock()))
    return response


@router.post("/ui/logout")
def logout(request: Request) -> Response:
    if request.app.state.tokens.enabled:
        auth.revoke(request, request.app.state.clock())
    response = RedirectResponse("/ui/login", status_code=303)
    auth.clear_session(response)
    return response


@router.get("/ui/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:
        raise NotFound(f"no static file {name!r}")
    data = resources.files("dashboards").joinpath("static", name).read_bytes()
    return Response(data, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})


def window_text(window: Window) -> str:
    return f"{iso(window.start)} – {iso(window.end)}"
