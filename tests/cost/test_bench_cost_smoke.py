"""The cost benchmark still runs end to end (a tiny data set; figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import run_bench
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.mark.postgres
def test_cost_benchmark_runs_and_reports_every_figure(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_cost",
        *("--postgres", POSTGRES_ADMIN_URL, "--days", "0.25", "--instances", "1", "--gpus", "1",
          "--sample-s", "300", "--rpm", "2", "--repeats", "1"),
        figures=tmp_path / "cost.json",
    )  # fmt: skip
    results = ran.figures
    assert "reference: a plain scan of the GPU samples" in ran.out
    assert results["gpu_samples"] == 72
    assert results["requests"] == 720
    for store in ("postgres", "sqlite"):
        assert results[store]["cost_s"] > 0
        assert results[store]["weekly_report_s"] > 0
