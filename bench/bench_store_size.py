"""Store size benchmark (issue 19): a synthetic fleet's rows, bytes and WAL, model vs measured.

Writes a known fleet span (``--hours`` from midnight UTC of a fixed day) through the real
writers (``storage.writer``) into a throwaway PostgreSQL database, as sidecars ship it: each
instance's requests every ``ship_interval_s`` (2 s), its GPU and server samples every
``sample_ship_interval_s`` (10 s); then counts the good tokens of the day as the maintenance
job does. It measures, per table, the rows and ``pg_total_relation_size`` (heap, indexes and
TOAST of every partition) as written and after ``VACUUM FULL``, and the WAL of each phase
(``pg_wal_lsn_diff`` around it), and prints ``core.store_capacity``'s prediction beside each
figure with their ratio. The reference for the request rows' own WAL is a binary COPY of the
same rows into an unpartitioned copy of ``requests`` in the same run.

``--constants`` also prints the constants this run measured, in the form
``core/store_capacity.py`` keeps them. ``--quick`` is a smoke run of a few seconds.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from bench_storage import fresh_postgres
from harness.results import write_json
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from infersight.core import store_capacity
from infersight.core.cost import GoodRequest
from infersight.core.goodput import GoodPolicy
from infersight.core.records import RECORD_FIELDS, RequestRecord
from infersight.core.samples import EngineSample, GpuSample, ServerSample
from infersight.core.sketch import QuantileSketch
from infersight.storage import good_tokens, migrate
from infersight.storage.batch import Batch
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import SKETCH_COLUMNS
from infersight.storage.writer import COPY_TYPES, open_writer, write_binary_rows

#: A fixed, past day: the figures do not depend on when the benchmark runs.
DAY = datetime(2026, 1, 5, tzinfo=UTC)
STAGES = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "prefill_s", "decode_s")
TABLES = (
    "requests",
    "request_rollups",
    "gpu_samples",
    "gpu_rollups",
    "server_samples",
    "server_engine_samples",
    "good_token_counts",
)


def progress(message: str) -> None:
    print(f"  … {message}", file=sys.stderr, flush=True)


def latencies(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Log-normal TTFT and TPOT, exponential queueing (as ``bench_storage``'s records)."""
    ttft = rng.lognormal(np.log(0.09), 0.7, n)
    tpot = rng.lognormal(np.log(0.011), 0.25, n)
    outputs = rng.integers(1, 600, n)
    queue = rng.exponential(0.015, n)
    decode = tpot * (outputs - 1)
    return {
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_s": ttft + decode,
        "queue_s": queue,
        "prefill_s": np.maximum(ttft - queue, 0.0),
        "decode_s": decode,
        "outputs": outputs.astype(np.float64),
    }


def fleet_of(args: argparse.Namespace) -> store_capacity.Fleet:
    return store_capacity.Fleet(
        requests_per_s=args.rate,
        instances=args.instances,
        models_per_instance=args.models,
        tenants=args.tenants,
        priorities=args.priorities,
        stages=len(STAGES),
        gpus_per_instance=args.gpus,
        engines_per_instance=args.engines,
        arrivals=store_capacity.Arrivals.EVEN,
    )


