"""The dashboard benchmark still runs end to end (a tiny data set; figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import run_bench
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.mark.postgres
def test_dashboard_benchmark_times_every_page(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_dashboard",
        *("--postgres", POSTGRES_ADMIN_URL, "--quick"),
        figures=tmp_path / "dashboard.json",
    )  # fmt: skip
    results = ran.figures
    assert "target: every page P95 < 300 ms" in ran.out
    # Every page the benchmark times (its ``PAGES``) besides the API reference it times them by.
    pages = [page for page in results["range_30d_ms"] if page != "reference"]
    assert pages
    for page in pages:
        assert f"/ui/{page}" in ran.out
        assert results["range_30d_ms"][page]["p50"] > 0
    # The concurrent case: the same pages while the evaluation job and a writer run.
    concurrent = results["concurrent"]
    assert "quiet vs while the jobs run and a writer writes" in ran.out
    assert set(concurrent["pages_ms"]) == {*pages, "reference"}
    background = concurrent["background"]
    assert background["cold_cycle_s"] > 0
    assert background["batches_written"] > 0
    assert "skipped runs" in ran.out
