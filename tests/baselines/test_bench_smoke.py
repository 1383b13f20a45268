"""The baseline benchmark still runs end to end (tiny sizes; figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks import run_bench


def test_baseline_benchmark_runs_and_reports_every_figure(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_baseline",
        *("--sizes", "400", "--resamples", "200", "--seeds", "2", "--requests", "400"),
        figures=tmp_path / "baseline.json",
    )
    results = ran.figures
    assert "reference: bootstrap over raw per-request values" in ran.out
    assert results["speed"][0]["requests"] == 400
    assert results["speed"][0]["ci_width_ratio"] > 0
    assert set(results["gate"]) == {"same", "+3%", "-3%", "+15%"}
    assert sum(results["gate"]["+3%"].values()) == 2
