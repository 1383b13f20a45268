"""The GPUs page: every GPU's utilisation, memory, power, clocks, temperature and throttled
share per bucket (``service.telemetry.gpu_series``), plus a summary row per GPU over the range;
each server's engine figures from its ``/metrics`` (dialect, queues, prefix-cache hit ratio,
speculative decoding's acceptance: ``service.telemetry.server_summaries``); and, for
servers that run two or more data-parallel engines, each engine's KV-cache usage and queues,
so that one hot engine behind a calm instance shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.shared import label_step
from infersight.core.records import GROUP_LABELS
from infersight.service import telemetry
from infersight.service.telemetry import EngineBucket, GpuBucket, PoolLine

NAME: Final = "gpus"
TITLE: Final = "GPUs"
DEFAULT_RANGE: Final = "1h"
GpuKey = tuple[str, int]


def _memory_share(b: GpuBucket) -> float | None:
    used, total = b.means.get("memory_used_bytes"), b.means.get("memory_total_bytes")
    return used / total if used is not None and total else None


#: (chart id, title, value of a bucket, format, fixed top of the axis)
GPU_CHARTS: Final[
    tuple[
        tuple[str, str, Callable[[GpuBucket], float | None], svg.Format, float | None],
        ...,
    ]
] = (
    ("util", "GPU utilisation", lambda b: b.means.get("util_gpu"), svg.percent, 1.0),
    ("memory", "Memory used", _memory_share, svg.percent, 1.0),
    ("power", "Power", lambda b: b.means.get("power_w"), svg.unit("W"), None),
    ("sm_clock", "SM clock", lambda b: b.means.get("sm_clock_mhz"), svg.unit("MHz"), None),
    ("temperature", "Temperature", lambda b: b.means.get("temperature_c"), svg.unit("°C"), None),
    ("throttled", "Throttled share of samples", lambda b: b.throttled_share, svg.percent, 1.0),
)


def page(app: AppContext, ctx: Context, _query: dict[str, str]) -> dict[str, Any]:
    return gpus(app, ctx)


def gpu_instances(app: AppContext, ctx: Context) -> list[str] | None:
    """The instances the filters pick (``None``: all); any other filter (a model, tenant,
    adapter, team or workload) picks the instances that served its requests in the range."""
    if ctx.selector.instance is not None:
        return [ctx.selector.instance]
    if not ctx.selector.narrowed:
        return None
    sets = telemetry.label_sets(app.store, ctx.window, label_step(ctx))
    return sorted(
        {s[1] for s in sets if ctx.selector.matches(dict(zip(GROUP_LABELS, s, strict=True)))}
    )


def gpus(app: AppContext, ctx: Context) -> dict[str, Any]:
    instances = gpu_instances(app, ctx)
    buckets = (
        telemetry.gpu_series(
            app.store,
            ctx.window,
            ctx.gpu_step_s,
            instances,
            app.retention.finest_for(ctx.window, ctx.now),
        )
        if instances is None or instances
        else []
    )
    per_gpu: dict[GpuKey, list[GpuBucket]] = defaultdict(list)
    for b in buckets:
        per_gpu[(b.instance, b.gpu_index)].append(b)
    keys = sorted(per_gpu)
    start, end = ctx.window.start, ctx.window.end
    charts = []
    for chart_id, title, value, fmt, top in GPU_CHARTS:
        series = [
            svg.Series(f"{inst}/gpu{idx}", [(b.bucket, value(b)) for b in per_gpu[(inst, idx)]])
            for inst, idx in keys
        ]
        charts.append(
            {
                "id": chart_id,
                "title": title,
                "svg": svg.line_chart(
                    series, start, end, fmt, label=f"{title} per GPU", y_max=top,
                    empty="no GPU samples in this range",
                ),
            }
        )  # fmt: skip
    servers = (
        telemetry.server_summaries(app.store, ctx.window, instances)
        if instances is None or instances
        else []
    )
    return {
        "charts": charts,
        "table": [_gpu_summary(key, per_gpu[key]) for key in keys],
        "step_s": ctx.gpu_step_s,
        "servers": servers,
        "speculating": any(s.speculates for s in servers),
        "pools": _pools(app, ctx, instances),
        "engines": _engines(app, ctx, instances),
    }


def _pools(app: AppContext, ctx: Context, instances: list[str] | None) -> list[PoolLine]:
    """The instances' roles in disaggregated serving (none: no instance takes part)."""
    lines = telemetry.pool_summaries(app.store, ctx.window)
    if instances is not None:
        lines = [line for line in lines if line.instance in instances]
    return lines if telemetry.disaggregated(lines) else []


