"""How much of the store a 30-day page reads (issue 16).

A 30-day chart has 6-hour buckets; it is drawn from hour rollups, with minute rollups only at
the ragged ends of the range, never from every minute of the month. Each test counts the
request-rollup rows the statements of one render return (each statement recorded with a
``before_cursor_execute`` event and counted again afterwards), on a store with a request every
five minutes for 30 days (8,640 minute rows, 720 hour rows), and checks that the charts drawn
from those rows are the ones the minute rollups give.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event

from infersight.api import create_app
from infersight.api.dashboard import shared
from infersight.api.dashboard.context import parse_context
from infersight.api.dashboard.views import baselines, latency, overview
from infersight.api.settings import ApiSettings
from infersight.core.query import Selector
from infersight.core.records import RequestRecord
from infersight.core.sketch import merge_all
from infersight.core.window import Resolution, Window
from infersight.storage import migrate, queries, timeseries
from infersight.storage.baselines import capture_window, save_baseline
from infersight.storage.engine import create_store_engine
from infersight.storage.maintenance import RetentionPolicy
from infersight.storage.sketch_cache import sketch_cache
from infersight.storage.writer import open_writer

NOW = datetime(2026, 11, 30, 9, 17, 23, tzinfo=UTC)
DAYS = 30
EVERY = timedelta(minutes=5)
HOURS = DAYS * 24
RETENTION = RetentionPolicy(raw_days=60, minute_days=60, hour_days=180)


@dataclass
class Store:
    engine: Engine
    app: Any


def _records() -> Iterator[RequestRecord]:
    at, i = NOW - timedelta(days=DAYS), 0
    while at < NOW:
        i += 1
        yield RequestRecord(
            trace_id=f"{i:032x}", span_id=f"{i:016x}", start=at, instance="gpu-node-a",
            engine="vllm", model="llama-3-8b", tenant="default", priority="interactive",
            ttft_s=0.05 + (i % 17) / 100, tpot_s=0.01 + (i % 5) / 1000, e2e_s=1.0 + (i % 11) / 10,
            input_tokens=500, output_tokens=100 + i % 50,
        )  # fmt: skip
        at += EVERY


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    path: Path = tmp_path_factory.mktemp("reads") / "store.db"
    engine = create_store_engine(f"sqlite:///{path}")
    migrate.upgrade(engine)
    records = list(_records())
    writer = open_writer(engine)
    for i in range(0, len(records), 2000):
        writer.write_requests(records[i : i + 2000])
    app = create_app(ApiSettings(run_jobs=False), engine, lambda: NOW, retention=RETENTION)
    yield Store(engine, app.state.context)
    engine.dispose()


def rollup_rows_read(engine: Engine, render: Any) -> int:
    """Rows of ``request_rollups`` the statements issued by ``render()`` return."""
    issued: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "FROM request_rollups" in statement:
            issued.append((statement, params))

    event.listen(engine, "before_cursor_execute", record)
    try:
        render()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert issued, "the page read no rollups"
    total = 0
    with engine.connect() as connection:
        raw = connection.connection.dbapi_connection
        assert raw is not None
        for statement, params in issued:
            total += raw.execute(f"SELECT count(*) FROM ({statement})", params).fetchone()[0]
    return total


def _ctx(store: Store) -> Any:
    return parse_context({"range": "30d"}, NOW, store.app.settings.max_query_days, "1h")


def test_a_30_day_latency_page_reads_hour_rollups_not_minutes(store: Store) -> None:
    ctx = _ctx(store)
    rows = rollup_rows_read(store.engine, lambda: latency.latency(store.app, ctx, 0.99, "ttft"))
    # Three metrics' charts (an hour row each, minute rows at the two ends), the table and
    # the breakdown (a few day, hour and minute rows each): far below a month of minutes.
    assert rows <= 3 * (HOURS + 2 * 60) + 8 * (DAYS + 2 * 24 + 2 * 60)


def test_a_30_day_overview_reads_hour_rollups_not_minutes(store: Store) -> None:
    ctx = _ctx(store)
    rows = rollup_rows_read(store.engine, lambda: overview.fleet(store.app, ctx))
    assert rows <= (HOURS + 2 * 60) + 2 * (DAYS + 2 * 24 + 2 * 60)


def test_the_charts_add_up_to_what_minute_rollups_give(store: Store) -> None:
    ctx = _ctx(store)
    step = shared.chart_step(store.app, ctx)
    assert step.seconds == 6 * 3600
    assert step.rollups is Resolution.MINUTE
    assert step.coarsest is Resolution.HOUR
    minutes = shared.ChartStep(step.seconds, Resolution.MINUTE)

    def by_minutes_counts() -> dict[Any, Any]:
        found = timeseries.request_series(store.engine, ctx.window, Resolution.MINUTE)
        out: dict[Any, dict[datetime, list[int]]] = {}
        for labels, buckets in found.items():
            for at, c in buckets.items():
                total = out.setdefault(labels, {}).setdefault(minutes.floor(at), [0, 0, 0, 0])
                for i, v in enumerate((c.requests, c.errors, c.input_tokens, c.output_tokens)):
                    total[i] += v
        return {k: {at: timeseries.Counts(*v) for at, v in b.items()} for k, b in out.items()}

    assert shared.request_series(store.app, ctx.window, step) == by_minutes_counts()
    for metric in ("ttft", "tpot", "e2e"):
        drawn = shared.bucket_sketches(store.app, metric, ctx.window, step)
        fine = timeseries.bucket_sketches(store.engine, metric, ctx.window, Resolution.MINUTE)
        expected: dict[datetime, list[Any]] = {}
        for at, sketch in fine[()].items():
            expected.setdefault(minutes.floor(at), []).append(sketch)
        assert sorted(drawn[()]) == sorted(expected)
        for at, parts in expected.items():
            got = drawn[()][at]
            assert got.count == sum(p.count for p in parts)
            for q in (0.5, 0.9, 0.99):
                want = merge_all(parts).quantile(q)
                assert got.quantile(q) == pytest.approx(want, rel=1e-12)


def statements(engine: Engine, render: Any) -> list[str]:
    issued: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        issued.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        render()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return issued


def test_a_baselines_page_reads_each_latency_sketch_once(store: Store) -> None:
    first_day = Window(NOW - timedelta(days=DAYS), NOW - timedelta(days=DAYS - 1))
    save_baseline(
        store.engine,
        capture_window(store.engine, "first-day", first_day, Selector(), first_day.end),
    )
    ctx = _ctx(store)
    sketch_cache(store.engine).clear()  # both reads start cold: every segment read in full
    page = statements(store.engine, lambda: baselines.baselines(store.app, ctx, ""))
    # The window's sketches of one metric, segment by segment, as the latency query reads them.
    sketch_cache(store.engine).clear()
    with store.engine.connect() as connection:
        one_metric = statements(
            store.engine,
            lambda: queries.group_sketches(
                connection, "ttft_s", ctx.window, Selector(), (), Resolution.MINUTE
            ),
        )

    def sketch_reads(issued: list[str], metric: str) -> list[str]:
        """Statements that select the metric's rollup sketches (or their digest)."""
        return [
            s
            for s in issued
            if s.startswith("SELECT ") and f"request_rollups.{metric}_sketch" in s.split("FROM")[0]
        ]

    assert sketch_reads(one_metric, "ttft")
    for metric in ("ttft", "tpot", "e2e"):
        assert len(sketch_reads(page, metric)) == len(sketch_reads(one_metric, "ttft"))
