"""Server scrapes and GPU samples in ClickHouse (issue #36) against PostgreSQL, in one run.

The same scrapes (``--instances`` instances, each with ``--engines`` data-parallel engines,
scraped every ``--interval`` seconds for ``--hours`` hours) and GPU samples (``--gpus`` per
instance, same interval) are written to PostgreSQL (the store's writer: samples, engines, GPU
rollups) and to ClickHouse (``storage_clickhouse.samples``: chdb, in process), timing each
side's ingest. Then the ``SampleStore`` reads that moved are timed in interleaved rounds
(``harness.interleave``), each against PostgreSQL's answer to the same call in the same round,
and the answers compared:

* ``server_summaries`` and ``server_evidence`` over the whole span;
* ``engine_series`` over the whole span at 5-minute steps;
* ``server_gauges`` of one model over the last 15 minutes;
* ``gpu_series`` (raw) over the last 6 hours at 1-minute steps, and ``gpu_utilisation``.

Usage: ``python bench/bench_clickhouse_samples.py [--quick] [--rounds N] [--json PATH]``;
PostgreSQL from ``INFERSIGHT_TEST_POSTGRES_URL`` (a database of its own is created and dropped).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from harness.interleave import add_round_arguments, interleave, ratio_spread, spread
from harness.results import write_json
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from infersight.core.samples import EngineSample, GpuSample, ServerSample, combine_engines
from infersight.core.window import Window
from infersight.storage import migrate as sql_migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.samples import SampleWriter
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport

ADMIN_URL = os.environ.get(
    "INFERSIGHT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
BATCH = 2_000


def _scrapes(
    rng: np.random.Generator, start: datetime, args: argparse.Namespace
) -> tuple[list[ServerSample], list[GpuSample]]:
    steps = int(args.hours * 3600 // args.interval)
    servers: list[ServerSample] = []
    gpus: list[GpuSample] = []
    for i in range(args.instances):
        instance = f"node-{i:03d}"
        model = f"model-{i % 4}"
        for k in range(steps):
            at = start + timedelta(seconds=k * args.interval + float(rng.uniform(0, 1)))
            engines = tuple(
                EngineSample(
                    str(r),
                    requests_running=float(rng.integers(0, 30)),
                    requests_waiting=float(rng.integers(0, 9)),
                    kv_cache_usage=float(rng.uniform(0, 1)),
                    prefix_cache_hit_ratio=float(rng.uniform(0, 1)),
                )
                for r in range(args.engines)
            )
            whole: dict[str, float | None] = {
                "requests_running": float(rng.integers(0, 60)),
                "requests_waiting": float(rng.integers(0, 20)),
                "kv_cache_usage": float(rng.uniform(0, 1)),
                "prefix_cache_hit_ratio": float(rng.uniform(0, 1)),
            }
            per_engine = engines if args.engines > 1 else ()
            servers.append(
                ServerSample(
                    ts=at,
                    instance=instance,
                    engine="vllm",
                    model=model,
                    per_engine=per_engine,
                    **combine_engines(per_engine, whole),
                )
            )
            for g in range(args.gpus):
                gpus.append(
                    GpuSample(
                        ts=at,
                        instance=instance,
                        gpu_index=g,
                        name="NVIDIA H100 80GB HBM3",
                        util_gpu=float(rng.uniform(0, 1)),
                        memory_used_bytes=float(rng.integers(1, 80)) * 2**30,
                        memory_total_bytes=80.0 * 2**30,
                        power_w=float(rng.uniform(60, 700)),
                        power_limit_w=700.0,
                        energy_j=float(k * 1000),
                        temperature_c=float(rng.uniform(30, 85)),
                        sm_clock_mhz=float(rng.uniform(800, 1980)),
                    )
                )
    return servers, gpus


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _close(a: Any, b: Any) -> bool:
    """Answers equal, floats to 1e-9 relative (sums in another order)."""
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(
            _close(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return (
            isinstance(b, list | tuple)
            and len(a) == len(b)
            and all(_close(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) and isinstance(b, float | int):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--instances", type=int, default=32)
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--quick", action="store_true", help="8 instances, 6 hours, 2 rounds")
    parser.add_argument("--json", type=Path, default=None)
    add_round_arguments(parser, rounds=5)
    args = parser.parse_args()
    if args.quick:
        args.instances, args.hours, args.rounds = 8, 6.0, 2

    end = datetime.now(UTC).replace(second=0, microsecond=0)
    start = end - timedelta(hours=args.hours)
    servers, gpus = _scrapes(np.random.default_rng(36), start, args)
    print(
        f"{len(servers)} scrapes ({len(servers) * args.engines if args.engines > 1 else 0}"
        f" engine rows), {len(gpus)} GPU samples, {args.hours:g} h"
    )

    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"bench_samples_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    chdb_dir = tempfile.mkdtemp(prefix="bench-samples-chdb-")
    figures: dict[str, Any] = {"scrapes": len(servers), "gpu_samples": len(gpus)}
    try:
        url = make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        engine = create_store_engine(url)
        sql_migrate.upgrade(engine)
        sql = SqlStore(engine)
        transport = ChdbTransport(chdb_dir)
        layout = Layout(database="bench")
        migrate(transport, layout)
        telemetry = Telemetry(transport, layout)
        hybrid = HybridStore(sql, telemetry, sql_copy=True)
        ch_writer = SampleWriter(transport, layout)
        pg_writer = open_writer(engine)

        def write(w: Any, kind: str, rows: list[Any]) -> float:
            method = getattr(w, f"write_{kind}_samples")
            return sum(
                _timed(lambda b=rows[i : i + BATCH]: method(b)) for i in range(0, len(rows), BATCH)
            )

        for kind, rows in (("server", servers), ("gpu", gpus)):
            pg_s = write(pg_writer, kind, rows)
            ch_s = write(ch_writer, kind, rows)
            figures[f"ingest_{kind}"] = {
                "postgres_per_s": len(rows) / pg_s,
                "clickhouse_per_s": len(rows) / ch_s,
                "ratio": (len(rows) / ch_s) / (len(rows) / pg_s),
            }
            print(
                f"ingest {kind:6s}: PostgreSQL {len(rows) / pg_s:9.0f}/s,"
                f" ClickHouse {len(rows) / ch_s:9.0f}/s ({pg_s / ch_s:.2f}x the rate)"
            )

        whole = Window(start, end + timedelta(seconds=1))
        last15 = Window(end - timedelta(minutes=15), end)
        last6h = Window(end - timedelta(hours=6), end)
        nodes = [f"node-{i:03d}" for i in range(args.instances)]
        reads: dict[str, Callable[[Any], Any]] = {
            "server_summaries": lambda s: s.server_summaries(whole),
            "server_evidence": lambda s: s.server_evidence(whole),
            "engine_series 5 min": lambda s: s.engine_series(whole, 300),
            "server_gauges 15 min": lambda s: s.server_gauges("model-1", last15),
            "gpu_series 6 h raw": lambda s: s.gpu_series(last6h, 60, raw_only=True),
            "gpu_utilisation 6 h": lambda s: s.gpu_utilisation(nodes, last6h),
        }
        ch_samples, pg_samples = hybrid.samples, sql.samples
        for label, read in reads.items():
            assert _close(read(ch_samples), read(pg_samples)), f"{label}: answers differ"
            cases = {
                "postgres": lambda r=read: _timed(lambda: r(pg_samples)),
                "clickhouse": lambda r=read: _timed(lambda: r(ch_samples)),
            }
            got = interleave(cases, args.rounds, order=args.order)
            ratio = ratio_spread(got["clickhouse"], got["postgres"])
            pg, ch = spread(got["postgres"]), spread(got["clickhouse"])
            figures[label] = {
                "postgres_ms": pg.median * 1e3,
                "clickhouse_ms": ch.median * 1e3,
                "ratio": ratio.median,
                "ratio_range": [min(ratio.values), max(ratio.values)],
            }
            print(
                f"{label:22s}: PostgreSQL {pg.median * 1e3:8.1f} ms, ClickHouse"
                f" {ch.median * 1e3:8.1f} ms, {ratio.median:.2f}x the time"
                f" ({min(ratio.values):.2f}-{max(ratio.values):.2f}); answers equal"
            )
        transport.close()
        engine.dispose()
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        shutil.rmtree(chdb_dir, ignore_errors=True)
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
