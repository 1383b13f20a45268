"""The Latency page: P50…P99 of TTFT, TPOT and E2E per model and instance, their charts over
time, a latency heatmap and the share of each stage.

Quantiles over a whole range come from ``service.telemetry.latencies`` (sketch method: the
window is split exactly, ±1 %); charts come from rollup buckets (``service.telemetry``), one
point per chart bucket (a minute to a day, from the range). ``?q=`` picks the charts'
quantile, ``?heatmap=`` the heatmap's metric. The client ↔ engine panel joins the range's
client calls to the server's records (``service.telemetry.client_gap``, ``core.gap``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context, parse_quantile
from infersight.api.dashboard.formatting import instance_series_name, short_model
from infersight.api.dashboard.shared import (
    ChartStep,
    bucket_sketches_many,
    bucket_times,
    chart_step,
)
from infersight.core.errors import InvalidInput
from infersight.core.query import STAGES
from infersight.core.sketch import QuantileSketch, merge_all
from infersight.service import telemetry

NAME: Final = "latency"
TITLE: Final = "Latency"
DEFAULT_RANGE: Final = "1h"
#: The query parameters of this page (besides the range and filters every page reads).
PARAMS: Final = ("q", "heatmap")
QUANTILES: Final = (0.5, 0.9, 0.95, 0.99)


LATENCY_METRICS: Final = {
    "ttft": "Time to first token",
    "tpot": "Time per output token",
    "e2e": "End-to-end latency",
}


HEATMAP_BINS: Final = 24


def page(app: AppContext, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    q = parse_quantile(query.get("q", ""))
    heat = query.get("heatmap", "ttft")
    if heat not in LATENCY_METRICS:
        raise InvalidInput("heatmap must be ttft, tpot or e2e")
    ctx_q = ctx.with_extra(**({"q": f"{q:g}"} if q != 0.99 else {}))
    ctx_q = ctx_q.with_extra(**({"heatmap": heat} if heat != "ttft" else {}))
    return {"q": q, "heat_metric": heat, **latency(app, ctx_q, q, heat), "ctx": ctx_q}


def latency_table(app: AppContext, ctx: Context) -> list[dict[str, Any]]:
    """P50…P99 of TTFT, TPOT and E2E per model and instance over the whole range (one pass
    over the window for the three metrics: ``service.telemetry.latencies``)."""
    finest = app.retention.finest_for(ctx.window, ctx.now)
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    results = telemetry.latencies(
        app.store,
        tuple(LATENCY_METRICS),
        ctx.window,
        ctx.selector,
        ("model", "instance"),
        QUANTILES,
        finest=finest,
    )
    for metric, result in results.items():
        for group in result.groups:
            key = (group.labels["model"], group.labels["instance"])
            row = rows.setdefault(key, {"model": key[0], "instance": key[1], "count": 0})
            row["count"] = max(row["count"], group.count)
            row[metric] = dict(group.quantiles)
    return [rows[k] for k in sorted(rows)]


def latency_charts(app: AppContext, ctx: Context, q: float, heat_metric: str) -> dict[str, Any]:
    """The three metrics' charts, and the heatmap metric's sketches merged over the groups
    per chart bucket."""
    step = chart_step(app, ctx)
    times = bucket_times(ctx, step)
    start = times[0] if times else ctx.window.start
    charts = {}
    found = bucket_sketches_many(
        app, tuple(LATENCY_METRICS), ctx.window, step, ctx.selector, ("model", "instance")
    )
    for metric, title in LATENCY_METRICS.items():
        buckets = found[metric]
        series = [
            svg.Series(
                instance_series_name(*labels),
                [(t, by_time[t].quantile(q) if t in by_time else None) for t in times],
            )
            for labels, by_time in sorted(buckets.items())
        ]
        charts[metric] = svg.line_chart(
            series,
            start,
            ctx.window.end,
            svg.seconds,
            label=f"{title} P{q * 100:g} over time",
            width=520,
            height=260,
        )
    # The heatmap's sketches, merged over the groups per chart bucket: read as one group, so
    # that unchanged chart buckets come merged from the sketch cache too.
    merged = bucket_sketches_many(app, (heat_metric,), ctx.window, step, ctx.selector)
    merged_heat = merged[heat_metric].get((), {})
    return {"charts": charts, "merged": merged_heat, "times": times, "step": step}


def latency_heatmap(
    sketches: Mapping[datetime, QuantileSketch], times: Sequence[datetime], step: ChartStep
) -> Any:
    """Requests per (time bucket, latency bin); bins span the range's 0.5th–99.5th percentile."""
    if not sketches:
        return svg.heatmap([], [], [], timedelta(seconds=step.seconds), label="latency heatmap")
    overall = merge_all(sketches.values())
    low, high = overall.quantile(0.005) or 1e-4, overall.quantile(0.995) or 1.0
    edges = svg.log_edges(low, high, HEATMAP_BINS)
    counts = []
    for at in times:
        sketch = sketches.get(at)
        if sketch is None:
            counts.append([0] * HEATMAP_BINS)
            continue
        at_most = sketch.counts_at_most(edges[1:-1])
        cuts = [0, *at_most, sketch.count]
        counts.append([max(0, cuts[b + 1] - cuts[b]) for b in range(HEATMAP_BINS)])
    return svg.heatmap(
        times, edges, counts, timedelta(seconds=step.seconds), label="latency heatmap"
    )


