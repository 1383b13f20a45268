"""What attribution in ClickHouse costs the reads (issue #36), in one run.

``--requests`` requests over ``--days`` days (two models on four instances) are written to
ClickHouse (chdb, in process) by the hybrid store's writers with no gateway span yet; then
gateway spans naming a team and a workload are written for ``--attributed`` of the traces,
which moves those requests (``storage_clickhouse.attribution``: ``request_moves``). Each read
below is timed in interleaved rounds two ways on that same database: as built (requests read
through ``requests_attributed``, rollups with the moves' rows added, sketches' rows added up
per bucket and series first) and as before attribution (``requests FINAL`` and the rollups
alone: the reference, whose answers by team or workload are the unattributed ones). Printed:
each read's median time both ways and the ratio's median and range.

Usage: ``python bench/bench_clickhouse_attribution.py [--requests N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from infersight.core.attribution import Attribution
from infersight.core.query import Method, Selector
from infersight.core.records import RequestRecord
from infersight.core.slo import Sli, SliKind
from infersight.core.window import Resolution, Window
from infersight.storage_clickhouse import reads
from infersight.storage_clickhouse.attribution import AttributionWriter
from infersight.storage_clickhouse.reads import EventReads, Reads
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport
from infersight.storage_clickhouse.writer import ClickHouseWriter


def _records(n: int, start: datetime, days: int) -> list[RequestRecord]:
    rng = np.random.default_rng(36)
    offsets = np.sort(rng.uniform(0, days * 86400.0, n))
    ttft = rng.lognormal(np.log(0.08), 0.8, n)
    ids = rng.integers(1, 2**63, size=(n, 3))
    return [
        RequestRecord(
            trace_id=f"{int(ids[i, 0]):016x}{int(ids[i, 1]):016x}",
            span_id=f"{int(ids[i, 2]):016x}",
            start=start + timedelta(seconds=float(offsets[i])),
            instance=f"gpu-{i % 4}",
            model=("llama-8b", "qwen-7b")[i % 2],
            tenant="acme",
            priority="interactive",
            ttft_s=float(ttft[i]),
            e2e_s=float(ttft[i]) * 10,
            input_tokens=100,
            output_tokens=50,
        )
        for i in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--attributed", type=float, default=0.3)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    path = tempfile.mkdtemp()
    transport = ChdbTransport(path)
    layout = Layout(database="bench_attr")
    migrate(transport, layout)
    t0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(
        days=args.days + 1
    )
    records = _records(args.requests, t0, args.days)
    writer = ClickHouseWriter(transport, layout)
    began = time.perf_counter()
    for i in range(0, len(records), 50_000):
        writer.write_requests(records[i : i + 50_000])
    print(f"wrote {len(records)} requests in {time.perf_counter() - began:.1f} s")
    picked = [r for i, r in enumerate(records) if (i * 7919) % 100 < args.attributed * 100]
    spans = [
        Attribution(
            r.trace_id,
            f"{i + 1:016x}",
            r.start - timedelta(seconds=0.5),
            duration_s=2.0,
            team=("search", "ads", "chat")[i % 3],
            workload=("rag", "eval")[i % 2],
        )
        for i, r in enumerate(picked)
    ]
    attribution = AttributionWriter(transport, layout)
    began = time.perf_counter()
    for i in range(0, len(spans), 20_000):
        attribution.store(spans[i : i + 20_000])
        attribution.settle_spans(spans[i : i + 20_000])
    moved = transport.rows(f"SELECT count() FROM {layout.table('request_moves')} FINAL")[0][0]
    print(f"moved {moved} requests ({len(spans)} spans) in {time.perf_counter() - began:.1f} s")

    window = Window(t0 + timedelta(hours=1, seconds=17.5), t0 + timedelta(days=args.days))
    built, events = Reads(transport, layout), EventReads(transport, layout)
    team = ("team",)
    cases: dict[str, Callable[[], Any]] = {
        "latency sketch by team": lambda: built.latency(
            "ttft", window, Selector(), team, method=Method.SKETCH
        ),
        "latency exact, team pinned": lambda: built.latency(
            "ttft", window, Selector(team="ads"), method=Method.EXACT
        ),
        "throughput by workload": lambda: built.throughput(window, Selector(), ("workload",)),
        "series 1h by team": lambda: built.series(window, Resolution.HOUR, Selector(), team),
        "latency SLO events, team pinned": lambda: events.count_events(
            Sli(SliKind.LATENCY, metric="ttft", threshold_s=0.1), window, Selector(team="ads")
        ),
        "label_sets": lambda: built.label_sets(window),
        "latency sketch by model (no team)": lambda: built.latency(
            "ttft", window, Selector(), ("model",), method=Method.SKETCH
        ),
    }
    attributed_rows, attributed_raw = reads._rollup_rows, reads._raw

    def before_rows(
        layout: Layout, segments: Any, selector: Any, columns: str, *_: Any, **__: Any
    ) -> str:
        return " UNION ALL ".join(
            f"SELECT {columns} FROM {reads._rollup_table(layout, s.resolution)}"
            f" WHERE {reads._rollup_where(s, selector)}"
            for s in segments
        )

    def before_raw(layout: Layout, *_: Any) -> str:
        return f"{layout.table('requests')} FINAL"

    times: dict[str, dict[str, list[float]]] = {n: {"built": [], "before": []} for n in cases}
    for round_ in range(args.rounds):
        for name, call in cases.items():
            order = ("built", "before") if round_ % 2 == 0 else ("before", "built")
            for how in order:
                reads._rollup_rows = attributed_rows if how == "built" else before_rows  # type: ignore[assignment]
                reads._raw = attributed_raw if how == "built" else before_raw  # type: ignore[assignment]
                began = time.perf_counter()
                call()
                times[name][how].append(time.perf_counter() - began)
    reads._rollup_rows, reads._raw = attributed_rows, attributed_raw  # type: ignore[assignment]
    print(f"{'read':34} {'built ms':>9} {'before ms':>10} {'ratio (range)':>22}")
    for name, pair in times.items():
        ratios = [a / b for a, b in zip(pair["built"], pair["before"], strict=True)]
        print(
            f"{name:34} {statistics.median(pair['built']) * 1e3:9.1f}"
            f" {statistics.median(pair['before']) * 1e3:10.1f}"
            f" {statistics.median(ratios):8.2f}× ({min(ratios):.2f}–{max(ratios):.2f})"
        )
    transport.close()
    shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
