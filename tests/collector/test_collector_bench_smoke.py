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


@pytest.mark.slow
def test_the_hostile_input_benchmark_runs_every_class_against_a_live_sidecar(
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = load_bench("bench_hostile")
    results = module.main(["--quick"])
    out = capsys.readouterr().out
    assert "reference (idle): /healthz max" in out
    answers = results["answers"]
    assert results["alive"]  # the sidecar survived every input
    assert answers["legit 512 spans"] == answers["legit 512 gzip"] == "200"
    assert answers["gzip members"] == "400"
    assert answers["nesting"] == "400"
    for label in ("gzip bomb", "dense protobuf", "dense gzip", "dense json", "oversize"):
        assert answers[label] == "413", label
    assert answers["dense grpc"] == answers["dense grpc 1MB"] == "RESOURCE_EXHAUSTED"
    assert answers["json bounded worst"] == "200"
    assert answers["far timestamps"].startswith("200")
    assert all(row.healthz_failures == 0 for row in results["rows"])
