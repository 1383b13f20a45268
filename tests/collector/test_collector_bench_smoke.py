"""The collector benchmark still runs end to end (tiny sizes; figures are not asserted)."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_bench


@pytest.mark.slow
def test_the_collector_benchmark_runs_and_prints_every_figure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = load_bench("bench_collector")
    affinity = module.os.sched_getaffinity(0)
    try:
        tiny = "--payloads 2 --spans 50 --repeats 1 --seconds 1 --senders 1 --no-postgres"
        results = module.main(tiny.split())
    finally:
        module.os.sched_setaffinity(0, affinity)  # the benchmark pins itself to a core
    out = capsys.readouterr().out
    assert "reference: bare protobuf decode" in out
    assert "end to end OTLP/HTTP → spool" in out
    assert results["http"] > 0
    assert results["decode"] > results["pipeline"] > 0
    assert results["pipeline_cpu"] > 0
