"""The engines of data-parallel servers as stored and read back, on SQLite and PostgreSQL:
summaries with the hot engine marked, chart buckets, and the diagnosis signals that keep
reading the instance's figures (plus the hottest engine's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.samples import EngineSample, ServerSample, combine_engines
from infersight.core.window import Window
from infersight.storage import server_engines, signals
from infersight.storage.writer import open_writer
from tests.factories import make_records

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
WINDOW = Window(START, START + timedelta(minutes=10))


def sample(at: datetime, instance: str, usages: list[float], running: float = 4.0) -> ServerSample:
    engines = tuple(
        EngineSample(str(i), requests_running=running, requests_waiting=float(i), kv_cache_usage=u)
        for i, u in enumerate(usages)
    )
    whole = {"requests_running": running * len(usages), "requests_waiting": 1.0}
    return ServerSample(
        ts=at,
        instance=instance,
        engine="vllm",
        per_engine=engines if len(engines) > 1 else (),
        **combine_engines(
            engines if len(engines) > 1 else (), {**whole, "kv_cache_usage": usages[0]}
        ),
    )


def fill(store) -> None:
    writer = open_writer(store.engine)
    samples = []
    for k in range(40):  # every 15 s for 10 minutes
        at = START + timedelta(seconds=15 * k)
        hot = 0.9 if k >= 20 else 0.5  # engine 0 heats up half-way
        samples.append(sample(at, "dp", [hot, 0.3]))
        samples.append(sample(at, "single", [0.6]))
    assert writer.write_server_samples(samples) == 80


def test_summaries_list_each_engine_of_data_parallel_servers_and_mark_the_hot_one(store) -> None:
    fill(store)
    got = server_engines.engine_summaries(store.engine, WINDOW)
    assert [(s.instance, s.rank) for s in got] == [("dp", "0"), ("dp", "1")]  # no "single"
    e0, e1 = got
    assert e0.samples == e1.samples == 40
    assert e0.kv_cache_usage == pytest.approx(0.7)
    assert (e0.kv_cache_usage_max, e1.kv_cache_usage_max) == (pytest.approx(0.9), 0.3)
    assert (e0.requests_waiting, e1.requests_waiting) == (0.0, 1.0)
    assert (e0.hot, e1.hot) == (True, False)  # 0.7 is 0.2 above their mean of 0.5
    assert server_engines.engine_summaries(store.engine, WINDOW, ["single"]) == []
    assert server_engines.engine_summaries(store.engine, WINDOW, []) == []


def test_engines_within_the_margin_are_not_hot(store) -> None:
    writer = open_writer(store.engine)
    writer.write_server_samples([sample(START, "even", [0.55, 0.5, 0.45, 0.5])])
    got = server_engines.engine_summaries(store.engine, WINDOW)
    assert [s.rank for s in got] == ["0", "1", "2", "3"]
    assert not any(s.hot for s in got)


def test_series_average_each_engine_per_bucket(store) -> None:
    fill(store)
    got = server_engines.engine_series(store.engine, WINDOW, 300)
    assert [(b.bucket, b.rank) for b in got] == [
        (START, "0"),
        (START, "1"),
        (START + timedelta(minutes=5), "0"),
        (START + timedelta(minutes=5), "1"),
    ]
    assert [b.kv_cache_usage for b in got] == [
        pytest.approx(0.5),
        pytest.approx(0.3),
        pytest.approx(0.9),
        pytest.approx(0.3),
    ]
    with pytest.raises(ValueError, match="step_s"):
        server_engines.engine_series(store.engine, WINDOW, 0)


def test_diagnosis_signals_read_the_instance_mean_and_the_hottest_engine(store) -> None:
    fill(store)
    writer = open_writer(store.engine)
    writer.write_requests(
        make_records(
            np.random.default_rng(5),
            START,
            200,
            span=timedelta(minutes=9),
            instances=("dp", "single"),
        )
    )
    got = signals.window_signals(store.engine, WINDOW).by_instance()
    dp, single = got["dp"].values, got["single"].values
    assert dp["kv_cache_usage"] == pytest.approx((0.7 + 0.3) / 2)  # never the sum
    assert dp["kv_cache_usage_max"] == pytest.approx(0.7)
    assert dp["requests_running"] == pytest.approx(8.0)  # counts are summed
    assert single["kv_cache_usage"] == single["kv_cache_usage_max"] == pytest.approx(0.6)
