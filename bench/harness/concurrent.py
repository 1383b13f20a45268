"""The concurrent case of the API and dashboard benchmarks (issue 16): the SLO evaluation job
running on its interval (the API's own APScheduler ``Jobs``) and a writer shipping batches of
fresh requests, with now and then a late batch from a spool, as sidecars do, while the
benchmark measures its pages or endpoints. The clock moves with real time from the data set's
``now``, so every cycle sees new closed minutes and the writer's rows land in them."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
import numpy as np
from sqlalchemy import Engine

from infersight.core.records import RequestRecord
from infersight.service.evaluation import Evaluator, default_policy
from infersight.service.jobs import Jobs, SoleLeader
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.slo_store import RollupCache
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer

from .interleave import round_orders, spread

Synth = Callable[[np.random.Generator, datetime, int, float], list[RequestRecord]]


class MovingClock:
    """``start`` at first, then moving with the monotonic clock once ``run`` is called."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self._since: float | None = None

    def run(self) -> None:
        self._since = time.monotonic()

    def __call__(self) -> datetime:
        if self._since is None:
            return self.start
        return self.start + timedelta(seconds=time.monotonic() - self._since)


@dataclass
class Shipped:
    """What the sidecar-like writer (``shipping``) wrote."""

    batches: int = 0
    late_batches: int = 0
    requests: int = 0
    write_s: list[float] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        return {
            "batches_written": self.batches,
            "late_batches": self.late_batches,
            "requests_written": self.requests,
            "batch_write_s_median": statistics.median(self.write_s) if self.write_s else None,
        }


@dataclass
class Background:
    jobs: Jobs
    shipped: Shipped = field(default_factory=Shipped)

    def figures(self, interval_s: float) -> dict[str, Any]:
        cold, *warm = list(self.jobs.durations["evaluate"]) or [None]
        return {
            "interval_s": interval_s,
            "cold_cycle_s": cold,
            "warm_cycles": len(warm),
            "warm_cycle_s": {
                "median": statistics.median(warm) if warm else None,
                "max": max(warm) if warm else None,
            },
            "skipped": self.jobs.skipped.get("evaluate", 0),
            **self.shipped.figures(),
        }


@contextmanager
def shipping(
    engine: Engine,
    clock: Callable[[], datetime],
    synth: Synth,
    *,
    batch_every_s: float = 1.0,
    batch_size: int = 50,
    late_every: int = 10,
    shipped: Shipped | None = None,
) -> Iterator[Shipped]:
    """A sidecar-like writer: a batch of ``batch_size`` fresh requests every ``batch_every_s``
    (every ``late_every``-th one late: a spooled batch an hour or two old), until the block
    ends."""
    out = shipped if shipped is not None else Shipped()
    stop = threading.Event()
    writer = open_writer(engine)
    rng = np.random.default_rng(16)

    def write() -> None:
        while not stop.wait(batch_every_s):
            now = clock()
            late = out.batches % late_every == late_every - 1
            # A spooled batch: requests an hour or two old, into rows the cache already holds.
            start = now - timedelta(hours=float(rng.uniform(1, 2))) if late else now
            records = synth(rng, start - timedelta(seconds=batch_every_s), batch_size,
                            batch_every_s)  # fmt: skip
            started = time.perf_counter()
            writer.write_requests(records)
            out.write_s.append(time.perf_counter() - started)
            out.batches += 1
            out.late_batches += late
            out.requests += len(records)

    thread = threading.Thread(target=write, name="bench-writer", daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join()


@contextmanager
def jobs_and_writer(
    engine: Engine,
    evaluator: Evaluator,
    retention: RetentionPolicy,
    clock: MovingClock,
    synth: Synth,
    *,
    interval_s: float,
    batch_every_s: float = 1.0,
    batch_size: int = 50,
    late_every: int = 10,
) -> Iterator[Background]:
    """The evaluation job on ``interval_s`` and a sidecar-like writer, until the block ends."""
    jobs = Jobs(
        SqlStore(engine), evaluator, retention, clock, SoleLeader(),
        evaluation_interval_s=interval_s, maintenance_interval_s=10**7,
    )  # fmt: skip
    background = Background(jobs)
    clock.run()
    with shipping(
        engine, clock, synth, batch_every_s=batch_every_s, batch_size=batch_size,
        late_every=late_every, shipped=background.shipped,
    ):  # fmt: skip
        jobs.start()
        jobs.tick_evaluation()  # the first (cold) cycle runs at once, as the API's first tick
        try:
            yield background
        finally:
            jobs.stop()


def timed_gets(
    app: Any,
    calls: Mapping[str, tuple[str, Mapping[str, str]]],
    repeats: int,
    *,
    warm_up: bool = False,
    order: str = "abba",
) -> dict[str, list[float]]:
    """Seconds per ``GET`` of each named ``(path, params)`` through ``app`` in process, ``repeats``
    rounds of one call each, in ``order`` (``abba``: the names' order, then reversed, …; so a
    reference among them runs first and last alike, and its ``i``-th time is from the same
    round as every other name's), after one untimed call per name with ``warm_up``; a failed
    answer raises."""

    async def run() -> dict[str, list[float]]:
        out: dict[str, list[float]] = {name: [] for name in calls}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            if warm_up:
                for path, params in calls.values():
                    (await client.get(path, params=params)).raise_for_status()
            for names in round_orders(list(calls), repeats, order) if repeats else []:
                for name in names:
                    path, params = calls[name]
                    started = time.perf_counter()
                    response = await client.get(path, params=params)
                    out[name].append(time.perf_counter() - started)
                    response.raise_for_status()
        return out

    return asyncio.run(run())


def busy_timings(
    engine: Engine,
    retention: RetentionPolicy,
    clock: MovingClock,
    synth: Synth,
    timed: Callable[[], dict[str, list[float]]],
    *,
    interval_s: float,
    for_s: float,
    evaluator: Evaluator | None = None,
) -> tuple[dict[str, list[float]], dict[str, Any], float]:
    """``timed()`` over and over for ``for_s`` (at least once) while a fresh-cached evaluator
    runs on ``interval_s`` and a writer writes: the timings by name, the background's figures
    and the seconds the phase took. ``evaluator``: the app's own, as the API runs its job in
    the process that serves it (its cache is replaced by a fresh one, so the first cycle is
    cold as well)."""
    if evaluator is None:
        evaluator = Evaluator(SqlStore(engine), default_policy(), finest_for=retention.finest_for)
    evaluator.cache = RollupCache()
    busy: dict[str, list[float]] = {}
    with jobs_and_writer(
        engine, evaluator, retention, clock, synth, interval_s=interval_s
    ) as background:
        started = time.monotonic()
        while time.monotonic() - started < for_s or not busy:
            for name, times in timed().items():
                busy.setdefault(name, []).extend(times)
        phase_s = time.monotonic() - started
    return busy, background.figures(interval_s), phase_s


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000.0
    return {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99))}