def _engines(app: AppContext, ctx: Context, instances: list[str] | None) -> dict[str, Any] | None:
    """The data-parallel engines of the servers that run two or more (``None``: none do)."""
    if instances is not None and not instances:
        return None
    table = telemetry.engine_summaries(app.store, ctx.window, instances)
    if not table:
        return None
    buckets = telemetry.engine_series(app.store, ctx.window, ctx.gpu_step_s, instances)
    per_engine: dict[tuple[str, str], list[EngineBucket]] = defaultdict(list)
    for b in buckets:
        per_engine[(b.instance, b.rank)].append(b)
    series = [
        svg.Series(f"{s.instance}/engine {s.rank}", [(b.bucket, b.kv_cache_usage) for b in
                                                     per_engine[(s.instance, s.rank)]])
        for s in table
    ]  # fmt: skip
    chart = svg.line_chart(
        series, ctx.window.start, ctx.window.end, svg.percent,
        label="KV-cache usage per data-parallel engine", y_max=1.0,
        empty="no engine samples in this range",
    )  # fmt: skip
    return {
        "table": table,
        "chart": chart,
        "hot": sum(s.hot for s in table),
        "margin": telemetry.HOT_MARGIN,
    }


def _weighted(rows: Sequence[GpuBucket], name: str) -> float | None:
    pairs = [(b.means[name], b.samples) for b in rows if name in b.means]
    weight = sum(n for _, n in pairs)
    return sum(v * n for v, n in pairs) / weight if weight else None


def _gpu_summary(key: GpuKey, rows: Sequence[GpuBucket]) -> dict[str, Any]:
    samples = sum(b.samples for b in rows)
    reasons: dict[str, int] = defaultdict(int)
    for b in rows:
        for reason, count in b.reasons.items():
            reasons[reason] += count
    sbe = [b.ecc_sbe_total for b in rows if b.ecc_sbe_total is not None]
    dbe = [b.ecc_dbe_total for b in rows if b.ecc_dbe_total is not None]
    used, total = _weighted(rows, "memory_used_bytes"), _weighted(rows, "memory_total_bytes")
    temperatures = [b.means["temperature_c"] for b in rows if "temperature_c" in b.means]
    return {
        "instance": key[0],
        "gpu": key[1],
        "name": next((b.name for b in rows if b.name), ""),
        "samples": samples,
        "util": _weighted(rows, "util_gpu"),
        "memory": used / total if used is not None and total else None,
        "memory_total": total,
        "power": _weighted(rows, "power_w"),
        "power_limit": _weighted(rows, "power_limit_w"),
        "sm_clock": _weighted(rows, "sm_clock_mhz"),
        "temperature_max": max(temperatures) if temperatures else None,
        "throttled": sum(b.throttled_samples for b in rows) / samples if samples else 0.0,
        "reasons": sorted(reasons, key=lambda r: -reasons[r]),
        "ecc_sbe": max(sbe) - min(sbe) if sbe else None,
        "ecc_dbe": max(dbe) - min(dbe) if dbe else None,
        "xid": next((b.xid_last for b in reversed(rows) if b.xid_last), None),
    }
