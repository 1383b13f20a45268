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
   rollups, and what a fleet of ``--gpus`` GPUs at ``--rps-per-gpu`` requests/s would store in
   ``--days`` days in each.

ClickHouse is chdb (its engine in process; the server's HTTP transport is not measured here).
``--requests-total 10000000`` sets ``--rpm`` for 10 M requests over the days (a long run).
``--quick``: 1 day at 20 requests/min, 20 000 ingest records, 2 rounds (a smoke run).
"""

from __future__ import annotations

import argparse
import shutil
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
from infersight.core.sketch import DEFAULT_RELATIVE_ACCURACY, MIN_VALUE, QuantileSketch
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
    url: str, transport: ChdbTransport, layout: Layout, days: int, rpm: int, end: datetime
) -> tuple[int, float, float]:
    """The same records (seeded per day) into PostgreSQL and ClickHouse: how many, and each
    writer's seconds."""
    engine = create_store_engine(url)
    sql_migrate.upgrade(engine)
    pg_writer = open_writer(engine)
    ch_writer = ClickHouseWriter(transport, layout)
    rng = np.random.default_rng(36)
    total, pg_s, ch_s = 0, 0.0, 0.0
    for d in range(days):
        day_start = end - timedelta(days=days - d)
        records = bench_storage.synth(rng, day_start, rpm * 1440, 86400.0)
        for chunk in bench_storage.batches(records, 50_000):
            pg_s += timed(lambda c=chunk: pg_writer.write_requests(c))  # type: ignore[misc]
            ch_s += timed(lambda c=chunk: ch_writer.write_requests(c))  # type: ignore[misc]
        total += len(records)
        bench_storage.progress(f"loaded day {d + 1}/{days} ({total:,} requests in each)")
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
    return {
        "raw": found.get("requests", 0),
        "rollups": sum(v for k, v in found.items() if k.startswith("request_rollups")),
    }


def postgres_bytes(url: str) -> dict[str, int]:
    engine = create_store_engine(url)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
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
    engine.dispose()
    return {"raw": int(raw), "rollups": int(rollups)}


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
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--rps-per-gpu", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    add_round_arguments(parser, rounds=4)
    args = parser.parse_args(argv)
    if args.quick:
        args.days, args.rpm, args.ingest_records, args.rounds = 1, 20, 20_000, 2
    if args.requests_total:
        args.rpm = max(1, round(args.requests_total / (args.days * 1440)))
    workdir = Path(tempfile.mkdtemp(prefix="bench_clickhouse_"))
    transport = ChdbTransport(str(workdir / "chdb"))
    url, drop = bench_storage.fresh_postgres(args.postgres)
    figures: dict[str, Any] = {}
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
        total, pg_s, ch_s = load_both(url, transport, layout, args.days, args.rpm, end)
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
            name: {k: v / total for k, v in b.items()}
            for name, b in (("clickhouse", ch_bytes), ("postgresql", pg_bytes))
        }
        fleet_requests = args.gpus * args.rps_per_gpu * 86400 * args.days
        figures["bytes"] = {"per_request": per, "fleet_requests": fleet_requests}
        print("3. bytes per request (raw + rollups), reference: PostgreSQL")
        for name in ("postgresql", "clickhouse"):
            raw, rollups = per[name]["raw"], per[name]["rollups"]
            tb = fleet_requests * raw / 1e12
            print(
                f"   {name:10s} raw {raw:6.1f} B, rollups {rollups:6.1f} B;"
                f" {args.gpus:,} GPUs × {args.rps_per_gpu:g} req/s × {args.days} days ="
                f" {fleet_requests / 1e9:,.1f} G requests → raw {tb:,.1f} TB"
            )
        ratio = per["clickhouse"]["raw"] / per["postgresql"]["raw"]
        figures["bytes"]["raw_ratio"] = ratio
        print(f"   ClickHouse's raw rows take {ratio:.2f}× PostgreSQL's bytes")
    finally:
        transport.close()
        drop()
        shutil.rmtree(workdir, ignore_errors=True)
    write_json(args.json, figures)
    return figures


if __name__ == "__main__":
    main()
