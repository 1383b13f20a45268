"""Storage benchmark (issue: foundation): bulk ingest rates and the 30-day quantile query.

Prints, in one run on this machine:

1. ingest records/s through the idempotent writers (PostgreSQL and SQLite, rollups included),
   next to the reference: raw binary COPY of the same rows into a plain, unindexed table;
   and the rate of a full replay (every record a duplicate). ``--rounds`` rounds, each on a
   fresh PostgreSQL database and SQLite file, running the reference and the writers once in
   ABBA order (round 1 the COPY reference first, round 2 last, …; ``--order random``
   shuffles): each round's ratios are taken against that round's reference, every round is
   printed, then the median and spread (min–max) of the ratios;
2. a 30-day P50/P90/P95/P99 TTFT query at ``--rpm`` requests per minute: served from rollups
   vs. exact ``percentile_cont`` over the raw rows (the reference), interleaved the same way
   (each round one exact query and three from the rollups), with the sketch's largest
   relative error.

Each run uses a fresh PostgreSQL database (dropped afterwards unless ``--keep``) and a fresh
SQLite file. ``--days 1 --rpm 10 --ingest-records 2000`` is a smoke run of a few seconds.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from harness.interleave import (
    add_round_arguments,
    interleave,
    ratio_spread,
    round_orders,
    spread,
)
from harness.results import write_json
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from infersight.core.query import Method
from infersight.core.records import RECORD_FIELDS, RequestRecord
from infersight.core.window import Window
from infersight.storage import migrate, queries
from infersight.storage.batch import Batch
from infersight.storage.engine import create_store_engine
from infersight.storage.writer import COPY_TYPES, open_writer

MODELS = ("llama-3.1-8b", "llama-3.1-70b")
INSTANCES = ("gpu-a", "gpu-b")


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def synth(
    rng: np.random.Generator, start: datetime, count: int, seconds: float
) -> list[RequestRecord]:
    """``count`` requests spread over ``seconds`` from ``start`` with log-normal latencies."""
    offsets = np.sort(rng.uniform(0.0, seconds, count))
    ttft = rng.lognormal(np.log(0.09), 0.7, count)
    tpot = rng.lognormal(np.log(0.011), 0.25, count)
    outputs = rng.integers(1, 600, count)
    inputs = rng.integers(20, 3000, count)
    queue = rng.exponential(0.015, count)
    ids = rng.integers(1, 2**63, size=(count, 3))
    errors = rng.random(count) < 0.005
    out = []
    for i in range(count):
        decode = float(tpot[i] * (int(outputs[i]) - 1))
        out.append(
            RequestRecord(
                trace_id=f"{int(ids[i, 0]):016x}{int(ids[i, 1]):016x}",
                span_id=f"{int(ids[i, 2]):016x}",
                start=start + timedelta(seconds=float(offsets[i])),
                instance=INSTANCES[i % 2],
                engine="vllm",
                model=MODELS[(i >> 1) % 2],
                tenant="default",
                priority="interactive",
                ttft_s=float(ttft[i]),
                tpot_s=float(tpot[i]),
                e2e_s=float(ttft[i]) + decode,
                queue_s=float(queue[i]),
                prefill_s=float(ttft[i] - queue[i]) if ttft[i] > queue[i] else 0.0,
                decode_s=decode,
                input_tokens=int(inputs[i]),
                output_tokens=int(outputs[i]),
                status="error" if errors[i] else "ok",
                finish_reason="stop",
            )
        )
    return out


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def batches(records: list[RequestRecord], size: int) -> Iterator[list[RequestRecord]]:
    for i in range(0, len(records), size):
        yield records[i : i + size]


def fresh_postgres(admin_url: str) -> tuple[str, Callable[[], None]]:
    """A new, empty database next to ``admin_url``'s, and a function that drops it."""
    name = f"infersight_bench_{uuid.uuid4().hex[:10]}"
    admin = make_url(admin_url)
    dsn = admin.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return admin.set(database=name).render_as_string(hide_password=False), drop


