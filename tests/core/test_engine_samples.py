"""Properties of ``core.samples.combine_engines``: an instance's ratios stay within its
engines' range (never a sum past 1), its counts are the whole exposition's, and the hottest
engine is kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.core.samples import SERVER_METRIC_FIELDS, EngineSample, combine_engines

ratios = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
counts = st.floats(min_value=0.0, max_value=1e6, allow_nan=False)


@given(st.lists(st.tuples(ratios, ratios, counts), min_size=2, max_size=64), counts)
def test_ratios_are_the_engines_mean_and_counts_the_whole_expositions(engines, waiting) -> None:
    samples = tuple(
        EngineSample(str(i), kv_cache_usage=kv, prefix_cache_hit_ratio=hit, requests_running=n)
        for i, (kv, hit, n) in enumerate(engines)
    )
    whole = {
        "kv_cache_usage": min(1.0, sum(e[0] for e in engines)),  # what a sum would claim
        "requests_running": sum(e[2] for e in engines),
        "requests_waiting": waiting,
    }
    out = combine_engines(samples, whole)
    usages = [e[0] for e in engines]
    assert min(usages) - 1e-12 <= out["kv_cache_usage"] <= max(usages) + 1e-12
    assert out["kv_cache_usage"] == pytest.approx(sum(usages) / len(usages))
    assert out["kv_cache_usage_max"] == max(usages)
    assert out["prefix_cache_hit_ratio"] == pytest.approx(sum(e[1] for e in engines) / len(engines))
    assert (out["requests_running"], out["requests_waiting"]) == (
        whole["requests_running"],
        waiting,
    )
    assert set(out) == {*SERVER_METRIC_FIELDS, "kv_cache_usage_max"}


def test_engines_that_do_not_report_a_ratio_leave_it_to_those_that_do() -> None:
    out = combine_engines(
        (EngineSample("0", kv_cache_usage=0.2), EngineSample("1")), {"kv_cache_usage": 0.2}
    )
    assert (out["kv_cache_usage"], out["kv_cache_usage_max"]) == (0.2, 0.2)
    alone = combine_engines((), {"kv_cache_usage": 0.7})
    assert (alone["kv_cache_usage"], alone["kv_cache_usage_max"]) == (0.7, 0.7)
