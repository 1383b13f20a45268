"""``/api/v1/baselines``: capture, import, list and compare performance baselines.

``POST /api/v1/baselines`` (admin) stores a baseline from one of three sources: a time
window of the store (``start``/``end`` and a selector), a load tester's result file
(``import``: vllm bench serve, LLMPerf or AIPerf JSON, optionally with per-request samples),
or a baseline document made elsewhere (``baseline``, e.g. by ``infersight loadtest``).
``GET /api/v1/baselines/{name}/compare?start=&end=&model=…`` captures the window as the
candidate and answers per-metric verdicts (``core.baseline_compare``); the bootstrap's seed
is a parameter, so the same question gets the same answer.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from infersight.api.auth import Scope, check_within_scope
from infersight.api.context import AppContext
from infersight.api.deps import App, requires, tenants_of
from infersight.api.errors import described, responses
from infersight.api.params import WINDOW_RULES, Common, Instant, KnownQueryRoute, common, instant
from infersight.core.baseline import Baseline, check_name, from_dict, renamed, summary_dict, to_dict
from infersight.core.baseline_compare import Policy
from infersight.core.baseline_report import comparison_dict
from infersight.core.errors import InvalidInput
from infersight.core.importers import FORMATS
from infersight.core.importers import parse as parse_result
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.service import baselines as service
from infersight.service.baselines import parse_thresholds

router = APIRouter(prefix="/api/v1/baselines", route_class=KnownQueryRoute, tags=["baselines"])
_READ = [Depends(requires(Scope.READ))]
_ADMIN = [Depends(requires(Scope.ADMIN))]
Params = Annotated[Common, Depends(common)]
#: A baseline's name (``core.baseline.check_name``).
NAME_PATTERN = described(
    r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$",
    "1-128 letters, digits or ._:@+-, starting with a letter or digit (a baseline name)",
)
Name = Annotated[str, Path(pattern=NAME_PATTERN, description="a baseline's name")]


class ImportBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["vllm", "llmperf", "aiperf", "guidellm"] | None = Field(
        None, description=f"one of {', '.join(FORMATS)}; guessed when absent"
    )
    result: dict[str, Any]
    samples: list[Any] | None = Field(
        None, description="LLMPerf individual responses or AIPerf profile_export.jsonl records"
    )
    benchmark: int | None = Field(
        None, ge=0, description="which benchmark of a GuideLLM report holding several"
    )


class CaptureBody(BaseModel):
    """Exactly one source: a window (``start``/``end`` + selector), ``import`` or ``baseline``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(pattern=NAME_PATTERN)
    description: str = Field("", max_length=1024)
    replace: bool = False
    start: Instant | None = None
    end: Instant | None = None
    model: str | None = Field(None, max_length=256)
    instance: str | None = Field(None, max_length=256)
    tenant: str | None = Field(None, max_length=256)
    priority: str | None = Field(None, max_length=256)
    import_: ImportBody | None = Field(None, alias="import")
    baseline: dict[str, Any] | None = None


def _window(app: AppContext, start: str | float | None, end: str | float | None) -> Window:
    if start is None or end is None or start == "" or end == "":
        raise InvalidInput("a window capture needs both start and end")
    window = Window(instant("start", start), instant("end", end))
    max_days: int = app.settings.max_query_days
    if window.end - window.start > timedelta(days=max_days):
        raise InvalidInput(f"a window covers at most {max_days} days")
    return window


def _capture(
    app: AppContext, name: str, window: Window, selector: Selector, description: str = ""
) -> Baseline:
    return service.capture_window(
        app.store,
        name,
        window,
        selector,
        app.clock(),
        description=description,
        finest=app.retention.finest_for(window, app.clock()),
        exact_max_rows=app.exact_max_rows,
        cost_model=app.cost_model(),
    )


def _build(app: AppContext, body: CaptureBody) -> Baseline:
    check_name(body.name)
    window_given = any(
        v is not None
        for v in (body.start, body.end, body.model, body.instance, body.tenant, body.priority)
    )
    sources = sum((window_given, body.import_ is not None, body.baseline is not None))
    if sources != 1:
        raise InvalidInput("give exactly one of: start/end (a window), import, baseline")
    if body.import_ is not None:
        return parse_result(
            body.import_.result,
            name=body.name,
            created_at=app.clock(),
            fmt=body.import_.format,
            description=body.description,
            samples=body.import_.samples,
            benchmark=body.import_.benchmark,
        )
    if body.baseline is not None:
        return renamed(from_dict(body.baseline), body.name, body.description or None)
    selector = Selector(body.model, body.instance, body.tenant, body.priority)
    return _capture(app, body.name, _window(app, body.start, body.end), selector, body.description)


