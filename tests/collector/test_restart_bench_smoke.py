"""The restart benchmark still runs end to end (one cycle, a tiny export; not asserted)."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_bench


@pytest.mark.slow
@pytest.mark.e2e
def test_the_restart_benchmark_runs_and_prints_every_figure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = load_bench("bench_restart").main(["--runs", "1", "--spans", "10"])
    out = capsys.readouterr().out
    assert "reference: python -c pass" in out
    assert "restart → first acknowledged export" in out
    ack = results["ack"]
    assert isinstance(ack, list)
    assert len(ack) == 1
    assert ack[0] > 0
