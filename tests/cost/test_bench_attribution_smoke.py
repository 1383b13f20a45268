"""``bench_attribution`` runs end to end on a small data set (figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks import run_bench


def test_the_attribution_benchmark_runs_and_reports_every_ratio(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_attribution",
        *("--rounds", "2", "--batches", "1", "--batch", "40"),
        figures=tmp_path / "attribution.json",
    )
    assert "round 2 (" in ran.out
    figures = ran.figures
    assert figures["store"] == "sqlite"
    for ratio in ("unused/bare", "labelled/bare", "first/labelled", "late/labelled"):
        assert len(figures[ratio]["rounds"]) == 2
        assert figures[ratio]["median"] > 0
