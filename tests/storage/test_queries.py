"""Queries: exact quantiles equal numpy, rollup quantiles stay within 1 %, totals add up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.errors import InvalidInput
from infersight.core.query import Method, Selector
from infersight.core.window import Window
from infersight.storage import queries
from infersight.storage.writer import open_writer
from tests.conftest import STORES_AND_POOLER, empty_store
from tests.factories import make_records

DAY_START = datetime(2026, 11, 28, tzinfo=UTC)
QS = (0.5, 0.9, 0.95, 0.99)


@pytest.fixture(scope="module", params=STORES_AND_POOLER)
def day_of_data(request):
    """A day of traffic, loaded once per database; the tests only read it."""
    store = empty_store(request)
    records = make_records(np.random.default_rng(11), DAY_START, 20_000, span=timedelta(days=1))
    writer = open_writer(store.engine)
    for i in range(0, len(records), 5000):
        writer.write_requests(records[i : i + 5000])
    return store, records


def numpy_quantiles(values):
    return dict(zip(QS, np.quantile(np.asarray(values), QS), strict=True))


def test_exact_method_equals_numpy_per_group(day_of_data):
    store, records = day_of_data
    window = Window(
        DAY_START + timedelta(hours=3, seconds=17), DAY_START + timedelta(hours=9, minutes=2)
    )
    result = queries.latency(
        store.engine, "ttft", window, group_by=["model"], quantiles=QS, method=Method.EXACT
    )
    assert result.method is Method.EXACT
    assert result.relative_error == 0.0
    assert [g.labels["model"] for g in result.groups] == ["llama-70b", "llama-8b"]
    for group in result.groups:
        values = [
            r.ttft_s for r in records if r.model == group.labels["model"] and r.start in window
        ]
        assert group.count == len(values)
        for q, expected in numpy_quantiles(values).items():
            assert group.quantiles[q] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("metric", ["ttft", "tpot", "e2e", "queue"])
def test_rollup_quantiles_over_a_day_agree_with_exact_ones_within_one_percent(day_of_data, metric):
    store, _records = day_of_data
    window = Window(DAY_START - timedelta(hours=2), DAY_START + timedelta(days=1, hours=1))
    exact = queries.latency(store.engine, metric, window, quantiles=QS, method=Method.EXACT)
    sketch = queries.latency(store.engine, metric, window, quantiles=QS, method=Method.SKETCH)
    assert sketch.method is Method.SKETCH
    assert sketch.relative_error == 0.01
    assert sketch.groups[0].count == exact.groups[0].count == 20_000
    for q in QS:
        truth = exact.groups[0].quantiles[q]
        assert abs(sketch.groups[0].quantiles[q] - truth) <= 0.01 * truth


def test_unaligned_windows_mix_raw_edges_with_rollups_exactly(day_of_data):
    store, records = day_of_data
    window = Window(
        DAY_START + timedelta(hours=1, minutes=7, seconds=31),
        DAY_START + timedelta(hours=20, seconds=2.5),
    )
    selector = Selector(model="llama-8b", tenant="acme")
    sketch = queries.latency(
        store.engine, "e2e", window, selector, group_by=["instance"], method=Method.SKETCH
    )
    for group in sketch.groups:
        values = [
            r.e2e_s
            for r in records
            if r.start in window
            and r.model == "llama-8b"
            and r.tenant == "acme"
            and r.instance == group.labels["instance"]
        ]
        assert group.count == len(values)
        for q, truth in numpy_quantiles(values).items():
            assert abs(group.quantiles[q] - truth) <= 0.01 * truth


def test_auto_picks_exact_for_small_windows_and_sketches_for_large_ones(day_of_data):
    store, _ = day_of_data
    small = Window(DAY_START, DAY_START + timedelta(minutes=30))
    large = Window(DAY_START, DAY_START + timedelta(days=1))
    assert queries.latency(store.engine, "ttft", small, exact_max_rows=5000).method is Method.EXACT
    assert queries.latency(store.engine, "ttft", large, exact_max_rows=5000).method is Method.SKETCH


def test_throughput_totals_match_the_records(day_of_data):
    store, records = day_of_data
    window = Window(
        DAY_START + timedelta(minutes=90, seconds=5), DAY_START + timedelta(hours=23, seconds=59)
    )
    rows = queries.throughput(store.engine, window, group_by=["tenant", "priority"])
    assert len(rows) == 4
    for row in rows:
        mine = [
            r
            for r in records
            if r.start in window
            and r.tenant == row.labels["tenant"]
            and r.priority == row.labels["priority"]
        ]
        assert row.requests == len(mine)
        assert row.errors == sum(r.is_error for r in mine)
        assert row.output_tokens == sum(r.output_tokens for r in mine)
        assert row.requests_per_s == pytest.approx(len(mine) / window.seconds)


def test_breakdown_shares_are_stage_time_over_end_to_end_time(day_of_data):
    store, records = day_of_data
    window = Window(DAY_START + timedelta(seconds=30), DAY_START + timedelta(hours=12, seconds=30))
    (result,) = queries.breakdown(store.engine, window)
    mine = [r for r in records if r.start in window]
    e2e = sum(r.e2e_s for r in mine)
    shares = {s.stage: s for s in result.stages}
    assert result.requests == len(mine)
    assert shares["queue"].share == pytest.approx(sum(r.queue_s for r in mine) / e2e)
    assert shares["decode"].share == pytest.approx(sum(r.decode_s for r in mine) / e2e)
    assert shares["preprocess"].coverage == pytest.approx(1.0)
    assert shares["gateway"].share is None
    assert shares["gateway"].coverage == 0.0


def test_an_empty_window_answers_with_no_groups(store):
    window = Window(DAY_START, DAY_START + timedelta(hours=1))
    assert queries.latency(store.engine, "ttft", window, method=Method.SKETCH).groups == ()
    # Exact over no rows: PostgreSQL's ungrouped percentile_cont answers a row of NULLs.
    assert queries.latency(store.engine, "ttft", window, method=Method.EXACT).groups == ()
    assert queries.throughput(store.engine, window) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"metric": "latency"}, "unknown metric"),
        ({"group_by": ["region"]}, "cannot group by"),
        ({"quantiles": [1.5]}, "quantiles"),
    ],
)
def test_bad_query_parameters_are_refused(store, kwargs, message):
    args = {"metric": "ttft", "window": Window(DAY_START, DAY_START + timedelta(hours=1)), **kwargs}
    with pytest.raises(InvalidInput, match=message):
        queries.latency(store.engine, **args)
