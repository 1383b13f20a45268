"""The storage benchmark still runs end to end (a tiny data set; figures are not asserted)."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_bench
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.mark.postgres
def test_storage_benchmark_runs_and_reports_every_figure(capsys):
    module = load_bench("bench_storage")
    results = module.main(
        ["--postgres", POSTGRES_ADMIN_URL, "--days", "1", "--rpm", "5", "--ingest-records", "1500",
         "--batch", "500", "--repeats", "2"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "reference: raw binary COPY" in out
    assert 1440 * 5 - 20 < results["query"]["requests"] <= 1440 * 5  # the window starts 17 s in
    assert results["query"]["max_relative_error"] <= 0.01
    assert results["ingest"]["postgres_writer_per_s"] > 0