def requests_of(fleet: store_capacity.Fleet, span_s: float, seed: int) -> list[RequestRecord]:
    """Every series' requests evenly spaced over the span (one per slot, jittered in it)."""
    rng = np.random.default_rng(seed)
    per_series = round(fleet.requests_per_s * span_s / fleet.series)
    out: list[RequestRecord] = []
    series = [
        (f"model-{i % 7}-{m}", f"gpu-host-{i:04d}", f"tenant-{t}", f"p{p}")
        for i in range(fleet.instances)
        for m in range(fleet.models_per_instance)
        for t in range(fleet.tenants)
        for p in range(fleet.priorities)
    ]
    slot = span_s / per_series
    for model, instance, tenant, priority in series:
        offsets = (np.arange(per_series) + rng.uniform(0.0, 1.0, per_series)) * slot
        lat = latencies(rng, per_series)
        ids = rng.integers(1, 2**63, size=(per_series, 3))
        inputs = rng.integers(20, 3000, per_series)
        errors = rng.random(per_series) < 0.005
        for i in range(per_series):
            out.append(
                RequestRecord(
                    trace_id=f"{int(ids[i, 0]):016x}{int(ids[i, 1]):016x}",
                    span_id=f"{int(ids[i, 2]):016x}",
                    start=DAY + timedelta(seconds=float(offsets[i])),
                    instance=instance,
                    engine="vllm",
                    model=model,
                    tenant=tenant,
                    priority=priority,
                    **{name: float(lat[name][i]) for name in STAGES},
                    input_tokens=int(inputs[i]),
                    output_tokens=int(lat["outputs"][i]),
                    status="error" if errors[i] else "ok",
                    finish_reason="stop",
                )
            )
    return out


