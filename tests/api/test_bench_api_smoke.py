"""The API benchmark still runs end to end (a tiny data set; figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import run_bench
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.mark.postgres
def test_api_benchmark_runs_and_reports_every_figure(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_api",
        *("--postgres", POSTGRES_ADMIN_URL, "--quick"),
        figures=tmp_path / "api.json",
    )  # fmt: skip
    results = ran.figures
    assert "target P95 < 100 ms" in ran.out.replace("target: ", "target ")
    assert "(target < 1 s)" in ran.out
    assert results["latency_endpoint_ms"]["p95"] > 0
    assert results["evaluation_cycle_s"]["median"] > 0
    concurrent = results["concurrent"]
    assert set(concurrent["endpoints_ms"]) == {"latency-30d", "slos", "metrics"}
    assert concurrent["endpoints_ms"]["metrics"]["concurrent"]["p99"] > 0
    assert concurrent["background"]["cold_cycle_s"] > 0
    assert concurrent["background"]["batches_written"] > 0
    assert "first (cold cache) cycle" in ran.out
