"""The worked example: one H200 serving a known load for ISO week 2026-W48, and an H200 that
sat idle for one day of it, written through the real storage writer.

Hand-computed figures (tests compare with ``Decimal`` equality):

* H200 blended price: 0.75 × 2.80 reserved + 0.25 × 4.00 on demand = 3.10 USD per GPU-hour.
* ``h200-a``: 168 GPU-hours (a sample every 15 minutes all week) → GPU 520.80; 500 W for
  168 h = 84 kWh at 0.12 → energy 10.08; overhead 0.20 per GPU-hour → 33.60; total 564.48.
* It served 480 requests of 14,000 input + 7,000 output tokens = 10,080,000 tokens →
  56.00 per million. Prefill 2 s and decode 8 s per request → input cost 20 % = 112.896
  over 6,720,000 input tokens = 16.80 per million; output 451.584 over 3,360,000 = 134.40.
  One request in five had a 3 s TTFT (over the 2 s objective) → 8,064,000 good tokens →
  70.00 per million good tokens. 10,080,000 tokens / 302.4 MJ = 1/30 token per joule.
* ``h200-idle``: sampled for Wednesday only at 0 % utilisation and 100 W, served nothing:
  24 GPU-hours → 74.40 + 2.4 kWh × 0.12 = 0.288 + overhead 4.80 = 79.488, all of it idle.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Final

import numpy as np
from sqlalchemy import Engine

from infersight.core.cost import CostModel, GoodRequest, GpuPrice
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.window import Window
from infersight.storage.writer import open_writer
from tests.factories import make_records

WEEK_START: Final = datetime(2026, 11, 23, tzinfo=UTC)  # Monday of 2026-W48
WEEK: Final = Window(WEEK_START, WEEK_START + timedelta(days=7))
IDLE_DAY: Final = Window(WEEK_START + timedelta(days=2), WEEK_START + timedelta(days=3))
STEP: Final = timedelta(minutes=15)
REQUESTS: Final = 480

MODEL: Final = CostModel(
    name="worked",
    currency="USD",
    gpu_prices={
        "H200": GpuPrice(Decimal("4.00"), Decimal("2.80"), Decimal("0.75")),
        "L40S": GpuPrice(Decimal("1.20")),
    },
    electricity_per_kwh=Decimal("0.12"),
    overhead_per_gpu_hour=Decimal("0.20"),
    sample_gap_s=900.0,
    good=GoodRequest(ttft_s=2.0, tpot_s=0.1),
)


def gpu_series(
    instance: str, window: Window, util: float, power_w: float, name: str = "NVIDIA H200"
) -> list[GpuSample]:
    out = []
    ts, energy = window.start, 1_000_000.0
    while ts < window.end:
        out.append(
            GpuSample(
                ts=ts,
                instance=instance,
                gpu_index=0,
                name=name,
                util_gpu=util,
                power_w=power_w,
                energy_j=energy,
            )
        )
        ts += STEP
        energy += power_w * STEP.total_seconds()
    return out


def worked_requests() -> list[RequestRecord]:
    gap = WEEK.seconds / REQUESTS
    out = []
    for i in range(REQUESTS):
        slow = i % 5 == 0
        out.append(
            RequestRecord(
                trace_id=f"{i + 1:032x}",
                span_id=f"{i + 1:016x}",
                start=WEEK.start + timedelta(seconds=i * gap),
                instance="h200-a",
                engine="vllm",
                model="llama-70b",
                tenant="acme",
                priority="interactive",
                ttft_s=3.0 if slow else 0.5,
                tpot_s=0.05,
                e2e_s=(3.0 if slow else 0.5) + 0.05 * 6999,
                queue_s=2.7 if slow else 0.2,
                prefill_s=2.0,
                decode_s=8.0,
                input_tokens=14000,
                output_tokens=7000,
                finish_reason="stop",
            )
        )
    return out


def write_worked_week(engine: Engine) -> None:
    writer = open_writer(engine)
    writer.write_gpu_samples(gpu_series("h200-a", WEEK, util=0.6, power_w=500.0))
    writer.write_gpu_samples(gpu_series("h200-idle", IDLE_DAY, util=0.0, power_w=100.0))
    writer.write_requests(worked_requests())


def write_simulated_week(engine: Engine) -> None:
    """The worked week plus a second model on two under-used L40S instances (random load),
    with server gauges that show requests waiting on one of them."""
    write_worked_week(engine)
    rng = np.random.default_rng(48)
    writer = open_writer(engine)
    writer.write_requests(
        make_records(
            rng,
            WEEK.start,
            300,
            span=timedelta(days=7),
            models=("llama-8b",),
            instances=("l40s-0", "l40s-1"),
        )
    )
    for name, util in (("l40s-0", 0.2), ("l40s-1", 0.15)):
        writer.write_gpu_samples(
            gpu_series(name, WEEK, util=util, power_w=200.0, name="NVIDIA L40S")
        )
    writer.write_server_samples(
        [
            ServerSample(
                ts=WEEK.start + timedelta(hours=h),
                instance="l40s-0",
                engine="vllm",
                model="llama-8b",
                requests_running=2.0,
                requests_waiting=3.0,
                kv_cache_usage=0.3,
            )
            for h in range(0, 168, 6)
        ]
    )
