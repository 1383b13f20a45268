"""Baselines in the store: saved whole, listed, replaced only on request, on both databases."""

from __future__ import annotations

import numpy as np
import pytest

from bench.harness.baselines import synthetic_run
from infersight.core.baseline import renamed
from infersight.core.errors import Conflict, NotFound
from infersight.storage.baselines import (
    delete_baseline,
    get_baseline,
    list_baselines,
    save_baseline,
)


def test_a_saved_baseline_reads_back_equal_with_its_distribution(store):
    baseline = synthetic_run(np.random.default_rng(1), "release-1.4")
    assert save_baseline(store.engine, baseline) is True
    again = get_baseline(store.engine, "release-1.4")
    assert again == baseline
    sketch = again.latency["ttft"].distribution()
    assert sketch is not None
    assert sketch.count == baseline.latency["ttft"].count


def test_a_name_is_replaced_only_when_asked(store):
    first = synthetic_run(np.random.default_rng(2), "nightly")
    second = synthetic_run(np.random.default_rng(3), "nightly", slowdown=1.2)
    save_baseline(store.engine, first)
    with pytest.raises(Conflict):
        save_baseline(store.engine, second)
    assert save_baseline(store.engine, second, replace=True) is False
    assert get_baseline(store.engine, "nightly") == second


def test_listing_is_newest_first_and_delete_removes(store):
    rng = np.random.default_rng(4)
    older = synthetic_run(rng, "a", requests=200)
    newer = renamed(synthetic_run(rng, "b", requests=200), "b")
    newer = type(newer)(
        **{
            **{f: getattr(newer, f) for f in newer.__dataclass_fields__},
            "created_at": older.created_at.replace(hour=13),
        }
    )
    save_baseline(store.engine, older)
    save_baseline(store.engine, newer)
    assert [b.name for b in list_baselines(store.engine)] == ["b", "a"]
    delete_baseline(store.engine, "b")
    assert [b.name for b in list_baselines(store.engine)] == ["a"]
    with pytest.raises(NotFound):
        delete_baseline(store.engine, "b")
    with pytest.raises(NotFound):
        get_baseline(store.engine, "b")
