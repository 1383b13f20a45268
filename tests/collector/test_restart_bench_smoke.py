"""The restart benchmark still runs end to end (one cycle, a tiny export; not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import run_bench


@pytest.mark.slow
@pytest.mark.e2e
def test_the_restart_benchmark_runs_and_prints_every_figure(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_restart", "--runs", "1", "--spans", "10", figures=tmp_path / "restart.json"
    )
    assert "reference: python -c pass" in ran.out
    assert "restart → first acknowledged export" in ran.out
    ack = ran.figures["ack"]
    assert isinstance(ack, list)
    assert len(ack) == 1
    assert ack[0] > 0
