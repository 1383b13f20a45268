"""View-models of the Overview and Latency pages: store answers → what the templates show.

Each function takes the app state and the page's ``Context`` and returns a plain dict (charts
already rendered to SVG by ``api.dashboard_svg``). Quantiles over a whole range come from
``storage.queries`` (sketch method: the window is split exactly, ±1 %); charts come from rollup
buckets (``storage.timeseries``), one point per minute, hour or day.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from api.dashboard import charts as svg
from api.dashboard.context import Context
from core.query import STAGES, Method, Selector
from core.records import GROUP_LABELS
from core.sketch import QuantileSketch, merge_all
from core.slo import SliKind, SloSpec
from core.window import Resolution, format_duration
from service.incidents import annotate
from service.slos import with_status
from storage import incidents, queries, slo_store, timeseries

QUANTILES: Final = (0.5, 0.9, 0.95, 0.99)
LATENCY_METRICS: Final = {
    "ttft": "Time to first token",
    "tpot": "Time per output token",
    "e2e": "End-to-end latency",
}
HEATMAP_BINS: Final = 24


def bucket_times(ctx: Context, step: Resolution) -> list[datetime]:
    """Every bucket start of ``step`` that overlaps the range (gaps are drawn as gaps)."""
    at, out = step.floor(ctx.window.start), []
    while at < ctx.window.end:
        out.append(at)
        at += timedelta(seconds=step.seconds)
    return out


def chart_step(state: Any, ctx: Context) -> Resolution:
    """The context's step, coarsened to what the retention policy still keeps."""
    finest: Resolution = state.retention.finest_for(ctx.window, ctx.now)
    order = (Resolution.MINUTE, Resolution.HOUR, Resolution.DAY)
    return max(ctx.step, finest, key=order.index)


def label_step(ctx: Context) -> Resolution:
    """Rollups the filter menus read: hours, or days for ranges longer than 8 days."""
    return Resolution.DAY if ctx.step is Resolution.DAY else Resolution.HOUR


def menus(state: Any, ctx: Context) -> dict[str, list[str]]:
    """Each filter's choices: the values seen in the range, narrowed by the *other* filters."""
    sets = timeseries.label_sets(state.engine, ctx.window, label_step(ctx))
    out = {}
    for position, name in enumerate(GROUP_LABELS):
        if name == "priority":
            continue
        others = Selector(**{k: v for k, v in ctx.filters.items() if k != name})
        values = {
            s[position] for s in sets if others.matches(dict(zip(GROUP_LABELS, s, strict=True)))
        }
        chosen = ctx.filters.get(name)
        if chosen:
            values.add(chosen)  # keep the choice visible even when nothing matches it now
        out[name] = sorted(v for v in values if v)
    return out


def short_model(model: str) -> str:
    """``meta-llama/Llama-3.1-8B-Instruct`` → ``Llama-3.1-8B-Instruct`` (legends, bar labels)."""
    return model.rpartition("/")[2] or model or "—"


def instance_series_name(model: str, instance: str) -> str:
    return f"{instance} ({short_model(model)})"


# -- Overview ---------------------------------------------------------------------------------


def sli_text(spec: SloSpec) -> str:
    if spec.sli.kind is SliKind.AVAILABILITY:
        return "requests succeed"
    assert spec.sli.threshold_s is not None
    return f"{(spec.sli.metric or '').upper()} ≤ {svg.seconds(spec.sli.threshold_s)}"


def slo_rows(state: Any, now: datetime) -> list[dict[str, Any]]:
    specs = slo_store.list_slos(state.engine)
    found = with_status(state.engine, specs, state.policy, now, state.retention.finest_for)
    return [
        {
            "name": v.spec.name,
            "description": v.spec.description,
            "sli": sli_text(v.spec),
            "scope": v.spec.scope,
            "objective": v.spec.objective,
            "window": v.spec.window,
            "value": v.status.sli,
            "events": v.status.counts.total,
            "budget": v.status.budget_remaining,
            "burn_rates": v.status.burn_rates(),
            "firing": v.firing.severity.value if v.firing else None,
        }
        for v in found
    ]


def firing_incidents(state: Any) -> list[dict[str, Any]]:
    found = incidents.list_incidents(state.engine, "firing", 50)
    notes = annotate(state.engine, found)
    return [{"incident": i, **notes[i.id]} for i in found]


