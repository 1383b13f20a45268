"""The Capacity page: the stored load-test runs, the selected run's (``?run=``, else the
newest) levels with its knee and measured capacity, and the fleet's peak request rate per model
against that capacity. With no run stored, the page says how to measure one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.shared import covered_s
from infersight.core.errors import InvalidInput, NotFound
from infersight.core.loadtest import PhaseSummary, knee_of, measured_capacity, summarise
from infersight.core.window import Resolution
from infersight.service import telemetry
from infersight.service.capacity import load_catalog
from infersight.service.loadtests import get_run, list_runs

NAME: Final = "capacity"
TITLE: Final = "Capacity"
DEFAULT_RANGE: Final = "24h"
#: The query parameters of this page (besides the range and filters every page reads).
PARAMS: Final = ("run",)
MAX_LISTED: Final = 50


def page(app: AppContext, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    run = query.get("run", "")
    ctx_r = ctx.with_extra(**({"run": run} if run else {}))
    return {**capacity(app, ctx_r, run), "ctx": ctx_r}


def _levels(summaries: Sequence[PhaseSummary]) -> list[dict[str, Any]]:
    top = max((s.throughput_rps for s in summaries), default=0.0) or 1.0
    return [
        {
            "label": s.label,
            "concurrency": s.concurrency,
            "requests": s.requests,
            "errors": s.errors,
            "rps": s.throughput_rps,
            "rps_share": s.throughput_rps / top,
            "tokens_per_s": s.output_tokens_per_s,
            "ttft_p99": s.quantile("ttft", "0.99"),
            "tpot_p99": s.quantile("tpot", "0.99"),
            "e2e_p50": s.quantile("e2e", "0.5"),
        }
        for s in summaries
    ]


def _peak_rates(app: AppContext, ctx: Context) -> dict[str, dict[str, Any]]:
    """Per model: the busiest bucket's request rate, the mean rate and the instances serving.

    Peaks are what capacity is planned for, so buckets are as fine as the range allows at a
    bounded cost: minutes up to a day, hours up to a month, days beyond.
    """
    span = ctx.window.end - ctx.window.start
    wanted = (
        Resolution.MINUTE
        if span <= timedelta(days=1)
        else Resolution.HOUR
        if span <= timedelta(days=31)
        else Resolution.DAY
    )
    finest = app.retention.finest_for(ctx.window, ctx.now)
    order = (Resolution.MINUTE, Resolution.HOUR, Resolution.DAY)
    step = max(wanted, finest, key=order.index)
    peaks = telemetry.request_peaks(app.store, ctx.window, step, ctx.selector)
    seconds = float(step.seconds)
    return {
        model: {
            "peak_rps": p.peak / seconds,
            # Over the part of the range that holds the model's requests, not the empty rest.
            "mean_rps": p.requests / max(covered_s(ctx, step.seconds, [p.first, p.last]), 1.0),
            "instances": list(p.instances),
            "step": step.value,
            "capacity_rps": None,
            "load": None,
        }
        for model, p in sorted(peaks.items())
    }


def _catalogue_entry(model: str) -> dict[str, Any] | None:
    """The capacity catalogue's entry for a served model id (the matching the plan uses)."""
    try:
        spec = load_catalog().model(model)
    except NotFound:
        return None
    return {
        "name": spec.name,
        "params_b": spec.params / 1e9,
        "kv_kib_per_token": spec.kv_bytes_per_token() / 1024,
        "weights": spec.weight_dtype or spec.dtype,
    }


def capacity(app: AppContext, ctx: Context, run_id: str = "") -> dict[str, Any]:
    runs = list_runs(app.store, MAX_LISTED)
    fleet = _peak_rates(app, ctx)
    for model, entry in fleet.items():
        entry["catalogue"] = _catalogue_entry(model)
    if not runs:
        return {
            "available": False,
            "reason": "No load-test runs are stored yet, so no capacity has been measured.",
            "hint": "Measure one with infersight loadtest --scenario step (it is stored), "
            "then plan with infersight capacity plan.",
            "fleet": fleet,
        }
    if run_id and not run_id.isdigit():
        raise InvalidInput("run must be a load-test run id")
    listing = next((r for r in runs if str(r.id) == run_id), None) if run_id else runs[0]
    if listing is None:
        raise InvalidInput(f"no load-test run {run_id}")
    run = get_run(app.store, listing.id)
    summaries = summarise(run)
    knee = knee_of(summaries)
    try:
        best = measured_capacity(summaries)
        capacity_rps: float | None = best.throughput_rps
    except InvalidInput:
        best, capacity_rps = None, None
    for model, entry in fleet.items():
        same = capacity_rps is not None and model == run.model
        entry["capacity_rps"] = capacity_rps if same else None
        total = (capacity_rps or 0.0) * len(entry["instances"])
        entry["load"] = entry["peak_rps"] / total if same and total else None
    return {
        "available": True,
        "runs": runs,
        "run": listing,
        "levels": _levels(summaries),
        "knee": knee,
        "best": best,
        "best_output_tokens": round(best.mean_output_tokens) if best else None,
        "hardware": _hardware(run.config),
        "fleet": fleet,
    }


def _hardware(config: Any) -> dict[str, Any] | None:
    """What a run recorded of the hardware it measured (``config["hardware"]``), as
    ``infersight capacity plan --run`` repeats it."""
    hardware = config.get("hardware") if isinstance(config, dict) else None
    if not isinstance(hardware, dict) or not hardware.get("gpu"):
        return None
    return {
        "gpu": str(hardware["gpu"]),
        "tensor_parallel": _tensor_parallel(hardware.get("tensor_parallel")),
        "simulated": bool(hardware.get("simulated")),
        "note": str(hardware.get("note") or ""),
    }


def _tensor_parallel(value: Any) -> int | str:
    """A run's recorded tensor-parallel degree: a whole number as one, anything else (a run
    config written by hand or by another tool) shown as given rather than failing the page."""
    if value is None or value == "":
        return 1
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip()
    return int(text) if text.isdigit() else text[:64]
