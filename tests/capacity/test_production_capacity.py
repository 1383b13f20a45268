"""Capacity measured from production rollups: the busiest instance-minute within the targets."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.window import Window
from infersight.storage.capacity import production_capacity
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

T0 = datetime(2026, 11, 29, 10, tzinfo=UTC)


def minute(rng, start: datetime, count: int, instance: str, ttft: float, output: int):
    """``count`` successful requests of one instance within the minute from ``start``."""
    records = make_records(rng, start, count, span=timedelta(seconds=59), error_rate=0.0)
    return [
        dataclasses.replace(
            r, instance=instance, model="m", ttft_s=ttft * (1 + i % 3 / 100), output_tokens=output
        )
        for i, r in enumerate(records)
    ]


@pytest.fixture
def production(store: Store) -> Store:
    rng = np.random.default_rng(11)
    records = [
        *minute(rng, T0, 300, "gpu-a", 0.2, 100),  # 5 req/s, fast
        *minute(rng, T0 + timedelta(minutes=1), 600, "gpu-a", 0.3, 100),  # 10 req/s, fast
        *minute(rng, T0 + timedelta(minutes=2), 900, "gpu-a", 2.5, 100),  # 15 req/s, slow
        *minute(rng, T0 + timedelta(minutes=1), 480, "gpu-b", 0.2, 50),  # 8 req/s, fast
    ]
    open_writer(store.engine).write_requests(records)
    return store


WINDOW = Window(T0, T0 + timedelta(hours=1))


def test_the_busiest_minute_within_the_targets_is_the_capacity(production: Store) -> None:
    best = production_capacity(production.engine, WINDOW, Selector(), ttft_p99_max_s=1.0)
    assert best.throughput_rps == pytest.approx(10)
    assert best.mean_output_tokens == pytest.approx(100)
    assert best.phase.startswith("gpu-a at 2026-11-29 10:01")
    unconstrained = production_capacity(production.engine, WINDOW, Selector())
    assert unconstrained.throughput_rps == pytest.approx(15)
    only_b = production_capacity(production.engine, WINDOW, Selector(instance="gpu-b"))
    assert (only_b.throughput_rps, only_b.mean_output_tokens) == (pytest.approx(8), 50)


def test_no_minute_within_the_targets_is_a_clear_error(production: Store) -> None:
    with pytest.raises(InvalidInput, match="met the latency targets"):
        production_capacity(production.engine, WINDOW, Selector(), ttft_p99_max_s=0.01)


def test_the_capacity_endpoint_plans_from_production(production: Store, api) -> None:
    api.clock.now = T0 + timedelta(hours=1)
    query = {
        "model": "llama-3-8b",
        "gpu": "h100",
        "peak_qps": 100,
        "output_tokens": 200,
        "production": "2h",
        "production_model": "m",
        "ttft_target": 1.0,
        "tpot_target": 0.1,
    }
    response = api.get("/api/v1/capacity", params=query)
    assert response.status_code == 200, response.text
    instances = response.json()["instances"]
    # 10 req/s of 100-token answers sustained is 5 req/s of 200-token answers.
    assert instances["capacity_rps"] == pytest.approx(5)
    assert instances["count"] == 28  # ceil(100 × 1.4 / 5)
    assert "gpu-a" in instances["capacity_source"]
    assert response.json()["concurrency"]["source"] == "little's law at the targets"
