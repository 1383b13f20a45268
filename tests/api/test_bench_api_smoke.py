"""The API benchmark still runs end to end (a tiny data set; figures are not asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_ADMIN_URL

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_api.py"


@pytest.mark.postgres
def test_api_benchmark_runs_and_reports_every_figure(capsys):
    spec = importlib.util.spec_from_file_location("bench_api", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_api"] = module
    spec.loader.exec_module(module)
    results = module.main(
        ["--postgres", POSTGRES_ADMIN_URL, "--days", "1", "--rpm", "3", "--repeats", "3",
         "--slos", "8", "--cycles", "1"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "target P95 < 100 ms" in out.replace("target: ", "target ")
    assert "(target < 1 s)" in out
    assert results["latency_endpoint_ms"]["p95"] > 0
    assert results["evaluation_cycle_s"]["median"] > 0
