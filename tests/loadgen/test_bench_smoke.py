"""The load-generator benchmark still runs end to end (a second each; figures not asserted)."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_bench

pytestmark = pytest.mark.e2e


def test_loadgen_benchmark_runs_and_reports_every_figure(capsys):
    results = load_bench("bench_loadgen").main(
        ["--users", "2", "--seconds", "1", "--tokens", "8", "--repeats", "1"]
    )
    out = capsys.readouterr().out
    assert "reference: bare httpx loop" in out
    assert results["errors"] == 0
    assert results["bare_rps"] > 0
    assert results["loadgen_rps"] > 0
    assert results["generator"]["samples"] > 0
