"""``/api/v1/latency``, ``/api/v1/latency/gap``, ``/api/v1/throughput``,
``/api/v1/breakdown``, ``/api/v1/engines`` and ``/api/v1/pools``: the query routes.

Each route parses the common parameters, calls one ``service.telemetry`` read and turns the
``core`` answer into JSON. Rollup resolution follows the retention policy, so a window older
than the minute rollups is served from hour rollups.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from infersight.api.auth import Scope
from infersight.api.context import AppContext
from infersight.api.deps import App, requires
from infersight.api.errors import described
from infersight.api.params import (
    MAX_LABEL,
    WINDOW_RULES,
    Common,
    KnownQueryRoute,
    common,
    window_query,
)
from infersight.api.reads import read_answer
from infersight.core.attribution import TopValues
from infersight.core.gap import ClientStage, Distribution
from infersight.core.quantiles import parse_quantiles, quantile_key
from infersight.core.query import (
    LATENCY_METRICS,
    Breakdown,
    LatencyResult,
    Method,
    Selector,
    Throughput,
)
from infersight.core.timestamps import iso
from infersight.core.window import Resolution, Window
from infersight.service import attribution, telemetry

Params = Annotated[Common, Depends(common)]
QueryWindow = Annotated[Window, Depends(window_query)]
_QUANTILES = "0.5,0.9,0.95,0.99"
_Q = r"(?:0(?:\.[0-9]{1,9})?|1(?:\.0{1,9})?|\.[0-9]{1,9})"
#: ``quantiles``: 1 to 32 comma-separated numbers in [0, 1].
QUANTILES_PATTERN = described(
    rf"^\s*{_Q}\s*(?:,\s*{_Q}\s*){{0,31}}$", "1 to 32 comma-separated quantiles in [0, 1]"
)
router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(requires(Scope.READ))],
    route_class=KnownQueryRoute,
    tags=["queries"],
)


def _finest(app: AppContext, params: Common) -> Resolution:
    return app.retention.finest_for(params.window, params.now)


@router.get("/latency", summary="Latency quantiles per group", description=WINDOW_RULES)
def latency(
    app: App,
    params: Params,
    request: Request,
    response: Response,
    metric: Annotated[
        str,
        Query(
            description="ttft, tpot, e2e, queue, prefill, decode, …",
            json_schema_extra={"enum": sorted(LATENCY_METRICS)},
        ),
    ] = "ttft",
    quantiles: Annotated[
        str, Query(pattern=QUANTILES_PATTERN, description="comma-separated, in [0, 1]")
    ] = _QUANTILES,
    method: Annotated[Method, Query(description="auto, exact or sketch")] = Method.AUTO,
) -> dict[str, Any]:
    return read_answer(
        app, request, response, lambda r: _latency(r, params, metric, quantiles, method)
    )


def _latency(
    app: AppContext, params: Common, metric: str, quantiles: str, method: Method
) -> dict[str, Any]:
    def read(selector: Selector, group_by: tuple[str, ...], how: Method) -> LatencyResult:
        return telemetry.latency(
            app.store,
            metric,
            params.window,
            selector,
            group_by,
            parse_quantiles(quantiles),
            how,
            finest=_finest(app, params),
            exact_max_rows=app.exact_max_rows,
        )

    result = read(params.selector, params.group_by, method)
    # Tenants, teams and workloads past the top N: one (other) group each (issue 34).
    tops = attribution.top_of(result.groups, params.group_by, _top_n(app), lambda g: g.count)
    groups = attribution.fold_requery(
        result.groups,
        params.group_by,
        tops,
        params.selector,
        lambda narrowed: read(narrowed, (), result.method).groups,
    )
    return {
        "metric": result.metric,
        "unit": "s",
        "start": iso(params.window.start),
        "end": iso(params.window.end),
        "method": result.method.value,
        "relative_error": result.relative_error,
        "groups": [
            {
                "labels": dict(g.labels),
                "count": g.count,
                "quantiles": {quantile_key(q): v for q, v in g.quantiles.items()},
            }
            for g in groups
        ],
        **_bounded(tops),
    }


def _top_n(app: AppContext) -> int:
    return app.settings.attribution_top_n


def _bounded(tops: dict[str, TopValues]) -> dict[str, Any]:
    """An answer grouped by tenant, team or workload says its top N (``bounded``)."""
    return {"bounded": attribution.bounded_statements(tops)} if tops else {}


@router.get(
    "/throughput",
    summary="Requests, errors and tokens per second per group",
    description=WINDOW_RULES,
)
def throughput(app: App, params: Params, request: Request, response: Response) -> dict[str, Any]:
    return read_answer(app, request, response, lambda r: _throughput(r, params))


def _throughput(app: AppContext, params: Common) -> dict[str, Any]:
    rows = telemetry.throughput(
        app.store,
        params.window,
        params.selector,
        params.group_by,
        finest=_finest(app, params),
    )
    tops = attribution.top_of(rows, params.group_by, _top_n(app), lambda t: t.requests)
    rows = attribution.fold_additive(rows, tops, Throughput.plus)
    return {
        "start": iso(params.window.start),
        "end": iso(params.window.end),
        "seconds": params.window.seconds,
        "groups": [
            {
                "labels": dict(t.labels),
                "requests": t.requests,
                "errors": t.errors,
                "input_tokens": t.input_tokens,
                "output_tokens": t.output_tokens,
                "requests_per_s": t.requests_per_s,
                "errors_per_s": t.errors_per_s,
                "input_tokens_per_s": t.input_tokens_per_s,
                "output_tokens_per_s": t.output_tokens_per_s,
                "error_ratio": t.error_ratio,
            }
            for t in rows
        ],
        **_bounded(tops),
    }


@router.get(
    "/breakdown", summary="Share of end-to-end time per stage per group", description=WINDOW_RULES
)
def breakdown(app: App, params: Params) -> dict[str, Any]:
    """Each stage's share of the requests' time (end to end, plus a gateway's own time in
    front); the shares add up to at most 1. Stages the engines reported as overlapping (adding
    up to more than the end-to-end time) are scaled down together: ``scaled_by`` < 1. The
    ``client`` stage is the time the group's requests' clients waited beyond the server's end
    to end (network, gateway, client queueing), from the client calls joined to them."""

    def read(selector: Selector, group_by: tuple[str, ...]) -> list[Breakdown]:
        return telemetry.breakdown(
            app.store, params.window, selector, group_by, finest=_finest(app, params)
        )

    rows = read(params.selector, params.group_by)
    tops = attribution.top_of(rows, params.group_by, _top_n(app), lambda b: b.requests)
    rows = attribution.fold_requery(
        rows, params.group_by, tops, params.selector, lambda narrowed: read(narrowed, ())
    )
    clients = telemetry.client_stages_of(
        app.store, params.window, app.aliases, params.selector, params.group_by
    )
    return {
        "start": iso(params.window.start),
        "end": iso(params.window.end),
        "groups": [
            {
                "labels": dict(b.labels),
                "requests": b.requests,
                "e2e_seconds_total": b.e2e_seconds_total,
                "stages": [
                    {
                        "stage": s.stage,
                        "seconds_total": s.seconds_total,
                        "share": s.share,
                        "coverage": s.coverage,
                    }
                    for s in b.stages
                ],
                "unaccounted_share": b.unaccounted_share,
                "scaled_by": b.scaled_by,
                "client": _client_stage(clients.get(tuple(b.labels[n] for n in params.group_by))),
            }
            for b in rows
        ],
        **_bounded(tops),
    }


def _client_stage(stage: ClientStage | None) -> dict[str, Any] | None:
    """The client ↔ engine stage: beyond the server's end to end time, so a share of the
    joined calls' client E2E, not of the server's (``null``: no call joined in the group)."""
    if stage is None:
        return None
    return {
        "calls": stage.calls,
        "gap_seconds_total": stage.gap_seconds_total,
        "client_seconds_total": stage.client_seconds_total,
        "share_of_client_e2e": stage.share,
    }


def _distribution(d: Distribution) -> dict[str, Any]:
    return {
        "count": d.count,
        "mean": d.mean,
        "quantiles": {quantile_key(q): v for q, v in d.quantiles.items()},
    }


@router.get(
    "/latency/gap",
    summary="The client ↔ engine gap: client TTFT and E2E minus the server's, per model/tenant",
    description=(
        "Client calls (from the CLIENT spans of GenAI client instrumentations) joined by trace "
        "id to the server's records; gap = client − server, for TTFT and end to end time, in "
        "seconds. Model names are compared through the alias table (INFERSIGHT_MODEL_ALIASES; "
        "by default an org/ prefix is stripped and case ignored). Calls whose client did not "
        "propagate its trace context are counted as unjoined. " + WINDOW_RULES
    ),
)
def latency_gap(
    app: App,
    window: QueryWindow,
    model: str | None = Query(None, max_length=MAX_LABEL, description="compared canonically"),
    tenant: str | None = Query(None, max_length=MAX_LABEL),
    quantiles: Annotated[
        str, Query(pattern=QUANTILES_PATTERN, description="comma-separated, in [0, 1]")
    ] = _QUANTILES,
) -> dict[str, Any]:
    qs = parse_quantiles(quantiles)
    read = telemetry.client_gap(app.store, window, app.aliases, qs, model=model, tenant=tenant)
    groups = read.groups
    return {
        "unit": "s",
        "start": iso(window.start),
        "end": iso(window.end),
        "truncated": read.truncated,
        "calls": sum(g.calls for g in groups),
        "joined": sum(g.joined for g in groups),
        "unjoined": sum(g.unjoined for g in groups),
        "groups": [
            {
                "labels": {"model": g.model, "tenant": g.tenant},
                "calls": g.calls,
                "joined": g.joined,
                "unjoined": g.unjoined,
                "ttft_gap": _distribution(g.ttft_gap),
                "e2e_gap": _distribution(g.e2e_gap),
                "client": {
                    "ttft": _distribution(g.client_ttft),
                    "e2e": _distribution(g.client_e2e),
                },
                "server": {
                    "ttft": _distribution(g.server_ttft),
                    "e2e": _distribution(g.server_e2e),
                },
            }
            for g in groups
        ],
    }


@router.get(
    "/engines",
    summary="Each server's engine figures from its /metrics",
    description=(
        "Per instance, over the window, from the sidecar's scrapes of the server's /metrics: "
        "the dialect recognised (vllm, sglang, tgi, trtllm, dynamo, llm-d-epp), the mean "
        "KV-cache usage and queues, the prefix-cache hit ratio and the speculative-decoding "
        "acceptance rate and mean acceptance length (tokens per verification step). Ratios of "
        "counters are taken over each scrape interval and pooled over data-parallel engines; "
        "a figure the server never reported is null. " + WINDOW_RULES
    ),
)
def engines(
    app: App, window: QueryWindow, instance: str | None = Query(None, max_length=MAX_LABEL)
) -> dict[str, Any]:
    rows = telemetry.server_summaries(app.store, window, None if instance is None else [instance])
    return {
        "start": iso(window.start),
        "end": iso(window.end),
        "servers": [row.to_dict() for row in rows],
    }


@router.get(
    "/pools",
    summary="Each instance's part in disaggregated prefill/decode serving",
    description=(
        "Per instance, over the window: its role (prefill: it stored prefill legs; decode: it "
        "answered users' requests a P/D proxy split; unified: neither), its requests (a "
        "prefill instance's prefill legs; a decode instance's users' requests, each counted "
        "once, there), tokens, and mean queue, prefill, KV transfer, TTFT and TPOT (seconds; "
        "null where never reported). `disaggregated` says whether any instance takes part. "
        + WINDOW_RULES
    ),
)
def pool_lines(app: App, window: QueryWindow) -> dict[str, Any]:
    lines = telemetry.pool_summaries(app.store, window)
    return {
        "start": iso(window.start),
        "end": iso(window.end),
        "disaggregated": telemetry.disaggregated(lines),
        "instances": [line.to_dict() for line in lines],
    }
