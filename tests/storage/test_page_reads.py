"""The dashboard's faster read paths answer exactly what the slower ones did (issue 35, item 4).

Each test reads a seeded store (three days of requests over two models and two instances, on
SQLite and PostgreSQL) through a read that the database now adds up, and through what the page
computed before from finer rows (kept here as the reference), and asks for the same answer.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.query import Selector
from infersight.core.window import Resolution, Window
from infersight.storage import timeseries
from infersight.storage.writer import open_writer
from tests.conftest import BOTH_STORES, empty_store
from tests.factories import make_records

START = datetime(2026, 11, 24, tzinfo=UTC)
END = START + timedelta(days=3)
#: Windows with ragged ends, a whole day, and one running past the data.
WINDOWS = (
    Window(START + timedelta(hours=5, minutes=17, seconds=9), START + timedelta(hours=29)),
    Window(START + timedelta(days=1), START + timedelta(days=2)),
    Window(START - timedelta(hours=7), END + timedelta(hours=3)),
)
SELECTORS = (Selector(), Selector(instance="gpu-1"), Selector(tenant="acme", priority="batch"))


@pytest.fixture(scope="module", params=BOTH_STORES)
def seeded(request):
    """Three days of traffic, loaded once per database; the tests only read it."""
    store = empty_store(request)
    rng = np.random.default_rng(35)
    records = make_records(rng, START, 9_000, span=END - START)
    # A third model on one instance, and a quiet night: peaks and gaps differ per model.
    records += make_records(
        rng,
        START + timedelta(hours=30),
        700,
        span=timedelta(hours=9),
        models=("mistral-7b",),
        instances=("gpu-0",),
    )
    writer = open_writer(store.engine)
    for i in range(0, len(records), 3000):
        writer.write_requests(records[i : i + 3000])
    return store


def _peaks_from_series(engine, window, step, selector):
    """What the Capacity page added up from ``request_series`` per model before (the
    reference): per bucket over instances, the busiest bucket, the total, the first and last
    bucket and the instances."""
    series = timeseries.request_series(engine, window, step, selector, ("model", "instance"))
    buckets: dict[str, dict[datetime, int]] = defaultdict(dict)
    instances: dict[str, set[str]] = defaultdict(set)
    for (model, instance), per_bucket in series.items():
        instances[model].add(instance)
        for at, counts in per_bucket.items():
            buckets[model][at] = buckets[model].get(at, 0) + counts.requests
    return {
        model: (max(b.values()), sum(b.values()), min(b), max(b), tuple(sorted(instances[model])))
        for model, b in buckets.items()
    }


@pytest.mark.parametrize("step", list(Resolution))
def test_request_peaks_equal_the_series_added_up(seeded, step):
    for window in WINDOWS:
        for selector in SELECTORS:
            expected = _peaks_from_series(seeded.engine, window, step, selector)
            found = timeseries.request_peaks(seeded.engine, window, step, selector)
            assert expected, (window, selector)
            assert {
                model: (p.peak, p.requests, p.first, p.last, p.instances)
                for model, p in found.items()
            } == expected, (window, step, selector)
            for p in found.values():
                assert p.first.utcoffset() == timedelta(0)
                assert p.last.utcoffset() == timedelta(0)
