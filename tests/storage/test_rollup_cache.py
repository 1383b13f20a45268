"""The incremental counter (``CycleCounter`` with a ``RollupCache`` kept across cycles) gives
the from-scratch answer over many cycles with fresh and late writes in between, decodes only
what changed, and forgets rows that left every window."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np

from infersight.core.query import Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Window
from infersight.storage import slo_store
from infersight.storage.tables import request_rollups, requests
from infersight.storage.writer import open_writer
from tests.factories import make_records

START = datetime(2026, 11, 20, 12, 0, 17, tzinfo=UTC)
LENGTHS = (
    timedelta(minutes=5),
    timedelta(hours=1),
    timedelta(hours=6),
    timedelta(days=1),
    timedelta(days=3),
    timedelta(days=7),
)
SPECS = [
    SloSpec("avail", Sli(SliKind.AVAILABILITY), 0.99, timedelta(days=7)),
    SloSpec("avail-8b", Sli(SliKind.AVAILABILITY), 0.99, timedelta(days=3),
            Selector(model="llama-8b", instance="gpu-1")),
    SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 0.1), 0.99, timedelta(days=7),
            Selector(tenant="acme")),
    SloSpec("ttft-slow", Sli(SliKind.LATENCY, "ttft", 0.3), 0.99, timedelta(days=1)),
    SloSpec("tpot", Sli(SliKind.LATENCY, "tpot", 0.012), 0.99, timedelta(days=7),
            Selector(priority="batch")),
]  # fmt: skip


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _count_all(connection, now, cache):
    counter = slo_store.CycleCounter(connection, now, cache=cache)
    counter.prepare(set(LENGTHS) | {s.window for s in SPECS}, [s.sli for s in SPECS])
    return {spec.name: counter.count(spec, LENGTHS) for spec in SPECS}


def test_incremental_counts_equal_fresh_counts_over_many_cycles_with_writes_between(store):
    rng = np.random.default_rng(16)
    writer = open_writer(store.engine)
    writer.write_requests(
        make_records(rng, START - timedelta(days=8), 4000, span=timedelta(days=8), error_rate=0.05)
    )
    cache = slo_store.RollupCache()
    now = START
    for cycle in range(14):
        step = timedelta(seconds=int(rng.choice([7, 30, 61, 600, 3600 + 13, 86400 + 5])))
        now += step
        # Fresh data up to now (the newest minutes) ...
        writer.write_requests(
            make_records(rng, now - step, int(rng.integers(20, 200)), span=step, error_rate=0.1)
        )
        # ... and late data from a sidecar's spool, into buckets the cache already holds.
        if cycle % 2:
            back = timedelta(hours=float(rng.uniform(0.5, 80)))
            writer.write_requests(
                make_records(rng, now - back, 30, span=timedelta(minutes=3), error_rate=0.5)
            )
        with store.engine.connect() as connection:
            incremental = _count_all(connection, now, cache)
            fresh = _count_all(connection, now, None)
            assert incremental == fresh, cycle
            one = SPECS[2]
            for length in LENGTHS:
                alone = slo_store.count_events(
                    connection, one.sli, Window.last(length, now), one.selector
                )
                assert incremental[one.name][length] == alone, (cycle, length)
    assert cache.stats.rows_checked > cache.stats.rows_reloaded  # rows were reused


def test_a_warm_cycle_decodes_only_the_rows_that_changed(store):
    rng = np.random.default_rng(3)
    writer = open_writer(store.engine)
    writer.write_requests(
        make_records(rng, START - timedelta(days=8), 3000, span=timedelta(days=8))
    )
    cache = slo_store.RollupCache()
    with store.engine.connect() as connection:
        first = _count_all(connection, START, cache)
        decoded = cache.stats.sketches_read
        assert decoded > 0
        assert _count_all(connection, START, cache) == first
        assert cache.stats.sketches_read == decoded  # nothing changed: nothing decoded
    # A late request two days back changes one row per resolution it lands in.
    late = make_records(rng, START - timedelta(days=2, minutes=7), 1, span=timedelta(seconds=1))
    writer.write_requests(late)
    with store.engine.connect() as connection:
        again = _count_all(connection, START, cache)
        assert again == _count_all(connection, START, None)
        assert (
            again["avail"][timedelta(days=7)].total == first["avail"][timedelta(days=7)].total + 1
        )
    assert 0 < cache.stats.sketches_read - decoded <= 3 * 2  # ≤ 3 rows × 2 sketch metrics


def test_a_row_rewritten_with_the_same_totals_is_read_again(store):
    """Totals alone would miss this (tables emptied and loaded again); the fingerprint not."""
    rng = np.random.default_rng(5)
    records = make_records(rng, START - timedelta(days=2), 500, span=timedelta(days=2))
    cache = slo_store.RollupCache()
    writer = open_writer(store.engine)
    writer.write_requests(records)
    with store.engine.connect() as connection:
        _count_all(connection, START, cache)
    with store.engine.begin() as connection:
        connection.execute(request_rollups.delete())
        connection.execute(requests.delete())
    slower = [dataclasses.replace(r, ttft_s=(r.ttft_s or 0) * 3) for r in records]
    writer.write_requests(slower)
    with store.engine.connect() as connection:
        assert _count_all(connection, START, cache) == _count_all(connection, START, None)


def test_rows_that_no_cycle_uses_are_dropped(store):
    rng = np.random.default_rng(9)
    open_writer(store.engine).write_requests(
        make_records(rng, START - timedelta(days=8), 2000, span=timedelta(days=8))
    )
    ticks = Ticks()
    cache = slo_store.RollupCache(idle_s=60, monotonic=ticks)
    with store.engine.connect() as connection:
        _count_all(connection, START, cache)
        held = len(cache)
        assert held > 0
        # A day later every edge has moved: the old edge minutes are no longer used.
        ticks.now += 30
        _count_all(connection, START + timedelta(days=1), cache)
        ticks.now += 61
        _count_all(connection, START + timedelta(days=1), cache)
    assert cache.stats.rows_dropped > 0
    assert len(cache) <= held + 200
