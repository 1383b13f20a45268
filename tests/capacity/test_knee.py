"""Knee detection on step-run curves whose knee is known by construction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.core.errors import InvalidInput
from infersight.core.knee import LevelPoint, find_knee


def saturating(levels: list[int], knee: int, per_user: float = 2.0, service_s: float = 0.5):
    """A closed loop against a server with ``knee`` batch slots: throughput grows one for one
    until the batch is full, then stays flat while latency grows with the queue."""
    points = []
    for c in levels:
        throughput = per_user * min(c, knee)
        points.append(LevelPoint(c, throughput, max(service_s, c / throughput)))
    return points


def test_the_knee_of_a_saturating_server_is_its_batch_capacity() -> None:
    knee = find_knee(saturating([2, 4, 6, 8, 10, 12, 14, 16], 8))
    assert knee is not None
    assert knee.concurrency == 8
    assert knee.throughput_rps == 16
    assert knee.latency_growth == pytest.approx(2.0)  # 16 users queue behind 8 slots


def test_a_curve_still_rising_in_a_straight_line_has_no_knee() -> None:
    assert find_knee(saturating([1, 2, 4, 8], 64)) is None


def test_a_server_saturated_from_the_first_level_has_no_knee() -> None:
    assert find_knee(saturating([8, 16, 32], 4)) is None


def test_noise_does_not_move_the_knee() -> None:
    points = saturating([2, 4, 6, 8, 10, 12, 14, 16], 8)
    wobble = [1.03, 0.97, 1.02, 0.98, 1.04, 0.96, 1.03, 0.97]
    noisy = [
        LevelPoint(p.concurrency, p.throughput_rps * w, p.latency_s)
        for p, w in zip(points, wobble, strict=True)
    ]
    knee = find_knee(noisy)
    assert knee is not None
    assert knee.concurrency == 8


@given(knee=st.integers(3, 30), top=st.integers(2, 4))
def test_the_knee_is_found_wherever_it_is(knee: int, top: int) -> None:
    levels = sorted({1, *range(2, knee * top + 1, max(1, knee // 3)), knee})
    found = find_knee(saturating(levels, knee))
    assert found is not None
    assert found.concurrency == knee


@pytest.mark.parametrize(
    "points",
    [
        pytest.param(saturating([1, 2], 1), id="two levels are too few"),
        pytest.param(saturating([1, 2, 2], 1), id="a concurrency given twice"),
    ],
)
def test_unusable_step_runs_are_refused(points) -> None:
    with pytest.raises(InvalidInput):
        find_knee(points)


def test_a_level_with_a_negative_latency_is_refused() -> None:
    with pytest.raises(InvalidInput):
        LevelPoint(1, 1.0, -0.1)
