"""Properties of the quantile sketch: its error bound, merging, and its byte form."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infersight.core.errors import InvalidInput
from infersight.core.quantiles import exact_quantiles
from infersight.core.sketch import QuantileSketch, header_totals, merge_all, sketches_by_group

QUANTILES = (0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0)
BOUND = 0.01 + 1e-9  # 1 % plus floating-point slack


def assert_within_bound(values: np.ndarray, sketch: QuantileSketch) -> None:
    exact = exact_quantiles(values, QUANTILES)
    estimate = sketch.quantiles(QUANTILES)
    for q in QUANTILES:
        truth = exact[q]
        if truth < 1e-9:
            assert estimate[q] <= 1e-9 * (1 + BOUND) + abs(truth), (q, truth, estimate[q])
        else:
            assert abs(estimate[q] - truth) <= BOUND * truth, (q, truth, estimate[q])


@st.composite
def adversarial(draw: st.DrawFn) -> np.ndarray:
    """Samples from distributions that break naive sketches: heavy tails, gaps, constants."""
    seed = draw(st.integers(0, 2**32 - 1))
    size = draw(st.integers(1, 3000))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["lognormal", "bimodal", "pareto", "constant", "zeros", "spread"]))
    if kind == "lognormal":
        values = rng.lognormal(draw(st.floats(-8, 3)), draw(st.floats(0.01, 3)), size)
    elif kind == "bimodal":
        low = rng.normal(0.02, 0.001, size)
        high = rng.normal(draw(st.floats(1, 1000)), 1.0, size)
        values = np.where(rng.random(size) < draw(st.floats(0.01, 0.99)), low, high)
    elif kind == "pareto":
        values = (rng.pareto(draw(st.floats(0.5, 3)), size) + 1) * 1e-3
    elif kind == "constant":
        values = np.full(size, draw(st.floats(1e-6, 1e5)))
    elif kind == "zeros":
        values = np.where(rng.random(size) < 0.3, 0.0, rng.exponential(1.0, size))
    else:
        values = 10.0 ** rng.uniform(-6, 5, size)
    return np.abs(values)


@settings(max_examples=150, deadline=None)
@given(adversarial())
def test_every_quantile_is_within_one_percent_of_the_exact_interpolated_one(values):
    assert_within_bound(values, QuantileSketch.of(values))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_bound_holds_for_arbitrary_float_lists(raw):
    values = np.array(raw)
    assert_within_bound(values, QuantileSketch.of(values))


@settings(max_examples=60, deadline=None)
@given(adversarial(), adversarial(), adversarial())
def test_merge_is_associative_and_equals_one_sketch_over_everything(a, b, c):
    sa, sb, sc = (QuantileSketch.of(v) for v in (a, b, c))
    left = sa.copy()
    left.merge(sb)
    left.merge(sc)
    right_inner = sb.copy()
    right_inner.merge(sc)
    right = sa.copy()
    right.merge(right_inner)
    whole = QuantileSketch.of(np.concatenate([a, b, c]))
    assert left == right == whole == merge_all([sa, sb, sc])
    assert_within_bound(np.concatenate([a, b, c]), left)


@settings(max_examples=60, deadline=None)
@given(adversarial())
def test_bytes_round_trip(values):
    sketch = QuantileSketch.of(values)
    data = sketch.to_bytes()
    assert QuantileSketch.from_bytes(data) == sketch
    assert header_totals(data) == (sketch.count, pytest.approx(sketch.sum))


def test_empty_sketch_answers_nothing_and_round_trips():
    sketch = QuantileSketch()
    assert sketch.quantiles([0.5]) == {}
    assert sketch.mean is None
    assert QuantileSketch.from_bytes(sketch.to_bytes()) == sketch


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated"),
        (b"XXXX" + bytes(60), "bad magic"),
        (QuantileSketch.of([1.0, 2.0]).to_bytes()[:-3], "does not match"),
        (QuantileSketch.of(np.geomspace(1e-3, 1e3, 500)).to_bytes()[:-3], "corrupt"),
    ],
)
def test_corrupt_bytes_are_refused_clearly(data, message):
    with pytest.raises(InvalidInput, match=message):
        QuantileSketch.from_bytes(data)


@pytest.mark.parametrize("bad", [[-1.0], [float("nan")], [float("inf")]])
def test_negative_and_non_finite_values_are_refused(bad):
    with pytest.raises(InvalidInput):
        QuantileSketch.of(bad)


def test_sketches_of_different_accuracy_do_not_merge():
    with pytest.raises(InvalidInput, match="accuracy"):
        QuantileSketch(0.01).merge(QuantileSketch.of([1.0], alpha=0.02))


@settings(max_examples=40, deadline=None)
@given(adversarial(), st.integers(1, 7))
def test_grouped_build_equals_one_sketch_per_group(values, groups):
    rng = np.random.default_rng(len(values))
    ids = rng.integers(0, groups, values.size)
    with_gaps = values.copy()
    with_gaps[rng.random(values.size) < 0.1] = np.nan  # "not reported"
    built = sketches_by_group(ids, with_gaps, groups)
    for g in range(groups):
        mine = with_gaps[(ids == g) & ~np.isnan(with_gaps)]
        if mine.size:
            assert built[g] == QuantileSketch.of(mine)
        else:
            assert built[g] is None


@settings(max_examples=60, deadline=None)
@given(adversarial(), st.floats(1e-6, 1e4))
def test_count_at_most_is_exact_outside_the_thresholds_bucket(values, threshold):
    sketch = QuantileSketch.of(values)
    counted = sketch.count_at_most(threshold)
    width = 1 + 2 * sketch.alpha
    surely_below = int(np.sum(values <= threshold / width))
    possibly_below = int(np.sum(values <= threshold * width))
    assert surely_below <= counted <= possibly_below


@settings(max_examples=60, deadline=None)
@given(
    adversarial(),
    st.lists(st.floats(-1.0, 1e6, allow_nan=False) | st.sampled_from([0.0, 1e-12]), max_size=30),
)
def test_counts_at_most_answers_what_count_at_most_answers_per_threshold(values, thresholds):
    sketch = QuantileSketch.of(values)
    assert sketch.counts_at_most(thresholds) == [sketch.count_at_most(t) for t in thresholds]
    assert QuantileSketch().counts_at_most([0.5, -1.0]) == [0, 0]


def test_remembered_quantiles_follow_the_sketch_as_it_changes():
    sketch = QuantileSketch.of(np.linspace(0.1, 1.0, 100))
    before = sketch.quantiles([0.5, 0.99])
    assert sketch.quantiles([0.5, 0.99]) == before  # the remembered answer
    sketch.merge(QuantileSketch.of(np.full(300, 50.0)))
    assert sketch.quantiles([0.5, 0.99]) == QuantileSketch.of(
        np.r_[np.linspace(0.1, 1.0, 100), np.full(300, 50.0)]
    ).quantiles([0.5, 0.99])
    sketch.add_many([1e4] * 1000)
    assert sketch.quantile(0.99) == pytest.approx(1e4, rel=0.01)


def test_grouped_build_of_a_wide_sparse_grid_equals_one_sketch_per_group():
    # Many groups and values spread over sixteen decades: the (group, bucket) grid is far
    # larger than the values, so the buckets are found by sorting rather than counting.
    rng = np.random.default_rng(5)
    values = 10.0 ** rng.uniform(-8, 8, 300)
    values[:7] = 0.0
    values[7:20] = np.nan
    ids = rng.integers(0, 180, values.size)
    built = sketches_by_group(ids, values, 180)
    for g in range(180):
        mine = values[(ids == g) & ~np.isnan(values)]
        assert (built[g] == QuantileSketch.of(mine)) if mine.size else built[g] is None
