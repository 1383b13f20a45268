"""What attribution from the trace costs the store writer (issue 34).

Four cases write the same shape of requests (``--batches`` batches of ``--batch`` records,
each case at times of its own, so that none meets another's rows) through the store writer:

* ``bare``: the writer with the join switched off (its look-ups skipped): the reference, what
  the writer cost before attribution;
* ``unused``: the writer as shipped, no gateway or client span stored anywhere near: what a
  fleet that does not use attribution pays (one look-up per batch, before and after it);
* ``labelled``: the writer without the join, the requests carrying the tenant, team and
  workload themselves (as if their engines named them): what the rollups' extra series cost,
  the reference of the next two;
* ``first``: every request's gateway span stored before it (the spans' writes not timed):
  requests filled as they are stored;
* ``late``: the requests stored first, then their gateway spans: the requests' writes and the
  spans' (which fill the stored requests and correct their rollups) timed together.

The gateway spans name 20 tenants in 5 teams, each tenant with 3 workloads (API keys): what
the rollups keep apart multiplies with them, as it does with any label. On PostgreSQL each
batch's daily partitions are created before the clock starts (every batch is a day of its
own): a partition's DDL is no part of the join's cost, and would weigh on one case more than
on another (``late`` writes into two partitioned tables, its reference into one).

Each round runs every case once (ABBA order from round to round); each case's wall time per
request is divided by its reference's in the same round (``unused`` and ``labelled`` by
``bare``'s, ``first`` and ``late`` by ``labelled``'s), and the median and range over the
rounds are printed. On SQLite the time is this process's CPU time (the store works in it); on
PostgreSQL wall time (the store's work is the server's).

    .venv/bin/python bench/bench_attribution.py --rounds 4
    .venv/bin/python bench/bench_attribution.py --store postgresql+psycopg://…/empty_db
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness.interleave import add_round_arguments, interleave, ratio_spread
from harness.results import write_json

from infersight.core.attribution import Attribution
from infersight.core.records import RequestRecord
from infersight.storage import migrate
from infersight.storage.engine import create_store_engine
from infersight.storage.partitions import ensure_partitions
from infersight.storage.writer import open_writer

CASES = ("bare", "unused", "labelled", "first", "late")
T0 = datetime(2026, 3, 1, tzinfo=UTC)


class _Ids:
    """Trace and span ids never repeated within a run."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> tuple[str, str]:
        self.n += 1
        return f"{self.n:032x}", f"{self.n:016x}"


def _records(ids: _Ids, start: datetime, n: int) -> list[RequestRecord]:
    out = []
    for i in range(n):
        trace, span = ids.next()
        out.append(
            RequestRecord(
                trace_id=trace,
                span_id=span,
                start=start + timedelta(milliseconds=37 * i),
                instance=f"gpu-{i % 8}",
                engine="vllm",
                model="llama-70b",
                ttft_s=0.2 + (i % 7) * 0.03,
                tpot_s=0.02,
                e2e_s=3.0,
                prefill_s=0.2,
                decode_s=2.7,
                input_tokens=900 + i % 100,
                output_tokens=150,
            )
        )
    return out


def _gateway(records: list[RequestRecord]) -> list[Attribution]:
    return [
        Attribution(
            r.trace_id,
            f"{int(r.span_id, 16) + (1 << 60):016x}",
            r.start - timedelta(milliseconds=5),
            4.0,
            tenant=f"tenant-{i % 20}",
            team=f"team-{i % 20 % 5}",
            workload=f"key-{i % 20}-{i % 3}",
            source="litellm",
        )
        for i, r in enumerate(records)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", help="store URL (default: a SQLite file of its own)")
    parser.add_argument("--batch", type=int, default=2000, help="records per batch")
    parser.add_argument("--batches", type=int, default=5, help="batches per case and round")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    add_round_arguments(parser, rounds=4)
    args = parser.parse_args()
    folder = tempfile.TemporaryDirectory()
    url = args.store or f"sqlite:///{folder.name}/bench.db"
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    writer = open_writer(engine)
    bare = open_writer(engine)
    bare._attributed = lambda _connection, records: records  # type: ignore[attr-defined]
    bare._join_late = lambda records: None  # type: ignore[attr-defined]
    ids = _Ids()
    slot = [0]
    # SQLite works in this process: its CPU time, which load elsewhere on the host moves
    # little. PostgreSQL works in its server: wall time.
    sqlite = engine.dialect.name == "sqlite"
    clock = time.process_time if sqlite else time.perf_counter

    def batches() -> list[list[RequestRecord]]:
        # Each batch a day apart from anything written before: no gateway span of another
        # case lies within the join's look-back (``storage.attribution.LOOKBACK``).
        out = []
        for _ in range(args.batches):
            slot[0] += 1
            out.append(_records(ids, T0 + timedelta(days=slot[0]), args.batch))
        return out

    def labelled(batch: list[RequestRecord], spans: list[Attribution]) -> list[RequestRecord]:
        return [
            replace(r, tenant=a.tenant, team=a.team, workload=a.workload)
            for r, a in zip(batch, spans, strict=True)
        ]

    def timed(case: str) -> float:
        work = batches()
        spans = [_gateway(b) for b in work]
        if case == "first":
            for s in spans:
                writer.write_attributions(s)
        if case == "labelled":
            work = [labelled(b, s) for b, s in zip(work, spans, strict=True)]
        days = {r.start.date() for b in work for r in (b[0], b[-1])}
        with engine.begin() as connection:
            for table in ("requests", "trace_attributions"):
                ensure_partitions(connection, table, days, today=max(days))
        began = clock()
        for b, s in zip(work, spans, strict=True):
            (bare if case in ("bare", "labelled") else writer).write_requests(b)
            if case == "late":
                writer.write_attributions(s)
        return (clock() - began) / (args.batch * args.batches)

    def show(r: int, order: list[str], results: dict[str, float]) -> None:
        text = "  ".join(f"{name} {results[name] * 1e6:6.1f} µs" for name in CASES)
        print(f"round {r + 1} ({' '.join(order)}): {text}", flush=True)

    runs = interleave(
        {name: (lambda n=name: timed(n)) for name in CASES}, args.rounds, order=args.order,
        on_round=show,
    )  # fmt: skip
    figures: dict[str, Any] = {
        "store": engine.dialect.name,
        "batch": args.batch,
        "clock": "process CPU" if sqlite else "wall",
    }
    print(
        f"\nper request ({figures['clock']} time), {engine.dialect.name}, against the same "
        "run's reference:"
    )
    for name, reference in (
        ("unused", "bare"),
        ("labelled", "bare"),
        ("first", "labelled"),
        ("late", "labelled"),
    ):
        spread = ratio_spread(runs[name], runs[reference])
        figures[f"{name}/{reference}"] = spread.as_dict()
        print(f"  {name:8s} / {reference:8s} {spread.text('×')}")
    write_json(args.json, figures)
    engine.dispose()


if __name__ == "__main__":
    main()
