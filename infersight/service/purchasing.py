"""Purchasing advice over a range: the hourly GPU usage (``store.samples``) through
``core.purchasing``, with the range's cost per million tokens (``store.cost``) for the
what-if of filling the idle windows; and its JSON form, shared by ``GET /api/v1/purchasing``,
the weekly report and the dashboard's Cost and Scaling pages.

Money and GPU-hours are decimal strings with six places, in the cost model's currency, as in
``service.cost_view``; shares and utilisation are numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from infersight.core.cost import CostModel
from infersight.core.errors import InvalidInput
from infersight.core.purchasing import (
    DEFAULT_FILL_TARGET,
    DEFAULT_IDLE_FLOOR,
    DEFAULT_TOP_WINDOWS,
    Advice,
    advise,
    assumption_text,
    check_span,
    per_million_after,
)
from infersight.core.timestamps import iso
from infersight.core.window import Resolution, Window
from infersight.service.cost_view import amount
from infersight.service.evaluation import FinestFor
from infersight.storage.seam import ROLLUP_GAP_S, Store

#: What to run when a range holds no GPU time (the pages, the API and the report say it).
NEXT_COMMAND: Final = (
    "infersight sidecar --instance NAME --gpu-source nvml (next to each inference server; "
    "infersight demo to try it)"
)
EMPTY_TEXT: Final = "No GPU-hours recorded in this range, so there is no demand to buy for."
#: Ranges shorter than this get a warning: a week's pattern is the least a purchase needs.
WEEK_HOURS: Final = 168


#: Days of the advice given for a range too short to buy for (under a week): the money job
#: judges it each cycle (``service.budgets.MoneyAlerts``), the Cost and Scaling pages show it.
ADVICE_DAYS: Final = 28


@dataclass(frozen=True, slots=True)
class Purchasing:
    advice: Advice
    model_name: str
    per_million_before: Decimal | None
    per_million_after: Decimal | None
    sample_gap_s: float = ROLLUP_GAP_S
    #: With no whole hour of GPU data in the range: the hour in progress when it already holds
    #: some (a sidecar that started this hour, the demo's first hour), so the answer says when
    #: advice comes rather than asking for a sidecar that is already running.
    pending_hour: datetime | None = None


def purchasing(
    store: Store,
    model: CostModel,
    window: Window,
    *,
    finest_for: FinestFor | None = None,
    now: Any = None,
    timezone: str = "UTC",
    floor: float = DEFAULT_IDLE_FLOOR,
    target: float = DEFAULT_FILL_TARGET,
    top: int = DEFAULT_TOP_WINDOWS,
    per_million: Decimal | None = None,
    read_unit_cost: bool = True,
) -> Purchasing:
    """The advice for ``window``'s whole hours under ``model``. ``per_million`` is the
    range's cost per million tokens for the fill what-if; with ``read_unit_cost`` (and none
    given) it is read from the store for the hours the advice covers."""
    try:
        tz = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidInput(
            f"unknown time zone {timezone!r}", details={"tz": timezone[:64]}
        ) from None
    check_span(window.start, window.end)
    rows = store.samples.hourly_gpu_usage(window.start, window.end)
    advice = advise(
        rows, model, window.start, window.end, tz=tz, floor=floor, target=target, top=top
    )
    pending: datetime | None = None
    if advice.empty:
        hour = Resolution.HOUR.floor(window.end)  # a range ending mid-hour: ending now
        if hour < window.end and store.samples.hourly_gpu_usage(hour, hour + timedelta(hours=1)):
            pending = hour
    if read_unit_cost and per_million is None:
        per_million = unit_cost(store, model, advice, finest_for=finest_for, now=now)
    return Purchasing(
        advice,
        model.name,
        per_million,
        per_million_after(per_million, advice.fill),
        model.sample_gap_s,
        pending,
    )


def unit_cost(
    store: Store,
    model: CostModel,
    advice: Advice,
    *,
    finest_for: FinestFor | None = None,
    now: Any = None,
) -> Decimal | None:
    """The cost per million tokens over the hours ``advice`` covers (``None``: no hours, or
    no tokens in them): the fill what-if's starting point."""
    if advice.empty or advice.end <= advice.start:
        return None
    read = Window(advice.start, advice.end)
    finest = finest_for(read, now) if finest_for is not None else Resolution.MINUTE
    money = store.cost.cost(read, model, finest=finest).total.cost_per_million_tokens
    return None if money is None else money.amount


def with_unit_cost(answer: Purchasing, per_million: Decimal | None) -> Purchasing:
    """``answer`` with ``per_million`` as the fill what-if's cost per million tokens."""
    return replace(
        answer,
        per_million_before=per_million,
        per_million_after=per_million_after(per_million, answer.advice.fill),
    )


