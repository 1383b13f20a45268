"""``core.store_capacity`` against a real store: ``bench/bench_store_size.py --quick`` writes a
known fleet span through the real writers into a fresh PostgreSQL database; the model's rows
per table must equal the counts exactly and its bytes lie within 30 % of the compacted sizes,
so the constants in ``docs/capacity.md`` cannot rot unnoticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from infersight.core import store_capacity
from infersight.core.retention import RetentionPolicy
from infersight.storage.tables import PARTITIONED
from tests.benchmarks import run_bench
from tests.conftest import POSTGRES_ADMIN_URL


def test_the_model_sizes_the_stores_partitions_and_retention() -> None:
    assert set(store_capacity.PARTITIONED_TABLES) == set(PARTITIONED)
    policy = RetentionPolicy(raw_days=7, minute_days=7, hour_days=30, day_days=400)
    fleet = store_capacity.Fleet(requests_per_s=50.0, instances=4)
    shorter, longer = store_capacity.load(fleet, policy), store_capacity.load(fleet)
    assert shorter.kept_bytes < longer.kept_bytes


@pytest.mark.postgres
def test_the_model_predicts_the_rows_and_bytes_of_a_written_fleet(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_store_size", "--quick", "--postgres", POSTGRES_ADMIN_URL,
        figures=tmp_path / "size.json",
    )  # fmt: skip
    tables = ran.figures["tables"]
    assert set(tables) >= {"requests", "request_rollups", "gpu_samples", "gpu_rollups"}
    for name, t in tables.items():
        assert t["rows"] > 0, name
        assert t["model_rows"] == t["rows"], name
        assert 0.7 <= t["bytes_ratio"] <= 1.3, (name, t)
