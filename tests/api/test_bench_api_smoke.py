"""The API benchmark still runs end to end (a tiny data set; figures are not asserted)."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_bench
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.mark.postgres
def test_api_benchmark_runs_and_reports_every_figure(capsys):
    module = load_bench("bench_api")
    results = module.main(
        ["--postgres", POSTGRES_ADMIN_URL, "--days", "1", "--rpm", "3", "--repeats", "3",
         "--slos", "8", "--cycles", "1"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "target P95 < 100 ms" in out.replace("target: ", "target ")
    assert "(target < 1 s)" in out
    assert results["latency_endpoint_ms"]["p95"] > 0
    assert results["evaluation_cycle_s"]["median"] > 0
