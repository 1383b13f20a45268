"""The load-generator benchmark still runs end to end (a second each; figures not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import run_bench

pytestmark = pytest.mark.e2e


def test_loadgen_benchmark_runs_and_reports_every_figure(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_loadgen",
        *("--users", "2", "--seconds", "1", "--tokens", "8", "--repeats", "1"),
        figures=tmp_path / "loadgen.json",
    )
    results = ran.figures
    assert "reference: bare httpx loop" in ran.out
    assert results["errors"] == 0
    assert results["bare_rps"] > 0
    assert results["loadgen_rps"] > 0
    assert results["generator"]["samples"] > 0


def test_the_max_rate_benchmark_drives_the_simulator_with_both_engines(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_loadgen",
        *("--max-rate", "--through", "--levels", "2", "--seconds", "2", "--workers", "2"),
        figures=tmp_path / "max-rate.json",
    )
    results = ran.figures
    assert "reference: one asyncio process" in ran.out
    for engine in ("asyncio", "locust"):
        (level,) = results["levels"][engine]
        assert level["users"] == 2
        assert level["rps"] > 0
        assert level["errors"] == 0
    assert results["max_rps_driven"]["locust"] > 0
