"""The stage breakdown's shares: whatever the totals, they add up to at most 100 %."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.core.query import STAGES, breakdown_of

seconds = st.floats(0.0, 1e6, allow_nan=False)
totals = st.dictionaries(st.sampled_from(STAGES), st.tuples(st.integers(1, 10_000), seconds))


@given(st.integers(1, 10_000), seconds, totals)
def test_shares_add_up_to_at_most_one_whatever_the_stage_totals(
    count: int, e2e: float, stages: dict[str, tuple[int, float]]
) -> None:
    b = breakdown_of({}, (count, e2e), stages)
    shares = [s.share for s in b.stages if s.share is not None]
    assert all(0.0 <= s <= 1.0 for s in shares)
    assert sum(shares) <= 1.0 + 1e-9
    assert 0.0 <= b.scaled_by <= 1.0
    if b.unaccounted_share is not None:
        assert b.unaccounted_share == pytest.approx(max(0.0, 1.0 - sum(shares)), abs=1e-9)
    assert {s.stage: s.seconds_total for s in b.stages if s.stage in stages} == {
        stage: total for stage, (_, total) in stages.items()
    }


def test_stages_within_the_end_to_end_time_keep_their_plain_shares() -> None:
    b = breakdown_of({}, (10, 10.0), {"queue": (10, 1.0), "decode": (10, 6.0)})
    shares = {s.stage: s.share for s in b.stages}
    assert shares["queue"] == pytest.approx(0.1)
    assert shares["decode"] == pytest.approx(0.6)
    assert shares["gateway"] is None
    assert b.scaled_by == 1.0
    assert b.unaccounted_share == pytest.approx(0.3)


def test_overlapping_stages_are_scaled_together_and_a_gateway_adds_its_own_time() -> None:
    # The case: stages adding up to 141 % of the end-to-end time.
    b = breakdown_of(
        {}, (10, 10.0), {"preprocess": (10, 4.19), "decode": (10, 9.91), "gateway": (5, 0.5)}
    )
    shares = {s.stage: s.share for s in b.stages}
    assert b.scaled_by == pytest.approx(10.0 / 14.1)
    assert shares["gateway"] == pytest.approx(0.5 / 10.5)
    assert shares["preprocess"] == pytest.approx(4.19 * (10.0 / 14.1) / 10.5)
    assert sum(s for s in shares.values() if s) == pytest.approx(1.0)
    assert b.unaccounted_share == pytest.approx(0.0, abs=1e-12)
