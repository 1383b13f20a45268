"""The Scaling page's forecast band from one read of the weeks it covers
(``views.scaling._weeks_read_once``): each week's rates equal a read of that week alone in
every bucket its range holds whole, and are the whole bucket's rate where its range cuts one;
weeks whose chart buckets differ are read one by one."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.api.context import build_context
from infersight.api.dashboard import shared
from infersight.api.dashboard.context import parse_context
from infersight.api.dashboard.views import scaling
from infersight.api.settings import ApiSettings
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

NOW = datetime(2026, 11, 30, 12, 7, 30, tzinfo=UTC)  # not on a bucket edge


def _app(store: Store, minute_days: int = 14):
    app = build_context(ApiSettings(run_jobs=False), store.engine, clock=lambda: NOW)
    return dataclasses.replace(
        app, retention=dataclasses.replace(app.retention, minute_days=minute_days)
    )


def _fill(store: Store, weeks: int) -> None:
    rng = np.random.default_rng(3)
    for k in range(1, weeks + 1):
        start = NOW - k * scaling.WEEK - timedelta(hours=25)
        count = 400 * k  # each week its own rate
        open_writer(store.engine).write_requests(
            make_records(rng, start, count, span=timedelta(hours=26), models=("llama-8b",))
        )


class Reads:
    """``shared.request_series``, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self._read = shared.request_series

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._read(*args, **kwargs)


@pytest.mark.parametrize(("minute_days", "reads"), [(1, 1), (14, 2)])
def test_the_weeks_read_together_give_each_weeks_rates(
    store: Store, monkeypatch: pytest.MonkeyPatch, minute_days: int, reads: int
) -> None:
    """Minutes kept one day: the three weeks have hour buckets, read at once. Kept 14 days:
    the newest week has minute buckets (read alone), the two older ones hour buckets."""
    _fill(store, 3)
    app = _app(store, minute_days)
    ctx = parse_context({"range": "24h"}, NOW, app.settings.max_query_days, "24h")
    counted = Reads()
    monkeypatch.setattr(shared, "request_series", counted)
    together = scaling._weeks(app, ctx, "llama-8b", 3)
    assert counted.calls == reads
    monkeypatch.undo()
    assert len(together) == 3
    cut = 0
    for k, week in enumerate(together, start=1):
        shift = k * scaling.WEEK
        window = Window(ctx.window.start - shift, ctx.window.end - shift)
        alone = scaling._demand(app, ctx, "llama-8b", window, shift)
        assert set(week) == set(alone)
        chart_step = shared.chart_step(app, dataclasses.replace(ctx, window=window))
        step = timedelta(seconds=chart_step.seconds)
        for at, rate in alone.items():
            start = at - shift
            if window.start <= start and start + step <= window.end:
                assert week[at] == pytest.approx(rate, rel=1e-12), at  # a whole bucket
                continue
            # Cut by the week's range: the rate over the whole bucket (unless the span read
            # cuts it there too).
            bucket = Window(start, start + step)
            whole = shared.request_series(app, bucket, chart_step, Selector(model="llama-8b"))
            expected = [whole[()][start].requests / step.total_seconds(), rate]
            assert any(week[at] == pytest.approx(e, rel=1e-12) for e in expected), at
            cut += week[at] != pytest.approx(rate, rel=1e-12)
    assert cut >= 1  # some week's edge was read whole
    band, seen = scaling._band(app, ctx, "llama-8b", 3)
    assert seen == 3
    assert band is not None
    inner = [
        p
        for p in band.points
        if ctx.window.start + timedelta(hours=1) <= p[0] < ctx.window.end - timedelta(hours=1)
    ]
    assert inner
    assert all(low < high for _, low, high in inner)  # three different rates each time