def compare(
    title: str,
    quiet: Sequence[dict[str, list[float]]],
    busy: dict[str, list[float]],
    target_ms: float,
) -> dict[str, dict[str, Any]]:
    """Print each name's quiet and concurrent P50 / P99 and their ratio; the figures.

    ``quiet``: the reference, timed before and after the concurrent phase (it brackets it, so
    a change of the host's load during the run shows): its P50 / P99 are of both together,
    and the P99 ratio is printed against each (median and min–max)."""
    print(f"\n== {title} ==")
    print(f"  {'':<28} {'quiet P50':>10} {'P99':>8}   {'concurrent P50':>14} {'P99':>8}"
          f"   P99 ratio vs quiet before/after ({len(quiet)})")  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for name, seconds in busy.items():
        q = percentiles([t for times in quiet for t in times[name]])
        b = percentiles(seconds)
        quiet_p99 = [percentiles(times[name])["p99"] for times in quiet]
        ratios = spread([b["p99"] / p if p else float("nan") for p in quiet_p99])
        verdict = "ok" if b["p99"] < target_ms else "OVER"
        out[name] = {
            "quiet": q,
            "concurrent": b,
            "p99_ratio": ratios.median,
            "p99_ratio_spread": ratios.as_dict(),
            "samples": len(seconds),
        }
        print(f"  {name:<28} {q['p50']:8.1f} ms {q['p99']:5.0f} ms   {b['p50']:12.1f} ms "
              f"{b['p99']:5.0f} ms   {ratios.text('×', '.2f').replace('rounds', 'quiet')}"
              f"  {verdict}")  # fmt: skip
    print(f"  target: every P99 < {target_ms:.0f} ms while the jobs run and the writer writes")
    return out


def report_background(figures: dict[str, Any], slos: int, phase_s: float) -> None:
    cycle = figures["warm_cycle_s"]
    print(f"  evaluation of {slos} SLOs: first (cold cache) cycle "
          f"{(figures['cold_cycle_s'] or 0) * 1000:.0f} ms; warm (incremental) cycles median "
          f"{(cycle['median'] or 0) * 1000:.0f} ms, max {(cycle['max'] or 0) * 1000:.0f} ms over "
          f"{figures['warm_cycles']} cycles; interval {figures['interval_s']:g} s; "
          f"skipped runs {figures['skipped']}")  # fmt: skip
    print(f"  writer: {figures['batches_written']} batches ({figures['late_batches']} late), "
          f"{figures['requests_written']:,} requests in {phase_s:.0f} s, median batch write "
          f"{(figures['batch_write_s_median'] or 0) * 1000:.0f} ms")  # fmt: skip