@router.post(
    "",
    dependencies=_ADMIN,
    status_code=201,
    summary="Capture a baseline from a window, import a load tester's result, or store one",
    description="Give exactly one source: start and end (with an optional selector), import "
    "(a vllm, LLMPerf or AIPerf result) or baseline (a baseline document). A window follows "
    "the window rules (start before end, at most max_query_days); an existing name without "
    "replace is a conflict (409). A request that breaks these is answered 400.",
    responses={
        201: {"description": "Created"},
        200: {"description": "Replaced"},
        **responses(409),
    },
)
def capture(app: App, body: CaptureBody, response: Response) -> dict[str, Any]:
    baseline = _build(app, body)
    created = service.save_baseline(app.store, baseline, replace=body.replace)
    response.status_code = 201 if created else 200
    return summary_dict(baseline)


@router.get("", dependencies=_READ, summary="Every baseline, newest first")
def list_baselines(app: App, limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> dict[str, Any]:
    found = service.list_baselines(app.store, limit)
    return {"baselines": [summary_dict(b) for b in found]}


@router.get("/{name}", dependencies=_READ, summary="One baseline")
def get_baseline(
    app: App,
    name: Name,
    distributions: Annotated[bool, Query(description="include the serialised sketches")] = False,
) -> dict[str, Any]:
    baseline = service.get_baseline(app.store, name)
    return to_dict(baseline) if distributions else summary_dict(baseline)


@router.delete("/{name}", dependencies=_ADMIN, status_code=204, summary="Delete a baseline")
def delete_baseline(app: App, name: Name) -> Response:
    service.delete_baseline(app.store, check_name(name))
    return Response(status_code=204)


@router.get(
    "/{name}/compare",
    dependencies=_READ,
    summary="Compare a window (or another baseline) with a baseline: per-metric verdicts",
    description=f"{WINDOW_RULES} against= compares two stored baselines and takes no window "
    "or selector; group_by is not supported. A request that breaks these is answered 400.",
)
def compare(
    request: Request,
    app: App,
    name: Name,
    params: Params,
    against: Annotated[
        str | None,
        Query(pattern=NAME_PATTERN, description="compare this stored baseline instead"),
    ] = None,
    threshold: Annotated[float, Query(ge=0, le=10, description="default relative threshold")] = 0.1,
    thresholds: Annotated[
        str, Query(max_length=1000, description="per metric: ttft.p99:0.2,tpot:0.15")
    ] = "",
    confidence: Annotated[float, Query(ge=0.5, lt=1.0)] = 0.95,
    seed: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
) -> dict[str, Any]:
    if params.group_by:
        raise InvalidInput("a comparison covers one selector; group_by is not supported")
    policy = Policy(
        thresholds=parse_thresholds(thresholds), default_threshold=threshold, confidence=confidence
    )
    window_keys = {"start", "end", "range", "model", "instance", "tenant", "priority"}
    if against is not None and window_keys & set(request.query_params):
        raise InvalidInput("against= compares two baselines; it takes no window or selector")
    baseline = service.get_baseline(app.store, name)
    scope = tenants_of(request)  # a token limited to tenants reads baselines of its tenants
    check_within_scope(scope, baseline.labels, f"baseline {name!r}")
    label: str | None = None  # a window candidate is named by its UTC range
    if against is not None:
        candidate = service.get_baseline(app.store, against)
        check_within_scope(scope, candidate.labels, f"baseline {against!r}")
    else:
        window, now = params.window, app.clock()
        measured = service.window_candidate(
            app.store,
            window,
            params.selector,
            now,
            finest=app.retention.finest_for(window, now),
            exact_max_rows=app.exact_max_rows,
            cost_model=app.cost_model(),
        )
        candidate, label = measured.baseline, measured.label
    result = service.compare(baseline, candidate, policy, seed=seed, label=label)
    return comparison_dict(result)
