"""Telemetry in ClickHouse (issue #36, first slice): ingest, a 30-day P99, bytes per request.

Prints, in one run on this machine, each figure against a reference measured in the same run
(interleaved rounds, ``harness.interleave``: the median ratio and its spread):

1. **Ingest**: ``storage_clickhouse.writer`` (stored keys looked up, the rows with their
   sketch bucket keys inserted under a dedup token, the minute rollups by the materialized
   view), and ``WriterRollups`` (the writer before schema step 4: the minute rollups computed
   by the writer and inserted beside the rows), each against a bare ``INSERT``
   of the same rows in the same format (``JSONCompactEachRow``, serialisation included) into a
   plain ``MergeTree`` copy of ``requests``, ``--ingest-records`` requests in ``--batch``
   batches; and a replay of the same batches (every key a duplicate: nothing stored).
2. **A P99 over ``--days`` days** (default 30) of ``--rpm`` requests a minute, the same
   records in PostgreSQL (the store's writer) and in ClickHouse (this writer): the TTFT P99 by
   sketch (raw edges, minute, hour and day rollups) and exactly (every row) from each, timed in
   interleaved rounds, with the answers compared (sketch: equal; exact: equal to 1e-12).
   PostgreSQL's sketch reads go through its sketch cache, as the service's do: timed warm (the
   rollup rows' digests read, nothing decoded) and cold (the cache emptied before each call:
   the same decoding and merging ClickHouse's read does), both in the interleaved rounds.
3. **Bytes per request**: ClickHouse's compressed parts (after ``OPTIMIZE … FINAL``) against
   PostgreSQL's relations (``pg_total_relation_size`` after ``VACUUM FULL``), raw rows and
   rollups (per request and per rollup row).

ClickHouse is chdb (its engine in process; the server's HTTP transport is not measured here).
``--requests-total 10000000`` sets ``--rpm`` for 10 M requests over the days (a long run).
Loading uses ``--load-batch`` (200 000) batches, a progress line a day (with the load average).
4. **A fleet**: what ``--gpus`` GPUs at ``--rps-per-gpu`` requests/s keep over ``--fleet-days``
   days, from ``core.store_capacity``'s model (docs/capacity.md), in each store.
``--quick``: 1 day at 20 requests/min, 20 000 ingest records, 2 rounds (a smoke run).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import bench_storage
import numpy as np
from harness.interleave import add_round_arguments, interleave, ratio_spread, spread
from harness.results import write_json
from sqlalchemy import text

from infersight.core.errors import InvalidInput
from infersight.core.query import Method
from infersight.core.records import (
    DURATION_FIELDS,
    GROUP_LABELS,
    RECORD_FIELDS,
    RequestRecord,
    Status,
)
from infersight.core.retention import RetentionPolicy
from infersight.core.sketch import DEFAULT_RELATIVE_ACCURACY, MIN_VALUE, QuantileSketch
from infersight.core.store_capacity import Fleet
from infersight.core.store_capacity import load as capacity_load
from infersight.core.window import Window
from infersight.storage import migrate as sql_migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.sketch_cache import sketch_cache
from infersight.storage.sql_store import SqlStore
from infersight.storage.writer import open_writer
from infersight.storage_clickhouse.reads import Reads
from infersight.storage_clickhouse.schema import METRICS, STEPS, Layout, migrate, rollup_columns
from infersight.storage_clickhouse.transport import ChdbTransport
from infersight.storage_clickhouse.writer import (
    ClickHouseWriter,
    _token,
    micros,
    payload,
    raw_rows,
)

QS = (0.5, 0.99)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fresh_layout(transport: ChdbTransport, prefix: str, minute_view: bool = True) -> Layout:
    """A migrated database; without ``minute_view``, step 4 leaves its materialized view out
    (its columns are added: the writer's lookups read them) for ``WriterRollups``."""
    # PostgreSQL's side runs no retention here: neither may ClickHouse's TTLs (10 years).
    keep = 3650
    layout = Layout(
        database=f"{prefix}_{uuid.uuid4().hex[:8]}",
        raw_days=keep,
        minute_days=keep,
        hour_days=keep,
        day_days=keep,
    )
    if minute_view:
        migrate(transport, layout)
    else:
        migrate(transport, layout, [s for s in STEPS if s.version != 4])
        (step,) = [s for s in STEPS if s.version == 4]
        for statement in step.statements(layout):
            if "MATERIALIZED VIEW" not in statement:
                transport.command(statement)
    return layout


# -- 1. ingest ------------------------------------------------------------------------------

_KEY_OFFSET = 1 << 20
_KEY_SPAN = 1 << 21


def writer_rollup_rows(records: Sequence[RequestRecord]) -> list[list[Any]]:
    """The writer's own minute rollups (before schema step 4; kept here to measure against the
    materialized view): the minute rollup rows of ``records``, in ``schema.rollup_columns``
    order: per series and minute the counts, and per latency metric its sketch's buckets (keys from
    ``QuantileSketch.keys_for``: PostgreSQL's rollups hold the same), zero count, sum, min and
    max."""
    index: dict[tuple[Any, ...], int] = {}
    ids = np.fromiter(
        (
            index.setdefault(
                (*(getattr(r, n) for n in GROUP_LABELS), micros(r.start) // 60_000_000),
                len(index),
            )
            for r in records
        ),
        dtype=np.int64,
        count=len(records),
    )
    n = len(index)
    errors = np.bincount(
        ids, weights=[r.status is Status.ERROR for r in records], minlength=n
    ).astype(np.int64)
    counts = np.bincount(ids, minlength=n)
    tokens = {
        name: np.bincount(
            ids, weights=[getattr(r, name) or 0 for r in records], minlength=n
        ).astype(np.int64)
        for name in ("input_tokens", "output_tokens", "cached_tokens")
    }
    template = QuantileSketch(DEFAULT_RELATIVE_ACCURACY)
    metric_columns: list[list[Any]] = []
    for field in DURATION_FIELDS:
        values = np.fromiter(
            (np.nan if (v := getattr(r, field)) is None else v for r in records),
            dtype=np.float64,
            count=len(records),
        )
        present = ~np.isnan(values)
        gids, vals = ids[present], values[present]
        positive = vals >= MIN_VALUE
        zero = np.bincount(gids[~positive], minlength=n)
        total = np.bincount(gids, weights=vals, minlength=n)
        low = np.full(n, np.inf)
        high = np.full(n, -np.inf)
        np.minimum.at(low, gids, vals)
        np.maximum.at(high, gids, vals)
        buckets: list[dict[str, int]] = [{} for _ in range(n)]
        if positive.any():
            keys = template.keys_for(vals[positive])
            if keys.min() <= -_KEY_OFFSET or keys.max() >= _KEY_OFFSET:
                raise InvalidInput(f"{field} holds a value outside the sketch's range")
            packed = gids[positive] * _KEY_SPAN + (keys + _KEY_OFFSET)
            pairs, amounts = np.unique(packed, return_counts=True)
            for pair, amount in zip(pairs.tolist(), amounts.tolist(), strict=True):
                group, key = divmod(pair, _KEY_SPAN)
                buckets[group][str(key - _KEY_OFFSET)] = amount
        held = np.bincount(gids, minlength=n) > 0
        metric_columns.append(
            [
                [
                    buckets[g],
                    int(zero[g]),
                    float(total[g]),
                    float(low[g]) if held[g] else None,
                    float(high[g]) if held[g] else None,
                ]
                for g in range(n)
            ]
        )
    rows = []
    for (*labels, minute), g in index.items():
        row: list[Any] = [f"{datetime.fromtimestamp(minute * 60, UTC):%Y-%m-%d %H:%M:%S}"]
        row += labels
        row += [int(counts[g]), int(errors[g])]
        row += [int(tokens[name][g]) for name in ("input_tokens", "output_tokens", "cached_tokens")]
        for column in metric_columns:
            row += column[g]
        rows.append(row)
    return rows


_ROLLUP_NAMES = tuple(name for name, _ in rollup_columns())
assert len(rollup_columns()) == 1 + len(GROUP_LABELS) + 5 + 5 * len(METRICS)


class WriterRollups(ClickHouseWriter):
    """The writer as it was before schema step 4: the minute rollups computed here (numpy)
    and inserted, then the rows, each under its own token (into a database without the minute
    materialized view)."""

    def _store_chunk(self, day: Any, records: Any) -> int:
        stored = self._stored_keys(records)
        fresh = [r for r in records if (micros(r.start), r.trace_id, r.span_id) not in stored]
        if not fresh:
            return 0
        token = _token(fresh)
        self.transport.insert(
            self.layout.table("request_rollups_1m"),
            _ROLLUP_NAMES,
            payload(writer_rollup_rows(fresh)),
            self._settings("r" + token),
        )
        self.transport.insert(
            self.layout.table("requests"),
            RECORD_FIELDS,
            payload(raw_rows(fresh)),
            self._settings(token),
        )
        return len(fresh)


def measure_ingest(
    transport: ChdbTransport, records: list[RequestRecord], batch: int, rounds: int, order: str
) -> dict[str, Any]:
    chunks = [records[i : i + batch] for i in range(0, len(records), batch)]

    def writer() -> float:
        layout = fresh_layout(transport, "ingest")
        sink = ClickHouseWriter(transport, layout)
        elapsed = timed(lambda: [sink.write_requests(c) for c in chunks])
        replay = timed(lambda: [sink.write_requests(c) for c in chunks])
        replays.append(len(records) / replay)
        transport.command(f"DROP DATABASE {layout.database}")
        return len(records) / elapsed

    def writer_rollups() -> float:
        layout = fresh_layout(transport, "rollups", minute_view=False)
        sink = WriterRollups(transport, layout)
        elapsed = timed(lambda: [sink.write_requests(c) for c in chunks])
        transport.command(f"DROP DATABASE {layout.database}")
        return len(records) / elapsed

    def bare() -> float:
        layout = fresh_layout(transport, "bare")
        table = f"{layout.database}.bare"
        transport.command(
            f"CREATE TABLE {table} AS {layout.table('requests')} ENGINE = MergeTree"
            " PARTITION BY toDate(start) ORDER BY (model, instance, start)"
        )

        def run() -> None:
            for chunk in chunks:
                transport.insert(table, RECORD_FIELDS, payload(raw_rows(chunk)), {})

        elapsed = timed(run)
        transport.command(f"DROP DATABASE {layout.database}")
        return len(records) / elapsed

    replays: list[float] = []

    def line(r: int, names: list[str], figures: dict[str, float]) -> None:
        print(
            f"  round {r + 1}/{rounds} ({' → '.join(names)}): writer (minute rollups by the"
            f" view) {figures['writer']:,.0f}/s, writer computing the rollups"
            f" {figures['writer_rollups']:,.0f}/s, bare INSERT {figures['bare']:,.0f}/s,"
            f" ratios {figures['writer'] / figures['bare']:.2f}×,"
            f" {figures['writer_rollups'] / figures['bare']:.2f}×"
        )

    runs = interleave(
        {"bare": bare, "writer": writer, "writer_rollups": writer_rollups},
        rounds,
        order=order,
        on_round=line,
    )
    ratio = ratio_spread(runs["writer"], runs["bare"])
    by_writer = ratio_spread(runs["writer_rollups"], runs["bare"])
    return {
        "records": len(records),
        "batch": batch,
        "writer_per_s": spread(runs["writer"]).as_dict(),
        "writer_rollups_per_s": spread(runs["writer_rollups"]).as_dict(),
        "bare_insert_per_s": spread(runs["bare"]).as_dict(),
        "writer_vs_bare": ratio.as_dict(),
        "writer_rollups_vs_bare": by_writer.as_dict(),
        "view_vs_writer_rollups": ratio_spread(runs["writer"], runs["writer_rollups"]).as_dict(),
        "replay_per_s": spread(replays).as_dict(),
        "text": ratio.text("×"),
        "writer_rollups_text": by_writer.text("×"),
        "view_vs_writer_rollups_text": ratio_spread(runs["writer"], runs["writer_rollups"]).text(
            "×"
        ),
    }


# -- 2. the long window's P99 -----------------------------------------------------------------


def load_both(
    url: str,
    transport: ChdbTransport,
    layout: Layout,
    days: int,
    rpm: int,
    end: datetime,
    batch: int,
) -> tuple[int, float, float]:
    """The same records (generated a day at a time from one seed) into PostgreSQL and
    ClickHouse, each through infersight's own writer (``storage.writer``'s binary ``COPY``
    with its rollups; ``storage_clickhouse.writer`` with the materialized view) in ``batch``
    batches: how many, and each writer's seconds."""
    engine = create_store_engine(url)
    sql_migrate.upgrade(engine)
    pg_writer = open_writer(engine)
    ch_writer = ClickHouseWriter(transport, layout)
    rng = np.random.default_rng(36)
    total, pg_s, ch_s = 0, 0.0, 0.0
    began = time.perf_counter()
    for d in range(days):
        day_start = end - timedelta(days=days - d)
        records = bench_storage.synth(rng, day_start, rpm * 1440, 86400.0)
        for chunk in bench_storage.batches(records, batch):
            pg_s += timed(lambda c=chunk: pg_writer.write_requests(c))  # type: ignore[misc]
            ch_s += timed(lambda c=chunk: ch_writer.write_requests(c))  # type: ignore[misc]
        total += len(records)
        del records
        bench_storage.progress(
            f"loaded day {d + 1}/{days} ({total:,} requests in each;"
            f" PostgreSQL {total / pg_s:,.0f}/s, ClickHouse {total / ch_s:,.0f}/s,"
            f" {time.perf_counter() - began:,.0f} s so far; load {_loadavg()})"
        )
    engine.dispose()
    return total, pg_s, ch_s


def measure_query(
    url: str, transport: ChdbTransport, layout: Layout, window: Window, rounds: int, order: str
) -> dict[str, Any]:
    engine = create_store_engine(url)
    pg = SqlStore(engine).long_running()
    ch = Reads(transport, layout)
    answers: dict[str, Any] = {}

    def case(
        name: str, fn: Callable[[], Any], before: Callable[[], None] | None = None
    ) -> Callable[[], float]:
        def run() -> float:
            if before is not None:
                before()  # not timed
            start = time.perf_counter()
            answers[name] = fn()
            return time.perf_counter() - start

        return run

    def pg_sketch() -> Any:
        return pg.requests.latency("ttft", window, quantiles=QS, method=Method.SKETCH)

    # The first call also connects and builds the statements: timed on its own, not compared.
    first_pg_sketch = case("pg_sketch", pg_sketch)()
    cache = sketch_cache(pg.engine)
    cases = {
        "pg_sketch": case("pg_sketch", pg_sketch),
        "pg_sketch_cold": case("pg_sketch_cold", pg_sketch, before=cache.clear),
        "ch_sketch": case(
            "ch_sketch", lambda: ch.latency("ttft", window, quantiles=QS, method=Method.SKETCH)
        ),
        "pg_exact": case(
            "pg_exact",
            lambda: pg.requests.latency("ttft", window, quantiles=QS, method=Method.EXACT),
        ),
        "ch_exact": case(
            "ch_exact", lambda: ch.latency("ttft", window, quantiles=QS, method=Method.EXACT)
        ),
    }

    def line(r: int, names: list[str], figures: dict[str, float]) -> None:
        print(
            f"  round {r + 1}/{rounds}: sketch P99 PostgreSQL {figures['pg_sketch'] * 1e3:,.1f} ms"
            f" (cold {figures['pg_sketch_cold'] * 1e3:,.1f} ms),"
            f" ClickHouse {figures['ch_sketch'] * 1e3:,.1f} ms; exact P99 PostgreSQL"
            f" {figures['pg_exact'] * 1e3:,.0f} ms, ClickHouse {figures['ch_exact'] * 1e3:,.0f} ms"
        )

    runs = interleave(cases, rounds, order=order, on_round=line)
    engine.dispose()
    sketch_equal = (
        answers["pg_sketch"].groups
        == answers["pg_sketch_cold"].groups
        == answers["ch_sketch"].groups
    )
    if not sketch_equal:
        print(f"   sketch answers differ: {answers['pg_sketch']} vs {answers['ch_sketch']}")
    pg_exact, ch_exact = answers["pg_exact"].groups[0], answers["ch_exact"].groups[0]
    exact_equal = pg_exact.count == ch_exact.count and all(
        abs(pg_exact.quantiles[q] - ch_exact.quantiles[q]) <= 1e-12 * abs(pg_exact.quantiles[q])
        for q in QS
    )
    return {
        "requests": pg_exact.count,
        "p99_sketch": answers["ch_sketch"].groups[0].quantiles[0.99],
        "p99_exact": ch_exact.quantiles[0.99],
        "sketch_answers_equal": sketch_equal,
        "exact_answers_equal": exact_equal,
        "pg_sketch_first_s": first_pg_sketch,
        "seconds": {name: spread(values).as_dict() for name, values in runs.items()},
        "ch_vs_pg_sketch": ratio_spread(runs["ch_sketch"], runs["pg_sketch"]).as_dict(),
        "ch_vs_pg_sketch_cold": ratio_spread(runs["ch_sketch"], runs["pg_sketch_cold"]).as_dict(),
        "ch_vs_pg_exact": ratio_spread(runs["ch_exact"], runs["pg_exact"]).as_dict(),
        "texts": {
            "sketch": ratio_spread(runs["ch_sketch"], runs["pg_sketch"]).text("×"),
            "sketch_cold": ratio_spread(runs["ch_sketch"], runs["pg_sketch_cold"]).text("×"),
            "exact": ratio_spread(runs["ch_exact"], runs["pg_exact"]).text("×"),
        },
    }


def _loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def uptime() -> str:
    """``uptime``'s line (the machine is shared: its load beside the figures)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"load average {_loadavg()}"


# -- 3. bytes ---------------------------------------------------------------------------------


def clickhouse_bytes(transport: ChdbTransport, layout: Layout) -> dict[str, int]:
    tables = ["requests", "request_rollups_1m", "request_rollups_1h", "request_rollups_1d"]
    for table in tables:
        transport.command(f"OPTIMIZE TABLE {layout.table(table)} FINAL")
    rows = transport.rows(
        "SELECT table, sum(data_compressed_bytes) FROM system.parts WHERE active"
        f" AND database = '{layout.database}' GROUP BY table"
    )
    found = {name: int(size) for name, size in rows}
    rollup_rows = sum(
        int(transport.rows(f"SELECT count() FROM {layout.table(table)} FINAL")[0][0])
        for table in tables[1:]
    )
    return {
        "raw": found.get("requests", 0),
        "rollups": sum(v for k, v in found.items() if k.startswith("request_rollups")),
        "rollup_rows": rollup_rows,
    }


def postgres_bytes(url: str) -> dict[str, int]:
    engine = create_store_engine(url)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        # The store's engine bounds statements; rewriting 10 M rows takes longer on a busy host.
        connection.execute(text("SET statement_timeout = 0"))
        connection.execute(text("VACUUM FULL"))
        raw = connection.execute(
            text(
                "SELECT coalesce(sum(pg_total_relation_size(relid)), 0)"
                " FROM pg_partition_tree('requests')"
            )
        ).scalar_one()
        rollups = connection.execute(
            text("SELECT pg_total_relation_size('request_rollups')")
        ).scalar_one()
        rollup_rows = connection.execute(text("SELECT count(*) FROM request_rollups")).scalar_one()
    engine.dispose()
    return {"raw": int(raw), "rollups": int(rollups), "rollup_rows": int(rollup_rows)}


def fleet_sizes(
    gpus: int, rps_per_gpu: float, days: int, per: dict[str, dict[str, float]]
) -> dict[str, Any]:
    """What ``gpus`` GPUs at ``rps_per_gpu`` requests/s write in ``days`` days, from
    ``core.store_capacity``'s model (docs/capacity.md: 8 GPUs an instance, 4 tenants × 2
    priorities, Poisson arrivals; raw rows and every rollup resolution kept the ``days``).

    PostgreSQL: the model's bytes. ClickHouse: the model's request rows times the raw bytes
    per request measured here, and the model's rollup rows times the bytes per rollup row
    measured here (a rollup row's size follows its sketches' fill, which differs between this
    run's series and the fleet's, so that part is the rougher)."""
    fleet = Fleet(
        requests_per_s=gpus * rps_per_gpu, instances=max(1, gpus // 8), tenants=4, priorities=2
    )
    keep = RetentionPolicy(raw_days=days - 1, minute_days=days, hour_days=days, day_days=days)
    model = capacity_load(fleet, keep)
    requests, rollups = model.table("requests"), model.table("request_rollups")
    ch = per["clickhouse"]
    return {
        "requests": requests.kept_rows,
        "rollup_rows": rollups.kept_rows,
        "postgresql": {"raw": requests.kept_bytes, "rollups": rollups.kept_bytes},
        "clickhouse": {
            "raw": requests.kept_rows * ch["raw"],
            "rollups": rollups.kept_rows * ch["rollup_row"],
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--rpm", type=int, default=20, help="requests a minute (default 20)")
    parser.add_argument("--requests-total", type=int, default=0, help="sets --rpm for this many")
    parser.add_argument("--ingest-records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument(
        "--load-batch", type=int, default=200_000, help="batch of the long window's load"
    )
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--rps-per-gpu", type=float, default=10.0)
    parser.add_argument("--fleet-days", type=int, default=30, help="days the fleet keeps")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    add_round_arguments(parser, rounds=4)
    args = parser.parse_args(argv)
    if args.quick:
        args.days, args.rpm, args.ingest_records, args.rounds = 1, 20, 20_000, 2
    if args.requests_total:
        args.rpm = max(1, math.ceil(args.requests_total / (args.days * 1440)))
    workdir = Path(tempfile.mkdtemp(prefix="bench_clickhouse_"))
    transport = ChdbTransport(str(workdir / "chdb"))
    url, drop = bench_storage.fresh_postgres(args.postgres)
    figures: dict[str, Any] = {"load_before": uptime()}
    print(f"machine: {figures['load_before']}")
    try:
        print(f"1. ingest: {args.ingest_records:,} requests in batches of {args.batch:,}")
        rng = np.random.default_rng(7)
        records = bench_storage.synth(
            rng, datetime.now(UTC) - timedelta(hours=6), args.ingest_records, 5 * 3600.0
        )
        figures["ingest"] = ingest = measure_ingest(
            transport, records, args.batch, args.rounds, args.order
        )
        print(
            f"   reference: bare INSERT of the same rows (JSONCompactEachRow) "
            f"{ingest['bare_insert_per_s']['median']:,.0f}/s; writer (minute rollups by the"
            f" materialized view) {ingest['text']} of it; writer computing the rollups itself"
            f" {ingest['writer_rollups_text']} of it; view / writer-computed"
            f" {ingest['view_vs_writer_rollups_text']};"
            f" replay (all duplicates) {ingest['replay_per_s']['median']:,.0f}/s"
        )

        end = datetime.now(UTC).replace(second=0, microsecond=0)
        print(f"2. {args.days}-day P99: {args.rpm} requests/min into PostgreSQL and ClickHouse")
        layout = fresh_layout(transport, "days")
        total, pg_s, ch_s = load_both(
            url, transport, layout, args.days, args.rpm, end, args.load_batch
        )
        print(
            f"   loaded {total:,} requests: PostgreSQL's writer {total / pg_s:,.0f}/s,"
            f" ClickHouse's {total / ch_s:,.0f}/s (reference: PostgreSQL, same batches)"
        )
        window = Window(end - timedelta(days=args.days) + timedelta(seconds=17), end)
        figures["query"] = query = measure_query(
            url, transport, layout, window, args.rounds, args.order
        )
        figures["query"]["load"] = {
            "requests": total,
            "pg_per_s": total / pg_s,
            "ch_per_s": total / ch_s,
        }
        print(
            f"   reference: PostgreSQL on the same data. P99 sketch: ClickHouse"
            f" {query['texts']['sketch']} of PostgreSQL's time with its sketch cache warm,"
            f" {query['texts']['sketch_cold']} of it cold (PostgreSQL's very first call,"
            f" connecting too: {query['pg_sketch_first_s'] * 1e3:,.0f} ms);"
            f" exact: {query['texts']['exact']};"
            f" answers equal: sketch {query['sketch_answers_equal']},"
            f" exact {query['exact_answers_equal']} ({query['requests']:,} requests)"
        )

        ch_bytes = clickhouse_bytes(transport, layout)
        pg_bytes = postgres_bytes(url)
        per = {
            name: {
                "raw": b["raw"] / total,
                "rollups": b["rollups"] / total,
                "rollup_row": b["rollups"] / max(1, b["rollup_rows"]),
                "rollup_rows": b["rollup_rows"],
            }
            for name, b in (("clickhouse", ch_bytes), ("postgresql", pg_bytes))
        }
        fleet = fleet_sizes(args.gpus, args.rps_per_gpu, args.fleet_days, per)
        figures["bytes"] = {"per_request": per, "fleet": fleet}
        print(f"3. bytes per request over {total:,} requests, reference: PostgreSQL (VACUUM FULL)")
        for name in ("postgresql", "clickhouse"):
            p = per[name]
            print(
                f"   {name:10s} raw {p['raw']:6.1f} B/request, rollups {p['rollups']:6.1f}"
                f" B/request ({p['rollup_rows']:,.0f} rollup rows, {p['rollup_row']:,.0f} B each)"
            )
        ratio = per["clickhouse"]["raw"] / per["postgresql"]["raw"]
        figures["bytes"]["raw_ratio"] = ratio
        print(f"   ClickHouse's raw rows take {ratio:.2f}× PostgreSQL's bytes")
        print(
            f"4. {args.gpus:,} GPUs × {args.rps_per_gpu:g} req/s for {args.fleet_days} days"
            f" (core.store_capacity's model: {fleet['requests'] / 1e9:,.1f} G requests,"
            f" {fleet['rollup_rows'] / 1e6:,.1f} M rollup rows at 1m/1h/1d,"
            f" kept {args.fleet_days} days)"
        )
        for name in ("postgresql", "clickhouse"):
            f = fleet[name]
            print(
                f"   {name:10s} raw {f['raw'] / 1e12:,.2f} TB"
                f" + rollups {f['rollups'] / 1e9:,.1f} GB"
                f" = {(f['raw'] + f['rollups']) / 1e12:,.2f} TB (one copy, before replicas)"
            )
        print(
            "   (PostgreSQL: the model's bytes; ClickHouse: the model's rows × the bytes per"
            " request and per rollup row measured above)"
        )
        figures["load_after"] = uptime()
        print(f"machine: {figures['load_after']}")
    finally:
        transport.close()
        drop()
        shutil.rmtree(workdir, ignore_errors=True)
    write_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