def breakdown(app: AppContext, ctx: Context) -> Any:
    finest = app.retention.finest_for(ctx.window, ctx.now)
    rows = telemetry.breakdown(app.store, ctx.window, ctx.selector, ("model",), finest=finest)
    bars, scaled = [], []
    for b in rows:
        parts = [(s.stage, s.share) for s in b.stages if s.share]
        if b.unaccounted_share:
            parts.append(("other", b.unaccounted_share))
        if parts:
            model = short_model(b.labels.get("model", ""))
            bars.append((model, parts))
            if b.scaled_by < 1.0:
                scaled.append(f"{model} ×{b.scaled_by:.2f}")
    note = ""
    if scaled:
        note = (
            "The stage times the engine reported add up to more than the end-to-end time "
            "(its stages overlap); their shares are scaled down together: " + ", ".join(scaled)
        )
    return svg.stacked_bars(bars, label="share of end-to-end time per stage", note=note)


#: Quantiles of the client ↔ engine gap panel.
GAP_QUANTILES: Final = (0.5, 0.9, 0.99)


def client_gap(app: AppContext, ctx: Context) -> dict[str, Any]:
    """The client ↔ engine gap per model and tenant (``GET /api/v1/latency/gap``'s answer):
    client calls of the range joined to the server's records by trace id."""
    selector = ctx.selector
    read = telemetry.client_gap(
        app.store,
        ctx.window,
        app.aliases,
        GAP_QUANTILES,
        model=selector.model,
        tenant=selector.tenant,
    )
    groups = read.groups
    # A viewer limited to several tenants: their groups alone (one is read by tenant= above).
    groups = [g for g in groups if selector.allows_tenant(g.tenant)]
    return {
        "groups": groups,
        "quantiles": GAP_QUANTILES,
        "calls": sum(g.calls for g in groups),
        "joined": sum(g.joined for g in groups),
        "truncated": read.truncated,
    }


def latency(app: AppContext, ctx: Context, q: float, heat_metric: str) -> dict[str, Any]:
    charts = latency_charts(app, ctx, q, heat_metric)
    return {
        "gap": client_gap(app, ctx),
        "table": latency_table(app, ctx),
        "charts": charts["charts"],
        "heatmap": latency_heatmap(charts["merged"], charts["times"], charts["step"]),
        "breakdown": breakdown(app, ctx),
        "metrics": LATENCY_METRICS,
        "quantiles": QUANTILES,
        "stages": STAGES,
        "step": charts["step"],
    }
