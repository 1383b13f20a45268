"""API benchmark (issue 5): the latency endpoint over 30 days, and one evaluation of 50 SLOs.

Prints, in one run on this machine:

1. the response time (P50 / P95 / P99 over ``--repeats`` calls) of
   ``GET /api/v1/latency`` for 30 days of TTFT (served from rollups), through the real app
   over httpx's ASGI transport — next to the reference: the same ``storage.queries.latency``
   call made directly, so the ratio is the API's own overhead (the two alternate, ABBA, one
   call each per round; the P95 ratio, and each call's ratio to its round's reference,
   median and min–max); target P95 < 100 ms;
2. the time one evaluation cycle of ``--slos`` SLOs takes (availability and latency SLIs over
   several selectors, 28- and 30-day windows, seven burn-rate windows each), next to the
   reference of one SLO's status computed alone × the number of SLOs (the cycles and the
   reference, every SLO's status alone, alternate in ``--cycles`` ABBA rounds; each cycle's
   ratio to its round's reference, median and min–max); target < 1 s.

The data set is the foundation benchmark's (``bench_storage.load_days``: ``--rpm`` requests a
minute over ``--days`` days on a fresh PostgreSQL database, dropped afterwards unless
``--keep``). ``--url`` reuses a database loaded earlier. ``--days 1 --rpm 10`` is a smoke run.

3. the concurrent case (issue 16): ``GET /api/v1/latency`` (30 days), ``GET /api/v1/slos``
   (every SLO's status) and ``GET /metrics`` (its answer cache off, so every scrape computes)
   quiet — the same-run reference, timed before and after the concurrent phase — and for
   ``--concurrent-s`` seconds while the evaluation job runs every ``--interval`` seconds (its
   first cycle on a cold cache) and a writer ships a batch a second as sidecars do (every
   tenth late); P50 / P99 and their ratio against each quiet timing, the cold
   and warm (incremental) cycle times against the interval and the runs APScheduler skipped.

``--quick`` is a smoke run of every case.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import bench_storage
import httpx
import numpy as np
from harness.concurrent import MovingClock, busy_timings, compare, report_background, timed_gets
from harness.interleave import interleave, ratio_spread, round_orders
from harness.results import write_json

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.query import Method, Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Window
from infersight.service.evaluation import Evaluator, default_policy, status
from infersight.storage import migrate, queries, slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sql_store import SqlStore


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000.0
    return {f"p{q}": float(np.percentile(ms, q)) for q in (50, 95, 99)}


def slo_specs(count: int, models: tuple[str, ...], instances: tuple[str, ...]) -> list[SloSpec]:
    selectors = [
        Selector(),
        *(Selector(model=m) for m in models),
        *(Selector(instance=i) for i in instances),
        Selector(model=models[0], instance=instances[0]),
    ]
    slis = [
        Sli(SliKind.AVAILABILITY),
        Sli(SliKind.LATENCY, "ttft", 0.2),
        Sli(SliKind.LATENCY, "tpot", 0.015),
        Sli(SliKind.LATENCY, "e2e", 5.0),
    ]
    return [
        SloSpec(
            f"slo-{i:03d}",
            slis[i % len(slis)],
            (0.99, 0.995, 0.999)[i % 3],
            timedelta(days=(28, 30)[i % 2]),
            selectors[(i // len(slis)) % len(selectors)],
        )
        for i in range(count)
    ]


def latency_endpoint(
    app: Any, window: Window, repeats: int, direct: Callable[[str], object]
) -> tuple[list[float], list[float], str]:
    """``repeats`` rounds of one API call and one ``direct(method)`` call (the reference),
    in ABBA order: the API's times, the reference's and the method the API answered with."""
    params = {
        "metric": "ttft",
        "start": window.start.isoformat(),
        "end": window.end.isoformat(),
        "quantiles": "0.5,0.9,0.95,0.99",
    }

    async def run() -> tuple[list[float], list[float], str]:
        times: list[float] = []
        reference: list[float] = []
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            warm = await client.get("/api/v1/latency", params=params)  # warm-up
            warm.raise_for_status()
            method = warm.json()["method"]
            direct(method)
            for names in round_orders(["api", "direct"], repeats):
                for name in names:
                    started = time.perf_counter()
                    if name == "direct":
                        direct(method)
                        reference.append(time.perf_counter() - started)
                        continue
                    response = await client.get("/api/v1/latency", params=params)
                    times.append(time.perf_counter() - started)
                    response.raise_for_status()
                    method = response.json()["method"]
        return times, reference, method

    return asyncio.run(run())


ENDPOINTS = ("latency-30d", "slos", "metrics")


def timed_endpoints(app: Any, window: Window, repeats: int) -> dict[str, list[float]]:
    calls = {
        "latency-30d": ("/api/v1/latency", {
            "metric": "ttft", "start": window.start.isoformat(), "end": window.end.isoformat(),
        }),
        "slos": ("/api/v1/slos", {}),
        "metrics": ("/metrics", {}),
    }  # fmt: skip

    return timed_gets(app, {name: calls[name] for name in ENDPOINTS}, repeats)


def concurrent_case(
    engine: Any, retention: RetentionPolicy, now: datetime, window: Window, args: Any
) -> dict[str, Any]:
    """The endpoints quiet, then while the evaluation job runs and a writer writes."""
    clock = MovingClock(now)
    settings = ApiSettings(run_jobs=False, metrics_cache_s=0)
    app = create_app(settings, engine, clock, retention=retention)
    timed_endpoints(app, window, 1)  # warm-up
    # The quiet reference brackets the concurrent phase: timed before it and after it.
    before = timed_endpoints(app, window, args.repeats)
    busy, figures, phase_s = busy_timings(
        engine, retention, clock, bench_storage.synth,
        lambda: timed_endpoints(app, window, args.repeats),
        interval_s=args.interval, for_s=args.concurrent_s,
    )  # fmt: skip
    after = timed_endpoints(app, window, args.repeats)
    endpoints = compare(
        f"endpoints, quiet vs while the jobs run and a writer writes ({args.slos} SLOs)",
        [before, after], busy, 300.0,
    )  # fmt: skip
    report_background(figures, args.slos, phase_s)
    return {"endpoints_ms": endpoints, "background": figures, "seconds": phase_s}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--url", help="a database loaded earlier (with --keep); skips loading")
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rpm", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--slos", type=int, default=50)
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--interval", type=float, default=30.0, help="evaluation interval, s")
    parser.add_argument("--concurrent-s", type=float, default=120.0)
    parser.add_argument("--quick", action="store_true", help="a smoke run of every case")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.days, args.rpm, args.repeats, args.slos, args.cycles = 1, 3, 3, 8, 1
        args.interval, args.concurrent_s = 1.0, 3.0
    now = datetime(2026, 11, 30, 9, 17, 23, tzinfo=UTC)
    drop = None
    url = args.url
    if url is None:
        url, drop = bench_storage.fresh_postgres(args.postgres)
        started = time.perf_counter()
        loaded = bench_storage.load_days(
            url, args.days, args.rpm, now.replace(second=0, microsecond=0), seed=11
        )
        print(f"  loaded {loaded:,} requests in {time.perf_counter() - started:.0f} s")
    engine = create_store_engine(url)
    if args.url is not None:  # a store kept by an older version: its schema as `serve` makes it
        migrate.upgrade(engine)
    results: dict[str, Any] = {}
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
        retention = RetentionPolicy(raw_days=60, minute_days=60, hour_days=180)
        app = create_app(ApiSettings(run_jobs=False), engine, lambda: now, retention=retention)
        window = Window(now - timedelta(days=args.days), now)

        print(f"\n== GET /api/v1/latency, {args.days} days of TTFT at {args.rpm}/min ==")
        api_times, direct, method = latency_endpoint(
            app,
            window,
            args.repeats,
            lambda m: queries.latency(engine, "ttft", window, method=Method(m)),
        )
        api, ref = percentiles(api_times), percentiles(direct)
        per_call = ratio_spread(api_times, direct)
        results["latency_endpoint_ms"] = api
        results["latency_query_reference_ms"] = ref
        results["per_call_ratio"] = per_call.as_dict()
        results["method"] = method
        print(f"  reference: storage.queries.latency alone  P50 {ref['p50']:7.1f} ms  "
              f"P95 {ref['p95']:7.1f} ms")  # fmt: skip
        print(f"  API response (ASGI, JSON, {method:<6})      P50 {api['p50']:7.1f} ms  "
              f"P95 {api['p95']:7.1f} ms  P99 {api['p99']:7.1f} ms")  # fmt: skip
        print("  target: P95 < 100 ms")
        print(f"  ratio API / reference at P95            {api['p95'] / ref['p95']:7.2f}×")
        print(f"  each call against its round's reference {per_call.text()} ({args.repeats} "
              "ABBA rounds of one call each)")  # fmt: skip

        print(f"\n== evaluation of {args.slos} SLOs per cycle ==")
        specs = slo_specs(args.slos, bench_storage.MODELS, bench_storage.INSTANCES)
        for spec in specs:
            slo_store.put_slo(engine, spec, now)
        policy = default_policy()
        sql = SqlStore(engine)
        evaluator = Evaluator(
            sql, policy, finest_for=retention.finest_for, cache=sql.events.new_cache()
        )
        cycles: list[float] = []
        single: list[float] = []
        alone: list[float] = []  # per round: every SLO's status alone, summed

        def cycle() -> float:
            cycles.append(evaluator.run(now + timedelta(seconds=30 * len(cycles))).seconds)
            return cycles[-1]

        def each_alone() -> float:
            for spec in specs:
                started = time.perf_counter()
                with sql.events.cycle(now, retention.finest_for, cached=False) as scratch:
                    status(scratch, spec, policy, now)
                single.append(time.perf_counter() - started)
            alone.append(sum(single[-len(specs) :]))
            return alone[-1]

        # The cycles and the reference in ABBA rounds (the first cycle, on a cold cache, runs
        # first as before: the reference's first round follows it).
        runs = interleave({"cycle": cycle, "alone": each_alone}, args.cycles)
        ratio = ratio_spread(runs["cycle"], runs["alone"])
        results["evaluation_cycle_s"] = {"median": statistics.median(cycles), "max": max(cycles)}
        results["evaluation_cold_cycle_s"] = cycles[0]
        results["single_slo_status_s"] = statistics.median(single)
        results["cycle_ratio_to_reference"] = ratio.as_dict()
        print(f"  reference: one SLO's status alone, ×{args.slos}        "
              f"{statistics.median(single) * args.slos * 1000:8.1f} ms")  # fmt: skip
        print(f"  a cycle against its round's reference (every SLO alone, summed) "
              f"{ratio.text()}")  # fmt: skip
        print(f"  one cycle (status + alert state + incidents)  median "
              f"{statistics.median(cycles) * 1000:8.1f} ms  max {max(cycles) * 1000:8.1f} ms"
              "  (target < 1 s)")  # fmt: skip
        print(f"  of which the first (cold cache) cycle {cycles[0] * 1000:8.1f} ms; later cycles "
              "reuse the rollup counts that did not change")  # fmt: skip
        results["concurrent"] = concurrent_case(engine, retention, now, window, args)
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
