"""Capturing a baseline from a window of the store, on SQLite and PostgreSQL: exact quantiles
when the window is small, sketch quantiles within 1 % when it is not, throughput, errors,
GPU utilisation of the instances that served the selector, and cost per million tokens."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from infersight.core.baseline import BASELINE_QUANTILES
from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.samples import GpuSample
from infersight.core.window import Window
from infersight.service.cost_spec import example_model
from infersight.storage.baselines import capture_window
from infersight.storage.writer import open_writer
from tests.doubles import NOW
from tests.factories import make_records

START = NOW - timedelta(hours=3)
WINDOW = Window(START, NOW)


@pytest.fixture
def fleet(store):
    """Two models on two instances (one each), with GPU samples every 30 s."""
    rng = np.random.default_rng(8)
    small = make_records(
        rng, START, 1500, span=timedelta(hours=3), models=("llama-8b",), instances=("gpu-0",)
    )
    large = make_records(
        rng, START, 900, span=timedelta(hours=3), models=("llama-70b",), instances=("gpu-1",)
    )
    writer = open_writer(store.engine)
    writer.write_requests(small + large)
    samples = [
        GpuSample(
            START + timedelta(seconds=30 * i),
            instance,
            0,
            name="NVIDIA H100 80GB HBM3",
            util_gpu=util,
        )
        for i in range(360)
        for instance, util in (("gpu-0", 0.8), ("gpu-1", 0.3))
    ]
    writer.write_gpu_samples(samples)
    return store, small, large


def _numpy(records, field):
    values = [getattr(r, field) for r in records if getattr(r, field) is not None]
    return dict(zip(BASELINE_QUANTILES, np.quantile(values, BASELINE_QUANTILES), strict=True))


def test_a_small_window_is_captured_with_exact_quantiles_and_its_distribution(fleet):
    store, small, _ = fleet
    b = capture_window(store.engine, "prod", WINDOW, Selector(model="llama-8b"), NOW)
    assert b.source == "window"
    assert b.labels == {"model": "llama-8b"}
    assert b.requests == len(small)
    assert b.errors == sum(r.status == "error" for r in small)
    assert b.duration_s == pytest.approx(3 * 3600)
    assert b.request_throughput == pytest.approx((b.requests - b.errors) / (3 * 3600))
    assert b.output_token_throughput == pytest.approx(
        sum(r.output_tokens for r in small) / (3 * 3600)
    )
    for metric, field in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s")):
        assert b.latency[metric].quantiles == pytest.approx(_numpy(small, field))
        sketch = b.latency[metric].distribution()
        assert sketch is not None
        assert sketch.count == len(small)
    assert b.gpu_utilization == pytest.approx(0.8)
    assert (b.window_start, b.window_end) == (WINDOW.start, WINDOW.end)


def test_a_large_window_uses_sketches_within_one_percent(fleet):
    store, small, large = fleet
    b = capture_window(store.engine, "prod", WINDOW, Selector(), NOW, exact_max_rows=0)
    assert b.requests == len(small) + len(large)
    for q, exact in _numpy(small + large, "ttft_s").items():
        assert b.latency["ttft"].quantiles[q] == pytest.approx(exact, rel=0.01)
    assert b.gpu_utilization == pytest.approx(0.55)


def test_a_cost_model_adds_cost_per_million_tokens_in_its_currency(fleet):
    store, _, _ = fleet
    model = example_model()
    b = capture_window(store.engine, "prod", WINDOW, Selector(), NOW, cost_model=model)
    assert b.cost_per_million_tokens is not None
    assert b.cost_per_million_tokens > 0
    assert b.labels["cost_currency"] == model.currency


def test_an_empty_window_is_refused(store):
    with pytest.raises(InvalidInput, match="no requests"):
        capture_window(store.engine, "prod", WINDOW, Selector(model="nobody"), NOW)


@pytest.mark.parametrize(
    ("offset", "span"),
    [(timedelta(hours=2, minutes=30), "the last half hour"), (timedelta(hours=1), "the middle")],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_throughput_divides_by_the_part_of_the_window_that_holds_data(store, offset, span):
    """Requests in half an hour of a three-hour window (its end, or its middle): the rates
    are per second of that half hour (to the minute buckets the span is read at), not of the
    window — a window rate would be six times lower."""
    rng = np.random.default_rng(3)
    records = make_records(rng, START + offset, 900, span=timedelta(minutes=30))
    open_writer(store.engine).write_requests(records)
    b = capture_window(store.engine, "half", WINDOW, Selector(), NOW)
    good = sum(r.status != "error" for r in records)
    half_hour = 30 * 60
    assert b.duration_s == pytest.approx(half_hour, abs=120)  # whole minutes at each end
    assert b.request_throughput == pytest.approx(good / half_hour, rel=0.07)
    assert b.request_throughput == pytest.approx(good / b.duration_s)
    tokens = sum(r.output_tokens for r in records)
    assert b.output_token_throughput == pytest.approx(tokens / b.duration_s)
    assert (b.window_start, b.window_end) == (WINDOW.start, WINDOW.end)  # the window asked
