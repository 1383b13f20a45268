"""The recommender's store: recommendations recorded, the newest per model, a model's history,
and ScalingPolicy documents — on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest

from infersight.core.errors import InvalidInput, NotFound
from infersight.core.scaling import Recommendation, ScalingPolicy
from infersight.storage import scaling as scaling_store
from tests.conftest import Store
from tests.doubles import NOW

T0 = NOW.timestamp()


def rec(model: str, at: float, desired: int, stale: tuple[str, ...] = ()) -> Recommendation:
    return Recommendation(
        model=model,
        at=at,
        observed=2,
        desired=desired,
        predictive=desired,
        reactive=None,
        forecast_rps=3.5,
        driver="forecast",
        reason=f"forecast 3.5 req/s needs {desired} instances",
        stale=stale,
    )


def test_a_recorded_recommendation_reads_back_unchanged(store: Store) -> None:
    first = rec("llama-8b", T0, 3, stale=("gpu_util",))
    scaling_store.record(store.engine, first)
    assert scaling_store.latest(store.engine) == [first]


def test_latest_answers_the_newest_recommendation_of_every_model(store: Store) -> None:
    for i in range(5):
        scaling_store.record(store.engine, rec("llama-8b", T0 + 60 * i, 2 + i))
        scaling_store.record(store.engine, rec("llama-70b", T0 + 30 * i, 10 - i))
    found = {r.model: (r.at, r.desired) for r in scaling_store.latest(store.engine)}
    assert found == {"llama-70b": (T0 + 120, 6), "llama-8b": (T0 + 240, 6)}


def test_history_is_a_model_s_recommendations_in_the_range_oldest_first(store: Store) -> None:
    for i in range(10):
        scaling_store.record(store.engine, rec("llama-8b", T0 + 60 * i, i + 1))
    scaling_store.record(store.engine, rec("other", T0 + 60, 9))
    found = scaling_store.history(
        store.engine, "llama-8b", NOW + timedelta(minutes=2), NOW + timedelta(minutes=5)
    )
    assert [r.desired for r in found] == [3, 4, 5]
    with pytest.raises(InvalidInput, match="end must be after"):
        scaling_store.history(store.engine, "llama-8b", NOW, NOW)


def test_recording_twice_at_one_time_replaces_and_old_rows_are_pruned(store: Store) -> None:
    scaling_store.record(store.engine, rec("llama-8b", T0, 2))
    scaling_store.record(store.engine, rec("llama-8b", T0, 4))
    later = T0 + scaling_store.KEEP.total_seconds() + 60
    scaling_store.record(store.engine, rec("llama-8b", later, 5))
    found = scaling_store.history(
        store.engine, "llama-8b", NOW - timedelta(days=1), NOW + timedelta(days=60)
    )
    assert [(r.at, r.desired) for r in found] == [(later, 5)]


def test_policies_are_stored_by_name_and_one_model_has_at_most_one(store: Store) -> None:
    policy = ScalingPolicy(name="chat", model="llama-8b", min_replicas=2, lead_time_s=720.0)
    assert scaling_store.put_policy(store.engine, policy, NOW) is True
    assert scaling_store.put_policy(store.engine, policy, NOW) is False
    assert scaling_store.get_policy(store.engine, "chat") == policy
    default = ScalingPolicy(name="fleet", model=None)
    scaling_store.put_policy(store.engine, default, NOW)
    assert scaling_store.list_policies(store.engine) == [policy, default]
    with pytest.raises(InvalidInput, match="already applies to model 'llama-8b'"):
        scaling_store.put_policy(store.engine, ScalingPolicy("chat-2", "llama-8b"), NOW)
    scaling_store.delete_policy(store.engine, "chat")
    with pytest.raises(NotFound, match="no scaling policy named 'chat'"):
        scaling_store.get_policy(store.engine, "chat")