def shipments(items: list[Any], when: Callable[[Any], datetime], every_s: float) -> list[list[Any]]:
    """``items`` grouped as sidecars ship them: per instance, per ``every_s`` of time, in
    time order across the fleet."""
    grouped: dict[tuple[int, str], list[Any]] = defaultdict(list)
    for item in items:
        tick = int((when(item) - DAY).total_seconds() // every_s)
        grouped[(tick, item.instance)].append(item)
    return [grouped[key] for key in sorted(grouped)]


def gpu_samples_of(fleet: store_capacity.Fleet, span_s: float, seed: int) -> list[GpuSample]:
    rng = np.random.default_rng(seed)
    out = []
    steps = int(span_s / fleet.gpu_interval_s)
    for i in range(fleet.instances):
        for g in range(fleet.gpus_per_instance):
            util = rng.uniform(0.0, 1.0, steps)
            for k in range(steps):
                out.append(
                    GpuSample(
                        ts=DAY + timedelta(seconds=k * fleet.gpu_interval_s),
                        instance=f"gpu-host-{i:04d}",
                        gpu_index=g,
                        uuid=f"GPU-{i:04d}-{g}",
                        name="NVIDIA H100 80GB HBM3",
                        util_gpu=float(util[k]),
                        util_memory=float(util[k]) * 0.8,
                        memory_used_bytes=6.0e10,
                        memory_total_bytes=8.5e10,
                        power_w=300.0 + 300.0 * float(util[k]),
                        power_limit_w=700.0,
                        energy_j=1.0e6 + k * 1000.0,
                        temperature_c=60.0,
                        sm_clock_mhz=1980.0,
                        memory_clock_mhz=2619.0,
                    )
                )
    return out


def server_samples_of(fleet: store_capacity.Fleet, span_s: float, seed: int) -> list[ServerSample]:
    rng = np.random.default_rng(seed)
    out = []
    steps = int(span_s / fleet.scrape_interval_s)
    ranks = fleet.engines_per_instance if fleet.engines_per_instance >= 2 else 0
    for i in range(fleet.instances):
        for k in range(steps):
            metrics = {
                "requests_running": float(rng.integers(0, 64)),
                "requests_waiting": float(rng.integers(0, 8)),
                "kv_cache_usage": float(rng.uniform()),
                "prefix_cache_hit_ratio": float(rng.uniform()),
                "preemptions_total": float(k),
                "prompt_tokens_total": 1e6 + k * 1e4,
                "generation_tokens_total": 1e6 + k * 1e4,
                "requests_total": 1e4 + k * 10.0,
                "request_errors_total": float(k // 100),
            }
            out.append(
                ServerSample(
                    ts=DAY + timedelta(seconds=k * fleet.scrape_interval_s),
                    instance=f"gpu-host-{i:04d}",
                    engine="vllm",
                    model=f"model-{i % 7}-0",
                    kv_cache_usage_max=metrics["kv_cache_usage"],
                    per_engine=tuple(EngineSample(rank=str(r), **metrics) for r in range(ranks)),
                    **metrics,
                )
            )
    return out


class Lsn:
    """WAL written between two readings of ``pg_current_wal_lsn``."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.last = self._now()

    def _now(self) -> str:
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            row = connection.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            return str(row[0])

    def since(self) -> int:
        now = self._now()
        with psycopg.connect(self.dsn, autocommit=True) as connection:
            row = connection.execute(
                "SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint", (now, self.last)
            ).fetchone()
        assert row is not None
        self.last = now
        return int(row[0])


def write_fleet(
    engine: Engine, dsn: str, fleet: store_capacity.Fleet, span_s: float, seed: int
) -> dict[str, int]:
    """Write the span as the fleet's sidecars would; the WAL bytes of each phase."""
    writer = open_writer(engine)
    records = requests_of(fleet, span_s, seed)
    gpus = gpu_samples_of(fleet, span_s, seed + 1)
    servers = server_samples_of(fleet, span_s, seed + 2)
    wal = Lsn(dsn)
    for batch in shipments(records, lambda r: r.start, fleet.ship_interval_s):
        writer.write_requests(batch)
    requests_wal = wal.since()
    progress(f"{len(records):,} requests written")
    for batch in shipments(gpus, lambda s: s.ts, fleet.sample_ship_interval_s):
        writer.write_gpu_samples(batch)
    gpu_wal = wal.since()
    for batch in shipments(servers, lambda s: s.ts, fleet.sample_ship_interval_s):
        writer.write_server_samples(batch)
    server_wal = wal.since()
    progress(f"{len(gpus):,} GPU and {len(servers):,} server samples written")
    good_tokens.keep_days(engine, [GoodPolicy.of([], GoodRequest().limits)], [DAY.date()])
    wal.since()
    reference = reference_copy(engine, wal, records)
    return {
        "requests": requests_wal,
        "gpu": gpu_wal,
        "server": server_wal,
        "reference_copy": reference,
    }


def reference_copy(engine: Engine, wal: Lsn, records: list[RequestRecord]) -> int:
    """WAL of the request rows alone: one binary COPY into an unpartitioned copy of
    ``requests`` (its primary key included), in batches of 2000 (a shipment's size)."""
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TABLE requests_reference (LIKE requests INCLUDING ALL)")
    wal.since()
    columns = ", ".join(f'"{name}"' for name in RECORD_FIELDS)
    for i in range(0, len(records), 2000):
        with engine.begin() as connection:
            raw = connection.connection.driver_connection
            assert raw is not None
            with (
                raw.cursor() as cursor,
                cursor.copy(
                    f"COPY requests_reference ({columns}) FROM STDIN (FORMAT BINARY)"
                ) as copy,
            ):
                copy.set_types(COPY_TYPES)
                write_binary_rows(copy, Batch.of(records[i : i + 2000]).rows())
    used = wal.since()
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE requests_reference")
    return used


def _sizes(connection: psycopg.Connection[Any]) -> dict[str, dict[str, int]]:
    out = {}
    for table in TABLES:
        row = connection.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint, "
            "count(*) FILTER (WHERE c.relkind = 'r' AND p.relkind = 'p') "
            "FROM pg_class p JOIN pg_class c ON c.oid = p.oid OR c.oid IN "
            "(SELECT inhrelid FROM pg_inherits WHERE inhparent = p.oid) "
            "WHERE p.oid = %s::regclass",
            (table,),
        ).fetchone()
        count = connection.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        assert count is not None
        out[table] = {"bytes": int(row[0]), "partitions": int(row[1]), "rows": int(count[0])}
    return out


def fixed_bytes(connection: psycopg.Connection[Any]) -> dict[str, int]:
    """Each table's size holding one row: the pages (heap, each index's meta page and root,
    TOAST's index) a partition or table costs before its rows do."""
    out = {}
    for table in TABLES:
        probe = f"probe_{table}"
        connection.execute(f"CREATE TABLE {probe} (LIKE {table} INCLUDING ALL)")
        connection.execute(f"INSERT INTO {probe} SELECT * FROM {table} LIMIT 1")
        row = connection.execute("SELECT pg_total_relation_size(%s::regclass)", (probe,))
        size = row.fetchone()
        assert size is not None
        out[table] = int(size[0])
        connection.execute(f"DROP TABLE {probe}")
    return out


def measure(dsn: str) -> dict[str, Any]:
    """Rows and bytes per table as written (after a plain VACUUM) and compacted."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")
        written = _sizes(connection)
        connection.execute("VACUUM FULL")
        compact = _sizes(connection)
        fixed = fixed_bytes(connection)
        sketch = connection.execute(
            "SELECT resolution, sum(requests)::float8 / count(*), "
            + " + ".join(f"coalesce(sum(octet_length({c})), 0)" for c in SKETCH_COLUMNS)
            + ", count(*) FROM request_rollups GROUP BY resolution"
        ).fetchall()
    return {"written": written, "compact": compact, "fixed": fixed, "sketch_rows": sketch}


def sketch_table(seed: int) -> list[tuple[int, float]]:
    """Mean serialised sketch size by values held, over the benchmark's six stages."""
    rng = np.random.default_rng(seed)
    out = []
    for n, _ in store_capacity.SKETCH_BYTES:
        sizes = []
        for _ in range(5):
            lat = latencies(rng, n)
            sizes += [len(QuantileSketch.of(lat[name]).to_bytes()) for name in STAGES]
        out.append((n, float(np.mean(sizes))))
    return out


def constants(
    measured: dict[str, Any], wal: dict[str, int], load: store_capacity.StoreLoad, seed: int
) -> dict[str, Any]:
    """The constants of ``core.store_capacity`` as this run measured them."""
    compact, fixed = measured["compact"], measured["fixed"]

    def per_row(table: str) -> float:
        t = compact[table]
        return (t["bytes"] - fixed[table] * max(t["partitions"], 1)) / max(t["rows"], 1)

    rows = compact["request_rollups"]["rows"]
    sketch_bytes = sum(int(r[2]) for r in measured["sketch_rows"])
    rollup_base = (
        compact["request_rollups"]["bytes"] - fixed["request_rollups"] - sketch_bytes
    ) / max(rows, 1)
    requests = compact["requests"]["rows"]
    raw_wal = wal["reference_copy"] / max(requests, 1)
    model_rollup_wal = (
        load.wal_by_phase["requests"] - requests * store_capacity.WAL_PER_ROW["requests"]
    )
    measured_rollup_wal = wal["requests"] - wal["reference_copy"]
    factor = store_capacity.WAL_PER_ROLLUP_BYTE * measured_rollup_wal / max(model_rollup_wal, 1)
    gpu_rows = compact["gpu_samples"]["rows"]
    server_rows = compact["server_samples"]["rows"] + compact["server_engine_samples"]["rows"]
    return {
        "ROW_BYTES": {
            t: round(per_row(t), 1)
            for t in (
                "requests",
                "gpu_samples",
                "server_samples",
                "server_engine_samples",
                "gpu_rollups",
                "good_token_counts",
            )
        },
        "FIXED_BYTES": fixed,
        "ROLLUP_ROW_BYTES": round(rollup_base, 1),
        "SKETCH_BYTES": [(n, round(b, 1)) for n, b in sketch_table(seed)],
        "WAL_PER_ROW": {
            "requests": round(raw_wal, 1),
            "gpu_samples": round(wal["gpu"] / max(gpu_rows, 1), 1),
            "server_samples": round(wal["server"] / max(server_rows, 1), 1),
        },
        "WAL_PER_ROLLUP_BYTE": round(factor, 3),
    }


def comparison(load: store_capacity.StoreLoad, measured: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for table in TABLES:
        model = load.table(table)
        compact = measured["compact"][table]
        written = measured["written"][table]
        out[table] = {
            "model_rows": model.rows,
            "rows": compact["rows"],
            "model_bytes": model.bytes,
            "bytes": compact["bytes"],
            "written_bytes": written["bytes"],
            "bytes_ratio": model.bytes / compact["bytes"] if compact["bytes"] else None,
        }
    return out


def report(
    args: argparse.Namespace,
    fleet: store_capacity.Fleet,
    load: store_capacity.StoreLoad,
    tables: dict[str, Any],
    wal: dict[str, int],
) -> None:
    print(
        f"store size: {fleet.requests_per_s:g} req/s over {args.hours:g} h, "
        f"{fleet.instances} instances × {fleet.gpus_per_instance} GPUs, {fleet.series} series, "
        f"shipped every {fleet.ship_interval_s:g} s (samples every "
        f"{fleet.sample_ship_interval_s:g} s)"
    )
    print(
        f"{'table':<22} {'rows model':>11} {'measured':>10} {'MB model':>9} "
        f"{'compact':>9} {'ratio':>6} {'as written':>10}"
    )
    for table, t in tables.items():
        ratio = f"{t['bytes_ratio']:.2f}" if t["bytes_ratio"] is not None else "—"
        print(
            f"{table:<22} {t['model_rows']:>11,.0f} {t['rows']:>10,} "
            f"{t['model_bytes'] / 1e6:>9.2f} {t['bytes'] / 1e6:>9.2f} {ratio:>6} "
            f"{t['written_bytes'] / 1e6:>10.2f}"
        )
    print("WAL (MB)               model   measured  ratio")
    for phase, model in load.wal_by_phase.items():
        print(
            f"  {phase:<18} {model / 1e6:>9.2f} {wal[phase] / 1e6:>9.2f} {model / wal[phase]:>6.2f}"
        )
    print(
        f"  reference: binary COPY of the request rows alone {wal['reference_copy'] / 1e6:.2f} MB "
        f"(writer / COPY {wal['requests'] / max(wal['reference_copy'], 1):.2f}×)"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--postgres",
        default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
        help="an admin URL: a throwaway database is created next to it",
    )
    parser.add_argument("--rate", type=float, default=40.0, help="fleet requests per second")
    parser.add_argument("--hours", type=float, default=1.0, help="span written, from midnight")
    parser.add_argument("--instances", type=int, default=4)
    parser.add_argument("--models", type=int, default=1, help="models per instance")
    parser.add_argument("--tenants", type=int, default=2)
    parser.add_argument("--priorities", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=2, help="GPUs per instance")
    parser.add_argument("--engines", type=int, default=2, help="data-parallel engines")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--constants", action="store_true", help="print measured constants")
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.rate, args.hours, args.instances = 8.0, 20 / 60, 2
    if not 0 < args.hours <= 24:
        parser.error("--hours must be in (0, 24]")
    fleet = fleet_of(args)
    span_s = args.hours * 3600.0
    load = store_capacity.load(fleet, span_s=span_s)
    url, drop = fresh_postgres(args.postgres)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        engine = create_store_engine(url)
        migrate.upgrade(engine)
        wal = write_fleet(engine, dsn, fleet, span_s, args.seed)
        engine.dispose()
        measured = measure(dsn)
    finally:
        if not args.keep:
            drop()
    tables = comparison(load, measured)
    report(args, fleet, load, tables, wal)
    results: dict[str, Any] = {
        "fleet": {"rate": fleet.requests_per_s, "hours": args.hours, "series": fleet.series},
        "tables": tables,
        "wal": {"model": load.wal_by_phase, "measured": wal},
        "partitions": {t: measured["compact"][t]["partitions"] for t in TABLES},
    }
    if args.constants:
        results["constants"] = constants(measured, wal, load, args.seed)
        for name, value in results["constants"].items():
            print(f"{name} = {value}")
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