def fleet(state: Any, ctx: Context) -> dict[str, Any]:
    """Throughput totals over the range, and per model over time."""
    finest = state.retention.finest_for(ctx.window, ctx.now)
    totals = queries.throughput(state.engine, ctx.window, ctx.selector, finest=finest)
    step = chart_step(state, ctx)
    per_model = timeseries.request_series(state.engine, ctx.window, step, ctx.selector, ["model"])
    times = bucket_times(ctx, step)
    rate, tokens = [], []
    for labels, buckets in sorted(per_model.items()):
        name = short_model(labels[0])
        rate.append(
            svg.Series(
                name,
                [(t, buckets[t].requests / step.seconds if t in buckets else None) for t in times],
            )
        )
        tokens.append(
            svg.Series(
                name,
                [
                    (t, buckets[t].output_tokens / step.seconds if t in buckets else None)
                    for t in times
                ],
            )
        )
    end = ctx.window.end
    start = times[0] if times else ctx.window.start
    return {
        "totals": totals[0] if totals else None,
        "rate_chart": svg.line_chart(
            rate, start, end, svg.unit("req/s"), label="requests per second by model"
        ),
        "tokens_chart": svg.line_chart(
            tokens, start, end, svg.unit("tok/s"), label="output tokens per second by model"
        ),
        "step": step,
    }


def overview(state: Any, ctx: Context) -> dict[str, Any]:
    return {
        "slos": slo_rows(state, ctx.now),
        "burn_windows": [format_duration(w) for w in sorted(state.policy.windows)],
        "firing": firing_incidents(state),
        "fleet": fleet(state, ctx),
    }


# -- Latency ----------------------------------------------------------------------------------


def latency_table(state: Any, ctx: Context) -> list[dict[str, Any]]:
    """P50…P99 of TTFT, TPOT and E2E per model and instance over the whole range."""
    finest = state.retention.finest_for(ctx.window, ctx.now)
    rows: dict[tuple[str, ...], dict[str, Any]] = {}
    for metric in LATENCY_METRICS:
        result = queries.latency(
            state.engine,
            metric,
            ctx.window,
            ctx.selector,
            ("model", "instance"),
            QUANTILES,
            Method.SKETCH,
            finest=finest,
        )
        for group in result.groups:
            key = (group.labels["model"], group.labels["instance"])
            row = rows.setdefault(key, {"model": key[0], "instance": key[1], "count": 0})
            row["count"] = max(row["count"], group.count)
            row[metric] = dict(group.quantiles)
    return [rows[k] for k in sorted(rows)]


def latency_charts(state: Any, ctx: Context, q: float) -> dict[str, Any]:
    step = chart_step(state, ctx)
    times = bucket_times(ctx, step)
    start = times[0] if times else ctx.window.start
    charts, merged = {}, {}
    for metric, title in LATENCY_METRICS.items():
        buckets = timeseries.bucket_sketches(
            state.engine, metric, ctx.window, step, ctx.selector, ("model", "instance")
        )
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
        merged[metric] = _merge_per_time(buckets.values())
    return {"charts": charts, "merged": merged, "times": times, "step": step}


def _merge_per_time(
    groups: Any,
) -> dict[datetime, QuantileSketch]:
    by_time: dict[datetime, list[QuantileSketch]] = {}
    for by_group in groups:
        for at, sketch in by_group.items():
            by_time.setdefault(at, []).append(sketch)
    return {at: merge_all(parts) for at, parts in by_time.items()}


def latency_heatmap(
    sketches: Mapping[datetime, QuantileSketch], times: Sequence[datetime], step: Resolution
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
        at_most = [sketch.count_at_most(e) for e in edges[1:-1]]
        cuts = [0, *at_most, sketch.count]
        counts.append([max(0, cuts[b + 1] - cuts[b]) for b in range(HEATMAP_BINS)])
    return svg.heatmap(
        times, edges, counts, timedelta(seconds=step.seconds), label="latency heatmap"
    )


def breakdown(state: Any, ctx: Context) -> Any:
    finest = state.retention.finest_for(ctx.window, ctx.now)
    rows = queries.breakdown(state.engine, ctx.window, ctx.selector, ("model",), finest=finest)
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


def latency(state: Any, ctx: Context, q: float, heat_metric: str) -> dict[str, Any]:
    charts = latency_charts(state, ctx, q)
    return {
        "table": latency_table(state, ctx),
        "charts": charts["charts"],
        "heatmap": latency_heatmap(charts["merged"][heat_metric], charts["times"], charts["step"]),
        "breakdown": breakdown(state, ctx),
        "metrics": LATENCY_METRICS,
        "quantiles": QUANTILES,
        "stages": STAGES,
        "step": charts["step"],
    }
