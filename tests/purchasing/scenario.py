"""A week of an H200 fleet for the purchasing advice, written through the real store writer.

ISO week 2026-W48 (Monday 23 November, UTC), a sample every 5 minutes (the rollups' gap, so
every hour of a running GPU covers exactly 3600 s):

* ``base-0`` and ``base-1`` run all week: 10 % busy from 01:00 to 07:00 every day, 50 % else;
* ``peak-0`` runs Monday to Friday 08:00–20:00 (60 hours) at 80 %.

Hand-computed under ``MODEL`` (H200 4.00 on demand, 2.80 reserved, so the newsvendor reserves
the 1 − 0.7 = 30 % quantile): 2 GPUs are in use every hour and 3 in 60 of the 168, so the
hours above R = 2 are 60 ≤ 0.7 × 168 = 117.6 and R = 2. Split: 2 × 2.80 × 168 + 60 × 4.00 =
1180.80; all on demand: 396 × 4.00 = 1584.00; saving 403.20 (25.45 %); reserved GPUs carry 336
of the 396 GPU-hours (84.8 %).

Idle windows (floor 30 %): 01:00–07:00 every day, 7 windows of 6 cells, each cell 2 GPU-hours at
10 %: 1.8 idle GPU-hours, costing 0.9 × 2 × 3.10 (the blended price) = 5.58; a window 10.8
idle GPU-hours and 33.48. Filling them to 60 %: busy GPU-hours 2 × (42 × 0.1 + 126 × 0.5) +
60 × 0.8 = 182.4 before, + 42 × 2 × 0.5 = 224.4 after: unit cost × 182.4 / 224.4.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Final

import numpy as np
from sqlalchemy import Engine

from infersight.core.cost import CostModel, GpuPrice
from infersight.core.samples import GpuSample
from infersight.core.window import Window
from infersight.storage.writer import open_writer
from tests.factories import make_records

WEEK_START: Final = datetime(2026, 11, 23, tzinfo=UTC)
WEEK: Final = Window(WEEK_START, WEEK_START + timedelta(days=7))
STEP: Final = timedelta(minutes=5)
MODEL: Final = CostModel(
    name="fleet",
    currency="USD",
    gpu_prices={"H200": GpuPrice(Decimal("4.00"), Decimal("2.80"), Decimal("0.75"))},
)
NO_RESERVED: Final = CostModel(
    name="fleet", currency="EUR", gpu_prices={"H200": GpuPrice(Decimal("4.00"))}
)

RESERVED_GPUS: Final = 2
SPLIT_COST: Final = Decimal("1180.800000")
ON_DEMAND_COST: Final = Decimal("1584.000000")
SAVING: Final = Decimal("403.200000")
COVERAGE: Final = 336 / 396
WINDOW_IDLE_COST: Final = Decimal("33.480000")
FILL_FACTOR: Final = 182.4 / 224.4


def base_util(at: datetime) -> float:
    return 0.1 if 1 <= at.hour < 7 else 0.5


def peak_on(at: datetime) -> bool:
    return at.weekday() < 5 and 8 <= at.hour < 20


def fleet_samples(week: Window = WEEK) -> list[GpuSample]:
    out = []
    at = week.start
    while at < week.end:
        for name in ("base-0", "base-1"):
            out.append(
                GpuSample(
                    ts=at,
                    instance=name,
                    gpu_index=0,
                    name="NVIDIA H200",
                    util_gpu=base_util(at),
                    power_w=400.0,
                )
            )
        if peak_on(at):
            out.append(
                GpuSample(
                    ts=at,
                    instance="peak-0",
                    gpu_index=0,
                    name="NVIDIA H200",
                    util_gpu=0.8,
                    power_w=600.0,
                )
            )
        at += STEP
    return out


def write_fleet_week(engine: Engine, week: Window = WEEK, requests: int = 600) -> None:
    """The fleet's samples, and ``requests`` requests over the week (for a unit cost)."""
    writer = open_writer(engine)
    writer.write_gpu_samples(fleet_samples(week))
    rng = np.random.default_rng(18)
    writer.write_requests(
        make_records(
            rng,
            week.start,
            requests,
            span=week.end - week.start,
            models=("llama-70b",),
            instances=("base-0", "base-1"),
        )
    )