def _share(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def _opt(value: Decimal | None) -> str | None:
    return None if value is None else amount(value)


def purchasing_dict(answer: Purchasing) -> dict[str, Any]:
    """The JSON answer (``GET /api/v1/purchasing``; the weekly report's ``purchasing``)."""
    a = answer.advice
    fill = a.fill
    hint = None
    if a.empty and answer.pending_hour is not None:
        ready = answer.pending_hour + timedelta(hours=1)
        hint = {
            "text": (
                f"GPU data starts in the hour in progress ({answer.pending_hour:%H:%M} UTC); the "
                f"advice counts whole hours, the first one complete at {ready:%H:%M} UTC."
            ),
            "next_command": None,
        }
    elif a.empty:
        hint = {"text": EMPTY_TEXT, "next_command": NEXT_COMMAND}
    warnings = []
    if not a.empty and a.hours < WEEK_HOURS:
        warnings.append(
            f"only {a.hours} hour{'' if a.hours == 1 else 's'} of GPU data in this range: less "
            "than a week, so the split "
            "and the idle windows follow those hours only"
        )
    if answer.sample_gap_s > ROLLUP_GAP_S:
        warnings.append(
            f"the cost model's sampleGap is {answer.sample_gap_s:g} s, but the hour rollups "
            f"count a sample for at most {ROLLUP_GAP_S:g} s: GPUs sampled less often than that "
            "read as partly in use here"
        )
    if a.unpriced:
        warnings.append(f"no price for these GPUs, left out of the split: {', '.join(a.unpriced)}")
    return {
        "start": iso(a.start),
        "end": iso(a.end),
        "hours": a.hours,
        "hours_with_data": a.hours_with_data,
        "timezone": a.timezone,
        "currency": a.currency,
        "cost_model": {"name": answer.model_name, "example_prices": a.example_prices},
        "empty": hint,
        "warnings": warnings,
        "assumptions": assumption_text(a),
        "reserved_discount": str(a.reserved_discount),
        "reserved_discount_assumed": a.discount_assumed,
        "split": {
            "reserved_gpus": a.reserved_gpus,
            "gpu_hours": amount(a.gpu_hours),
            "coverage": _share(a.coverage),
            "split_cost": amount(a.split_cost),
            "on_demand_cost": amount(a.on_demand_cost),
            "current_cost": amount(a.current_cost),
            "saving": amount(a.saving),
            "saving_share": _share(a.saving_share),
            "pools": [
                {
                    "pool": p.pool.name,
                    "on_demand_per_gpu_hour": amount(p.pool.on_demand_per_hour),
                    "reserved_per_gpu_hour": amount(p.pool.reserved_per_hour),
                    "reserved_price_assumed": p.pool.reserved_assumed,
                    "price_ratio": _share(p.split.price_ratio),
                    "quantile": _share(p.split.quantile),
                    "reserved_gpus": p.split.reserved_gpus,
                    "hours": p.split.hours,
                    "gpu_hours": amount(p.split.gpu_hours),
                    "reserved_gpu_hours": amount(p.split.reserved_gpu_hours),
                    "on_demand_gpu_hours": amount(p.split.on_demand_gpu_hours),
                    "coverage": _share(p.split.coverage),
                    "reservation_use": _share(p.split.reservation_use),
                    "split_cost": amount(p.split.split_cost),
                    "on_demand_cost": amount(p.split.on_demand_cost),
                    "current_cost": amount(p.current_cost),
                    "saving": amount(p.split.saving),
                    "saving_share": _share(p.split.saving_share),
                }
                for p in a.pools
            ],
            "unpriced_gpus": list(a.unpriced),
        },
        "idle": {
            "floor": a.floor,
            "gpu_hours": round(a.idle_gpu_hours, 6),
            "cost": amount(a.idle_cost),
            "windows": [
                {
                    "window": w.label,
                    "first_hour_of_week": w.first,
                    "hours": w.hours,
                    "gpu_hours": round(w.gpu_hours, 6),
                    "utilisation": _share(w.utilisation),
                    "idle_gpu_hours": round(w.idle_gpu_hours, 6),
                    "idle_cost": amount(w.idle_cost),
                }
                for w in a.windows
            ],
            "cells": [
                {
                    "hour_of_week": c.hour_of_week,
                    "label": c.label,
                    "weeks": c.occurrences,
                    "gpu_hours": round(c.gpu_hours, 6),
                    "utilisation": _share(c.utilisation),
                    "idle_gpu_hours": round(c.idle_gpu_hours, 6),
                    "idle_cost": amount(c.idle_cost),
                    "below_floor": c.utilisation is not None and c.utilisation < a.floor,
                }
                for c in a.cells
            ],
        },
        "fill": {
            "floor": fill.floor,
            "target": fill.target,
            "utilisation_before": _share(fill.utilisation_before),
            "utilisation_after": _share(fill.utilisation_after),
            "unit_cost_cut": _share(fill.unit_cost_cut),
            "cost_per_million_tokens_before": _opt(answer.per_million_before),
            "cost_per_million_tokens_after": _opt(answer.per_million_after),
        },
    }
