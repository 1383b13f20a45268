"""The collector benchmark still runs end to end (tiny sizes; figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import run_bench


@pytest.mark.slow
def test_the_collector_benchmark_runs_and_prints_every_figure(tmp_path: Path) -> None:
    tiny = "--payloads 2 --spans 50 --repeats 1 --seconds 1 --senders 1 --no-postgres"
    ran = run_bench("bench_collector", *tiny.split(), figures=tmp_path / "collector.json")
    results = ran.figures
    assert "reference: bare protobuf decode" in ran.out
    assert "end to end OTLP/HTTP → spool" in ran.out
    assert results["http"] > 0
    assert results["decode"] > results["pipeline"] > 0
    assert results["pipeline_cpu"] > 0


@pytest.mark.slow
def test_the_hostile_input_benchmark_runs_every_class_against_a_live_sidecar(
    tmp_path: Path,
) -> None:
    ran = run_bench("bench_hostile", "--quick", figures=tmp_path / "hostile.json")
    results = ran.figures
    assert "reference (idle): /healthz max" in ran.out
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
    assert all(row["healthz_failures"] == 0 for row in results["rows"])