def reference_copy(url: str, records: list[RequestRecord], batch: int) -> float:
    """Raw binary COPY of the same rows into a plain, unindexed table: the ceiling (the
    database must have the store's tables, whose shape the plain table copies)."""
    engine = create_store_engine(url)
    rows = list(Batch.of(records).rows())
    columns = ", ".join(f'"{c}"' for c in RECORD_FIELDS)
    with engine.begin() as c:
        c.exec_driver_sql("CREATE TABLE copy_reference AS SELECT * FROM requests WITH NO DATA")
    start = time.perf_counter()
    for chunk in (rows[i : i + batch] for i in range(0, len(rows), batch)):
        with engine.begin() as c:
            raw = c.connection.driver_connection
            with (
                raw.cursor() as cur,
                cur.copy(f"COPY copy_reference ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.set_types(COPY_TYPES)
                for row in chunk:
                    copy.write_row(row)
    elapsed = time.perf_counter() - start
    with engine.begin() as c:
        c.exec_driver_sql("DROP TABLE copy_reference")
    engine.dispose()
    return len(rows) / elapsed


def writer_rate(url: str, records: list[RequestRecord], batch: int) -> tuple[float, float]:
    """Fresh and replay rates of the store writer (the store's tables already made)."""
    engine = create_store_engine(url)
    writer = open_writer(engine)
    fresh = timed(lambda: [writer.write_requests(b) for b in batches(records, batch)])
    replay = timed(lambda: [writer.write_requests(b) for b in batches(records, batch)])
    engine.dispose()
    return len(records) / fresh, len(records) / replay


def load_days(url: str, days: int, rpm: int, end: datetime, seed: int) -> int:
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    writer = open_writer(engine)
    rng = np.random.default_rng(seed)
    total = 0
    per_day = rpm * 1440
    for d in range(days):
        day_start = end - timedelta(days=days - d)
        records = synth(rng, day_start, per_day, 86400.0)
        for chunk in batches(records, 50_000):
            writer.write_requests(chunk)
        total += len(records)
        progress(f"loaded day {d + 1}/{days} ({total:,} requests)")
    engine.dispose()
    return total


def query_times(url: str, window: Window, repeats: int, order: str) -> dict[str, object]:
    """``max(2, repeats // 3)`` rounds, each one exact query (the reference) and three from
    the rollups, in ``order``; each round's speed-up is its exact time over its rollups'
    median."""
    engine = create_store_engine(url)
    qs = (0.5, 0.9, 0.95, 0.99)
    answers: dict[Method, Any] = {}

    def run(method: Method, times: int) -> Callable[[], float]:
        def once() -> float:
            taken = []
            for _ in range(times):
                start = time.perf_counter()
                answers[method] = queries.latency(
                    engine, "ttft", window, quantiles=qs, method=method
                )
                taken.append(time.perf_counter() - start)
            return statistics.median(taken)

        return once

    rounds = max(2, repeats // 3)

    def show(r: int, names: list[str], got: dict[str, float]) -> None:
        exact, rollups = got["exact"] * 1000, got["rollups"] * 1000
        print(
            f"  round {r + 1}/{rounds} [{' '.join(names)}]: exact {exact:.1f} ms, "
            f"rollups {rollups:.1f} ms ({exact / rollups:.1f}×)"
        )

    runs = interleave(
        {"exact": run(Method.EXACT, 1), "rollups": run(Method.SKETCH, 3)},
        rounds,
        order=order,
        on_round=show,
    )
    engine.dispose()
    sketch, exact = answers[Method.SKETCH].groups[0], answers[Method.EXACT].groups[0]
    assert sketch.count == exact.count, (sketch.count, exact.count)
    sketch_q, exact_q = dict(sketch.quantiles), dict(exact.quantiles)
    error = max(abs(sketch_q[q] - exact_q[q]) / exact_q[q] for q in qs)
    speedup = ratio_spread(runs["exact"], runs["rollups"])
    return {
        "requests": exact.count,
        "rollup_ms": statistics.median(runs["rollups"]) * 1000,
        "exact_ms": statistics.median(runs["exact"]) * 1000,
        "speedup": speedup.median,
        "speedup_spread": speedup.as_dict(),
        "rounds": runs,
        "max_relative_error": error,
        "rollup_quantiles": sketch_q,
        "exact_quantiles": exact_q,
    }


#: One round's cases: the reference first in the given order (ABBA reverses it every other
#: round, so the reference runs first and last equally often).
INGEST_CASES = ("copy", "postgres", "sqlite")


def measure_ingest(
    args: argparse.Namespace, records: list[RequestRecord], order: list[str]
) -> dict[str, float]:
    """One round: a fresh PostgreSQL database and SQLite file (their tables made before any
    timing), then the COPY reference and the writers in ``order``."""
    pg_url, drop = fresh_postgres(args.postgres)
    out: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite_url = f"sqlite:///{tmp}/bench.db"
            for url in (pg_url, sqlite_url):
                engine = create_store_engine(url)
                migrate.upgrade(engine)
                engine.dispose()
            for case in order:
                if case == "copy":
                    progress("PostgreSQL raw COPY reference")
                    out["postgres_copy_reference_per_s"] = reference_copy(
                        pg_url, records, args.batch
                    )
                elif case == "postgres":
                    progress("PostgreSQL writer")
                    fresh, replay = writer_rate(pg_url, records, args.batch)
                    out["postgres_writer_per_s"], out["postgres_replay_per_s"] = fresh, replay
                else:
                    progress("SQLite writer")
                    fresh, replay = writer_rate(sqlite_url, records, args.batch)
                    out["sqlite_writer_per_s"], out["sqlite_replay_per_s"] = fresh, replay
    finally:
        drop()
    return {name: out[name] for name in FIGURES}


#: A round's figures, the reference first.
FIGURES = (
    "postgres_copy_reference_per_s",
    "postgres_writer_per_s",
    "postgres_replay_per_s",
    "sqlite_writer_per_s",
    "sqlite_replay_per_s",
)


def round_line(r: int, rounds: int, order: list[str], figures: dict[str, float]) -> str:
    """One round's rates, each writer's against the round's own reference."""
    ref = figures["postgres_copy_reference_per_s"]
    return (
        f"  round {r + 1}/{rounds} [{' '.join(order)}]: COPY {ref:,.0f}/s; PostgreSQL writer "
        f"{figures['postgres_writer_per_s'] / ref:.2f}×, replay "
        f"{figures['postgres_replay_per_s'] / ref:.2f}×; SQLite writer "
        f"{figures['sqlite_writer_per_s'] / ref:.2f}×, replay "
        f"{figures['sqlite_replay_per_s'] / ref:.2f}×"
    )


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--ingest-records", type=int, default=300_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rpm", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=9)
    add_round_arguments(parser, rounds=4)
    parser.add_argument(
        "--keep", action="store_true", help="keep the 30-day database and print its URL"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    results: dict[str, object] = {}
    rng = np.random.default_rng(7)
    now = datetime(2026, 11, 30, 9, 17, 23, tzinfo=UTC)

    print(
        f"== ingest: {args.ingest_records:,} records, batches of {args.batch:,}; {args.rounds} "
        f"rounds, {args.order} order, each writer against its round's COPY reference =="
    )
    progress("generating records")
    records = synth(rng, now - timedelta(hours=1), args.ingest_records, 3600.0)
    # The pre-generated input is long-lived here (a sidecar holds one batch at a time): keep
    # the garbage collector from rescanning it during every timed write.
    gc.collect()
    gc.freeze()
    try:
        rounds = []
        for r, order in enumerate(round_orders(INGEST_CASES, args.rounds, args.order)):
            rounds.append(measure_ingest(args, records, order))
            print(round_line(r, args.rounds, order, rounds[-1]), flush=True)
    finally:
        gc.unfreeze()
    # On a shared host the load changes between one case's seconds and the next's: each
    # round's ratio is taken within the round; the median and the spread of the rounds are
    # reported.
    ingest: dict[str, Any] = {name: statistics.median(r[name] for r in rounds) for name in FIGURES}
    spreads = {
        name: ratio_spread([r[name] for r in rounds], [r[FIGURES[0]] for r in rounds])
        for name in FIGURES
    }
    ratio = {name: s.median for name, s in spreads.items()}
    ingest["rounds"] = rounds
    ingest["ratios"] = ratio
    ingest["ratio_spreads"] = {name: s.as_dict() for name, s in spreads.items()}
    results["ingest"] = ingest
    reference = ingest["postgres_copy_reference_per_s"]
    print(f"  medians of {args.rounds} rounds; ratio: median (min–max) of the rounds' own")

    def line(label: str, name: str, note: str = "") -> None:
        rate = ingest[name]
        print(f"  {label:<40} {rate:>10,.0f} records/s  {spreads[name].text()}{note}")

    print(f"  {'reference: raw binary COPY, plain table':<40} {reference:>10,.0f} records/s")
    line("PostgreSQL writer (dedupe + rollups)", "postgres_writer_per_s", "  target ≥ 0.5×")
    line("PostgreSQL replay (all duplicates)", "postgres_replay_per_s")
    line("SQLite writer (dedupe + rollups)", "sqlite_writer_per_s")
    line("SQLite replay (all duplicates)", "sqlite_replay_per_s")

    print(f"\n== {args.days}-day TTFT quantiles at {args.rpm} requests/minute ==")
    pg_url, drop = fresh_postgres(args.postgres)
    try:
        start = time.perf_counter()
        # The loaded days end on a whole minute; the window does not, so both raw edges count.
        end = now.replace(second=0, microsecond=0)
        total = load_days(pg_url, args.days, args.rpm, end, seed=11)
        load_s = time.perf_counter() - start
        print(f"  loaded {total:,} requests in {load_s:.0f} s ({total / load_s:,.0f}/s)")
        window = Window(end - timedelta(days=args.days, seconds=-17), end + timedelta(seconds=17))
        analyze = create_engine(pg_url)
        with analyze.connect() as c:
            c.exec_driver_sql("ANALYZE")
        analyze.dispose()
        figures = query_times(pg_url, window, args.repeats, args.order)
    finally:
        if args.keep:
            print(f"  kept: {pg_url}")
        else:
            drop()
    results["query"] = {**figures, "load_seconds": load_s, "loaded": total}
    f = figures
    print(f"  reference: exact percentile_cont, raw rows  {f['exact_ms']:>9.1f} ms")
    print(
        f"  from rollups (sketches)                     {f['rollup_ms']:>9.1f} ms (target ≤ 50 ms)"
    )
    speedup = spread(f["speedup_spread"]["rounds"]).text("×", ".1f")  # type: ignore[index]
    print(f"  speed-up, each round's                      {speedup} (target ≥ 20×)")
    print(f"  largest relative error (P50…P99)  {f['max_relative_error']:>19.4%} (target ≤ 1 %)")
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
