"""Cost benchmark (issue 7): how long a week's ``GET /api/v1/cost`` and weekly report take.

Prints, for PostgreSQL and SQLite, in one run on this machine:

1. ``storage.cost.cost`` over the whole window, grouped by model: GPU-hours from the GPU
   rollups with raw samples at the window's edges, served work from request rollups, good
   tokens of whole hours and days from ``good_token_counts``. The first answer counts each whole
   hour's and day's good tokens from raw rows once and keeps them (printed separately); later
   answers read them;
2. the reference measured in the same run: one plain aggregate scan of the same GPU samples
   (``count`` and ``sum(util_gpu)`` over the window), what a raw-sample answer must read at
   least, and the ratio of the two: ``--repeats`` rounds, each one scan and one (warm) cost
   answer in ABBA order, each round's ratio against its own scan; the median and the spread
   (min–max) of the rounds' ratios;
3. building the weekly report (ten cost answers plus savings, without rendering).

``--days 1 --instances 2 --sample-s 60 --rpm 5`` is a smoke run of a few seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
from bench_storage import fresh_postgres
from harness.interleave import interleave, ratio_spread, spread
from harness.results import write_json
from sqlalchemy import Engine, func, select

from infersight.core.cost import CostModel, GpuPrice
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample
from infersight.core.window import Window
from infersight.service.reports import build_weekly, week_of
from infersight.storage import cost, migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore
from infersight.storage.tables import gpu_samples
from infersight.storage.writer import open_writer

MODEL = CostModel(
    "bench",
    "USD",
    {"H100": GpuPrice(Decimal("3.00"), Decimal("2.10"), Decimal("0.7"))},
    electricity_per_kwh=Decimal("0.11"),
    overhead_per_gpu_hour=Decimal("0.15"),
)
START = datetime(2026, 11, 16, tzinfo=UTC)  # a Monday: the bench week is ISO week 2026-W47


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def samples(args: argparse.Namespace, rng: np.random.Generator) -> list[GpuSample]:
    out = []
    steps = int(args.days * 86400 / args.sample_s)
    for i in range(args.instances):
        for g in range(args.gpus):
            util = rng.uniform(0.0, 1.0, steps)
            energy = 1e6
            for k in range(steps):
                power = 100.0 + 500.0 * float(util[k])
                out.append(
                    GpuSample(
                        ts=START + timedelta(seconds=k * args.sample_s),
                        instance=f"gpu-{i}",
                        gpu_index=g,
                        name="NVIDIA H100 80GB HBM3",
                        util_gpu=float(util[k]),
                        power_w=power,
                        energy_j=energy,
                    )
                )
                energy += power * args.sample_s
    return out


def requests(args: argparse.Namespace, rng: np.random.Generator) -> list[RequestRecord]:
    count = int(args.days * 1440 * args.rpm)
    offsets = np.sort(rng.uniform(0, args.days * 86400, count))
    ids = rng.integers(1, 2**63, size=(count, 3))
    out = []
    for n in range(count):
        ttft = float(rng.lognormal(np.log(0.3), 0.8))
        out.append(
            RequestRecord(
                trace_id=f"{int(ids[n, 0]):016x}{int(ids[n, 1]):016x}",
                span_id=f"{int(ids[n, 2]):016x}",
                start=START + timedelta(seconds=float(offsets[n])),
                instance=f"gpu-{n % args.instances}",
                model=("llama-8b", "llama-70b")[n % 2],
                tenant=("acme", "globex")[n % 3 % 2],
                ttft_s=ttft,
                tpot_s=0.02,
                e2e_s=ttft + 6.0,
                prefill_s=ttft / 2,
                decode_s=6.0,
                input_tokens=int(rng.integers(50, 4000)),
                output_tokens=300,
            )
        )
    return out


def load(engine: Engine, gpu: list[GpuSample], reqs: list[RequestRecord]) -> None:
    migrate.upgrade(engine)
    writer = open_writer(engine)
    for i in range(0, len(gpu), 20_000):
        writer.write_gpu_samples(gpu[i : i + 20_000])
    for i in range(0, len(reqs), 20_000):
        writer.write_requests(reqs[i : i + 20_000])


def best_of(repeats: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) if repeats < 3 else statistics.median(times)


def measure(engine: Engine, window: Window, repeats: int) -> dict[str, float]:
    finest = RetentionPolicy().finest_for
    now = window.end + timedelta(hours=9)

    def scan() -> object:
        g = gpu_samples.c
        with engine.connect() as connection:
            return connection.execute(
                select(func.count(), func.sum(g.util_gpu)).where(
                    g.ts >= window.start, g.ts < window.end
                )
            ).one()

    def answer() -> object:
        return cost.cost(engine, window, MODEL, group_by=("model",), finest=finest(window, now))

    def report() -> object:
        return build_weekly(
            SqlStore(engine), MODEL, week_of(window.start.date()), "UTC", finest, now
        )

    first = best_of(1, answer)
    # The reference and the answer in ``repeats`` rounds, ABBA: each round's ratio against
    # its own reference.
    runs = interleave(
        {"scan": lambda: best_of(1, scan), "cost": lambda: best_of(1, answer)}, repeats
    )
    ratio = ratio_spread(runs["cost"], runs["scan"])
    return {
        "reference_scan_s": statistics.median(runs["scan"]),
        "cost_first_s": first,
        "cost_s": statistics.median(runs["cost"]),
        "ratio": ratio.median,
        "ratio_spread": ratio.as_dict(),
        "weekly_report_s": best_of(1, report),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=2, help="GPUs per instance")
    parser.add_argument("--sample-s", type=float, default=30.0, help="GPU sampling interval")
    parser.add_argument("--rpm", type=float, default=30.0, help="requests per minute")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(7)
    gpu, reqs = samples(args, rng), requests(args, rng)
    window = Window(START, START + timedelta(days=args.days))
    print(f"{len(gpu):,} GPU samples and {len(reqs):,} requests over {args.days:g} days")
    results: dict[str, Any] = {"gpu_samples": len(gpu), "requests": len(reqs)}
    url, drop = fresh_postgres(args.postgres)
    try:
        for name, engine_url in (
            ("postgres", url),
            ("sqlite", f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}"),
        ):
            engine = create_store_engine(engine_url)
            try:
                progress(f"loading {name}")
                load(engine, gpu, reqs)
                progress(f"measuring {name}")
                figures = measure(engine, window, args.repeats)
            finally:
                engine.dispose()
            results[name] = figures
            print(
                f"{name:>8}: cost by model {figures['cost_s'] * 1000:8.1f} ms (first answer"
                f" {figures['cost_first_s'] * 1000:.0f} ms); reference: a plain"
                f" scan of the GPU samples {figures['reference_scan_s'] * 1000:8.1f} ms"
                f" (×{spread(figures['ratio_spread']['rounds']).text('', '.1f')}, each"
                f" round's); weekly report {figures['weekly_report_s']:.2f} s"
            )
    finally:
        drop()
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
