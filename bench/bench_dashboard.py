"""Dashboard benchmark (issue 9): every page's server time over 30 days of data.

Prints, in one run on this machine, the time the app takes to answer each dashboard page
(``GET /ui/<page>``: queries, view-model, SVG and template; through httpx's ASGI transport,
so no network and no browser), P50 / P95 over ``--repeats`` calls, for the last 30 days and
for the default range; target < 300 ms each. The reference, measured in the same run, is
``GET /api/v1/latency`` over the same 30 days (one rollup-served JSON query), interleaved with
the pages (``--repeats`` rounds of one call each, ABBA: the reference first in one round, last
in the next); the ratio, each round's call against that round's reference, median and spread
(min–max), says how many such queries a page costs.

The data set: ``bench_storage.load_days`` (``--rpm`` requests a minute over ``--days`` days,
two models on two instances) on a fresh PostgreSQL database, plus GPU samples (two GPUs per
instance every ``--gpu-interval`` seconds), five SLOs evaluated once, a stored baseline and
a step load-test run. The maintenance job then runs once, as the API's scheduler would: it
counts and keeps each closed day's and hour's good tokens (``storage.good_tokens``), which the
Cost page and the overview read over long ranges (its time is printed). ``--url`` reuses a
database loaded earlier with ``--keep``.
``--days 1 --rpm 3 --repeats 2`` is a smoke run.

The concurrent case (issue 16): ``--slos`` more SLOs (``bench_api.slo_specs``) are stored
before any page is timed; then the 30-day pages are timed again for ``--concurrent-s`` seconds
while the API's evaluation job runs every ``--interval`` seconds (its first cycle on a cold
cache) and a writer ships a batch a second as sidecars do (every tenth one late, an hour or
two back), the clock moving with real time. It prints P50 / P99 quiet (the same-run
reference, timed before and after the concurrent phase) and concurrent with their ratio
against each quiet timing, the cold and warm cycle times against the interval
and the runs APScheduler skipped. ``--quick`` is the smoke run of all of it.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import bench_api
import bench_storage
import numpy as np
from harness.concurrent import MovingClock, busy_timings, compare, report_background, timed_gets
from harness.interleave import ratio_spread
from harness.results import write_json

from infersight.api import create_app
from infersight.api.context import context_of
from infersight.api.settings import ApiSettings
from infersight.core.loadtest import LoadTestRun, RequestResult, ScenarioKind
from infersight.core.query import Selector
from infersight.core.samples import GpuSample
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Window
from infersight.loadgen.scenarios import step
from infersight.service.cost_spec import example_model
from infersight.service.evaluation import Evaluator, default_policy
from infersight.storage import migrate, slo_store
from infersight.storage.baselines import capture_window, save_baseline
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy, maintain
from infersight.storage.runs import save_run
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer

PAGES = ("overview", "latency", "gpus", "cost", "incidents", "baselines", "capacity")
TARGET_MS = 300.0
GPUS_PER_INSTANCE = 2


def gpu_samples(
    instances: tuple[str, ...], start: datetime, end: datetime, interval_s: int
) -> Iterator[list[GpuSample]]:
    """Busy GPUs with a daily utilisation cycle; one GPU throttles for an hour a day."""
    rng = np.random.default_rng(5)
    at = start
    batch: list[GpuSample] = []
    while at < end:
        hour = at.hour + at.minute / 60
        busy = 0.55 + 0.35 * np.sin((hour - 8) / 24 * 2 * np.pi)
        for instance in instances:
            for index in range(GPUS_PER_INSTANCE):
                hot = instance == instances[0] and index == 0 and 14 <= at.hour < 15
                util = float(np.clip(busy + rng.normal(0, 0.03), 0, 1))
                batch.append(
                    GpuSample(
                        at, instance, index, name="NVIDIA H200", util_gpu=util,
                        util_memory=util * 0.7, memory_used_bytes=120e9,
                        memory_total_bytes=141e9, power_w=150 + 500 * util, power_limit_w=700.0,
                        temperature_c=88.0 if hot else 55 + 15 * util,
                        sm_clock_mhz=1300.0 if hot else 1980.0, memory_clock_mhz=3201.0,
                        throttle_reasons=("sw_thermal_slowdown",) if hot else (),
                    )
                )  # fmt: skip
        if len(batch) >= 20_000:
            yield batch
            batch = []
        at += timedelta(seconds=interval_s)
    if batch:
        yield batch


def step_run(model: str, started_at: datetime) -> LoadTestRun:
    """A step load test of a server that saturates at 8 concurrent requests (2 req/s each)."""
    phases = step([2, 4, 8, 12, 16], 10.0)
    results, seq = [], 0
    for phase in phases:
        rps = 2.0 * min(phase.concurrency, 8)
        e2e = phase.concurrency / rps
        for k in range(int(rps * phase.duration_s)):
            seq += 1
            results.append(
                RequestResult(
                    seq=seq, phase=phase.index, sent_s=phase.start_s + k / rps, e2e_s=e2e,
                    ttft_s=0.05 + (e2e - 0.5), tpot_s=0.0045, input_tokens=500, output_tokens=100,
                )
            )  # fmt: skip
    return LoadTestRun(
        "bench-step", ScenarioKind.STEP, "http://bench", model, started_at, phases, tuple(results)
    )


def load_extras(url: str, bench_storage: Any, days: int, now: datetime, interval: int) -> None:
    engine = create_store_engine(url)
    try:
        writer = open_writer(engine)
        start = now - timedelta(days=days)
        for batch in gpu_samples(bench_storage.INSTANCES, start, now, interval):
            writer.write_gpu_samples(batch)
        models, instances = bench_storage.MODELS, bench_storage.INSTANCES
        specs = [
            SloSpec("availability", Sli(SliKind.AVAILABILITY), 0.999, timedelta(days=30)),
            *(
                SloSpec(f"ttft-{i}", Sli(SliKind.LATENCY, "ttft", 0.3), 0.99,
                        timedelta(days=28), Selector(model=m))
                for i, m in enumerate(models)
            ),
            *(
                SloSpec(f"tpot-{i}", Sli(SliKind.LATENCY, "tpot", 0.015), 0.99,
                        timedelta(days=28), Selector(instance=inst))
                for i, inst in enumerate(instances)
            ),
        ]  # fmt: skip
        for spec in specs:
            slo_store.put_slo(engine, spec, start)
        Evaluator(SqlStore(engine), default_policy()).run(now)
        first_day = Window(start, start + timedelta(days=1))
        baseline = capture_window(
            engine, "first-day", first_day, Selector(model=models[0]), start + timedelta(days=1),
            cost_model=example_model(),
        )  # fmt: skip
        save_baseline(engine, baseline)
        save_run(engine, step_run(models[0], start))
    finally:
        engine.dispose()


def timed_pages(app: Any, params: dict[str, str], repeats: int) -> dict[str, list[float]]:
    calls = {page: (f"/ui/{page}", params) for page in PAGES}
    calls["reference"] = ("/api/v1/latency", {**params, "metric": "ttft"})
    return timed_gets(app, calls, repeats, warm_up=True)


def report(title: str, times: dict[str, list[float]]) -> dict[str, Any]:
    """Each page's P50 / P95, and its calls against the reference's of the same round (the
    pages and the reference interleaved, ABBA): median and spread of those ratios."""
    print(f"\n== {title} ==")
    print(f"  ({len(times['reference'])} ABBA rounds of one call each; ratio: each round's "
          "call against its reference call, median (min–max))")  # fmt: skip
    out: dict[str, Any] = {}
    for page, seconds in times.items():
        ms = np.asarray(seconds) * 1000
        p50, p95 = float(np.percentile(ms, 50)), float(np.percentile(ms, 95))
        ratio = ratio_spread(seconds, times["reference"])
        out[page] = {"p50": p50, "p95": p95, "ratio": ratio.as_dict()}
        name = "reference: GET /api/v1/latency" if page == "reference" else f"/ui/{page}"
        verdict = "" if page == "reference" else ("  ok" if p95 < TARGET_MS else "  OVER")
        versus = "" if page == "reference" else f"  {ratio.text('×', '.1f')} reference"
        print(f"  {name:<32} P50 {p50:7.1f} ms  P95 {p95:7.1f} ms{versus}{verdict}")  # fmt: skip
    print(f"  target: every page P95 < {TARGET_MS:.0f} ms")
    return out


def concurrent_case(
    engine: Any,
    app: Any,
    clock: MovingClock,
    retention: RetentionPolicy,
    params: dict[str, str],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The 30-day pages quiet, then while the evaluation job runs and a writer writes."""
    # The quiet reference brackets the concurrent phase: timed before it and after it.
    before = timed_pages(app, params, args.repeats)
    busy, figures, phase_s = busy_timings(
        engine, retention, clock, bench_storage.synth,
        lambda: timed_pages(app, params, args.repeats),
        interval_s=args.interval, for_s=args.concurrent_s, evaluator=context_of(app).evaluator,
    )  # fmt: skip
    after = timed_pages(app, params, args.repeats)
    pages = compare(
        f"30-day pages, quiet vs while the jobs run and a writer writes "
        f"({len(slo_store.list_slos(engine))} SLOs)",
        [before, after], busy, TARGET_MS,
    )  # fmt: skip
    report_background(figures, len(slo_store.list_slos(engine)), phase_s)
    return {"pages_ms": pages, "background": figures, "seconds": phase_s}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--url", help="a database loaded earlier (with --keep); skips loading")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rpm", type=int, default=30)
    parser.add_argument("--gpu-interval", type=int, default=30, help="seconds between samples")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--slos", type=int, default=50, help="SLOs added for the concurrent case")
    parser.add_argument("--interval", type=float, default=30.0, help="evaluation interval, s")
    parser.add_argument("--concurrent-s", type=float, default=120.0)
    parser.add_argument(
        "--answer-ttl",
        type=float,
        default=ApiSettings().dashboard_answer_ttl_s,
        help="the pages' answer cache, s (dashboard_answer_ttl_s; 0: off)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of every case")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.days, args.rpm, args.repeats, args.gpu_interval = 1, 2, 1, 600
        args.slos, args.interval, args.concurrent_s = 6, 1.0, 3.0
    now = datetime(2026, 11, 30, 9, 17, 23, tzinfo=UTC)
    drop, url = None, args.url
    if url is None:
        url, drop = bench_storage.fresh_postgres(args.postgres)
        started = time.perf_counter()
        loaded = bench_storage.load_days(
            url, args.days, args.rpm, now.replace(second=0, microsecond=0), seed=11
        )
        load_extras(url, bench_storage, args.days, now, args.gpu_interval)
        print(f"  loaded {loaded:,} requests and GPU samples in "
              f"{time.perf_counter() - started:.0f} s")  # fmt: skip
    engine = create_store_engine(url)
    if args.url is not None:  # a store kept by an older version: its schema as `serve` makes it
        migrate.upgrade(engine)
    results: dict[str, Any] = {}
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
        retention = RetentionPolicy(raw_days=60, minute_days=60, hour_days=180)
        started = time.perf_counter()
        maintain(engine, now, retention)
        print(f"  maintenance (keeps each closed day's and hour's good tokens): "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        for spec in bench_api.slo_specs(args.slos, bench_storage.MODELS, bench_storage.INSTANCES):
            slo_store.put_slo(engine, spec, now)
        clock = MovingClock(now)
        settings = ApiSettings(run_jobs=False, dashboard_answer_ttl_s=args.answer_ttl)
        app = create_app(settings, engine, clock, retention=retention)
        print(f"  answer cache: {f'{args.answer_ttl:g} s' if args.answer_ttl else 'off'}")
        span = f"{args.days}d" if args.days in (1, 7, 30) else None
        long_params = (
            {"range": "24h" if args.days == 1 else span}
            if span
            else {"start": (now - timedelta(days=args.days)).isoformat(), "end": now.isoformat()}
        )
        results["range_30d_ms"] = report(
            f"every page over the last {args.days} days ({args.rpm}/min)",
            timed_pages(app, long_params, args.repeats),
        )
        results["default_range_ms"] = report(
            "every page over its default range (1 h; 24 h for cost, incidents, capacity)",
            timed_pages(app, {}, args.repeats),
        )
        results["concurrent"] = concurrent_case(engine, app, clock, retention, long_params, args)
    finally:
        engine.dispose()
        if drop is not None:
            if args.keep:
                print(f"  kept: {url}")
            else:
                drop()
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
