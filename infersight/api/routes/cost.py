"""``/api/v1/cost`` (unit economics of any window) and the cost model in use.

``GET /api/v1/cost?start=&end=&model=&instance=&tenant=&priority=&group_by=model`` answers,
per group and in total: requests, tokens (input, output, good), GPU-hours, idle GPU-hours,
energy, cost (total, input, output, idle), cost per million tokens (total, input, output,
good), tokens per joule and average GPU utilisation; plus each instance's cost. Good tokens
say what they were measured against: ``good_basis`` per line, and ``good_tokens`` (basis,
method, the limits used with their SLOs and models, a sentence) for the answer. Money and
hours are decimal strings (never rounded through binary floats) with the currency beside
them. ``GET /api/v1/cost/model`` shows the cost model in use; ``PUT`` replaces it (admin).

Stored cost reports: ``GET /api/v1/reports`` lists them (newest first), ``GET
/api/v1/reports/{id}`` answers a report's JSON, ``…/html`` and ``…/csv`` its other renderings;
``POST /api/v1/reports/weekly?week=2026-W48`` (admin) generates one now (``&partial=true``: the
current week, to date).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from infersight.api.auth import Scope
from infersight.api.context import AppContext
from infersight.api.deps import App, requires, tenants_of
from infersight.api.errors import described, responses
from infersight.api.limits import check_document
from infersight.api.params import WINDOW_RULES, Common, Id, KnownQueryRoute, common
from infersight.api.reads import read_answer
from infersight.core.cost import CostLine, CostModel
from infersight.core.errors import InvalidInput
from infersight.core.timestamps import iso
from infersight.service import reports
from infersight.service.apply import apply
from infersight.service.attribution import bounded_statements, fold_additive, top_of
from infersight.service.cost_spec import COST_MODEL, to_document
from infersight.service.cost_view import cost, cost_dict
from infersight.service.documents import read
from infersight.service.reports import ReportInfo, default_week

Params = Annotated[Common, Depends(common)]
#: ``week``: an ISO week, ``2026-W48``.
WEEK_PATTERN = described(
    r"^[1-9][0-9]{3}-W(?:0[1-9]|[1-4][0-9]|5[0-3])$", "an ISO week, written like 2026-W48"
)
router = APIRouter(prefix="/api/v1", route_class=KnownQueryRoute, tags=["cost"])
_READ = [Depends(requires(Scope.READ))]
_ADMIN = [Depends(requires(Scope.ADMIN))]


@router.get(
    "/cost",
    summary="Cost, cost per million tokens, energy and idle cost per group",
    description=WINDOW_RULES
    + " Money fields (cost, idle_cost, input_cost, output_cost and cost_per_million_tokens"
    " total/input/output/good) are decimal strings with six places in `currency`, the cost"
    " model's ISO 4217 code (e.g. USD); a unit cost is never rounded further.",
    dependencies=_READ,
)
def get_cost(app: App, params: Params, request: Request, response: Response) -> dict[str, Any]:
    tenants = tenants_of(request)
    return read_answer(app, request, response, lambda r: _cost(r, params, tenants))


def _cost(app: AppContext, params: Common, tenants: frozenset[str] | None = None) -> dict[str, Any]:
    result = cost(
        app.store,
        params.window,
        app.cost_model(),
        params.selector,
        params.group_by,
        finest=app.retention.finest_for(params.window, params.now),
    )
    # Tenants, teams and workloads past the top N by cost: one (other) line (issue 34).
    tops = top_of(result.groups, result.group_by, app.settings.attribution_top_n, _by_cost)
    if tops:
        folded = fold_additive(result.groups, tops, lambda a, b, labels: a.plus(b, labels))
        result = replace(result, groups=tuple(folded))
    answer = cost_dict(result)
    if tops:
        answer["bounded"] = bounded_statements(tops)
    if tenants is not None:
        # A token limited to tenants: its requests' share of each instance's cost (the lines,
        # filtered by params.common), not the instances' own prices, use or idle time.
        answer.update(instances=[], unpriced_gpus=[], unmetered_instances=[])
        answer["limited_to_tenants"] = sorted(tenants)
    return answer


def _by_cost(line: CostLine) -> float:
    return float(line.cost)


@router.get("/cost/model", summary="The cost model in use", dependencies=_READ)
def get_model(app: App) -> dict[str, Any]:
    return to_document(app.cost_model())


@router.put(
    "/cost/model",
    summary="Replace the cost model in use (admin)",
    description="The body is one CostModel document (YAML or JSON) named as the cost_model "
    "setting; anything else is answered 400.",
    dependencies=_ADMIN,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                media: {"schema": {"type": "object", "description": "a CostModel document"}}
                for media in ("application/yaml", "application/json")
            },
        }
    },
)
async def put_model(request: Request, app: App) -> dict[str, Any]:
    documents = read(await request.body(), [COST_MODEL])
    if len(documents) != 1:
        raise InvalidInput("send exactly one CostModel document")
    model: CostModel = documents[0].value
    check_document(to_document(model))  # a YAML body's strings: api.limits.TextGuard
    name = app.settings.cost_model
    if model.name != name:
        raise InvalidInput(
            f"the cost model in use is named {name!r} (the cost_model setting)",
            details={"name": model.name},
        )
    now: datetime = app.clock()
    # Off the event loop: the store's work goes to the threadpool.
    await run_in_threadpool(apply, app.store, documents, now=now, cost_model=name)
    return to_document(model)


# -- stored reports -------------------------------------------------------------------------


def _info(info: ReportInfo) -> dict[str, Any]:
    base = f"/api/v1/reports/{info.id}"
    return {
        "id": info.id,
        "kind": info.kind,
        "period": info.period,
        "start": iso(info.start),
        "end": iso(info.end),
        "currency": info.currency,
        "created_at": iso(info.created_at),
        "summary": info.summary,
        "links": {"json": base, "html": f"{base}/html", "csv": f"{base}/csv"},
    }


@router.get("/reports", summary="Stored cost reports, newest first", dependencies=_READ)
def list_reports(
    app: App,
    kind: Annotated[str | None, Query(max_length=16)] = None,
    limit: Annotated[int, Query(ge=1, le=reports.MAX_LIST)] = 52,
) -> dict[str, Any]:
    infos = reports.list_reports(app.store, kind, limit)
    return {"reports": [_info(i) for i in infos]}


@router.post(
    "/reports/weekly",
    summary="Generate a weekly report now (admin)",
    description="A week that has not ended yet (in the report time zone) is answered 400 "
    "unless `partial=true`: then the report covers the week to date (until now) and says so "
    "(`partial` in the answer and the report), as `infersight report weekly --partial` does; "
    "the whole week's report replaces it once generated. A week that has not started, week "
    "53 of a year that has 52, or a week whose window cannot be represented (after 9999-W51) "
    "is answered 400. Without `week`: the week that ended last, or with `partial=true` the "
    "week in progress. A week with no data at all (no requests, no GPU samples) is answered "
    "404 `no_data` and nothing is stored.",
    dependencies=_ADMIN,
    responses=responses(404),
)
def generate_weekly(
    app: App,
    week: Annotated[
        str | None, Query(pattern=WEEK_PATTERN, description="ISO week, e.g. 2026-W48")
    ] = None,
    partial: Annotated[
        bool, Query(description="Allow the current week: report it to date (until now).")
    ] = False,
) -> dict[str, Any]:
    weekly = app.reports
    now: datetime = app.clock()
    period = week or default_week(now, weekly.tz, partial=partial)
    generated = weekly.generate(period, now, partial=partial)
    stored = reports.get_report(app.store, generated.id)
    return {**_info(stored.info), "partial": bool(generated.body["partial"])}


@router.get(
    "/reports/{report_id:int}",
    summary="A stored report's JSON",
    dependencies=_READ,
    responses={200: {"content": {"application/json": {"schema": {"type": "object"}}}}},
)
def get_report(app: App, report_id: Id) -> Response:
    stored = reports.get_report(app.store, report_id)
    return Response(stored.body, media_type="application/json")


@router.get(
    "/reports/{report_id:int}/html",
    summary="A stored report as HTML",
    dependencies=_READ,
    response_class=HTMLResponse,
    responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}}},
)
def get_report_html(app: App, report_id: Id) -> Response:
    stored = reports.get_report(app.store, report_id)
    return HTMLResponse(stored.html)


@router.get(
    "/reports/{report_id:int}/csv",
    summary="A stored report as CSV",
    dependencies=_READ,
    response_class=Response,
    responses={200: {"content": {"text/csv": {"schema": {"type": "string"}}}}},
)
def get_report_csv(app: App, report_id: Id) -> Response:
    stored = reports.get_report(app.store, report_id)
    name = f"infersight-{stored.info.kind}-{stored.info.period}.csv"
    return Response(
        stored.csv,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )
