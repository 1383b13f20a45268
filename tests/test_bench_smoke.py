"""The storage benchmark still runs end to end (a tiny data set; figures are not asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_ADMIN_URL

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_storage.py"


@pytest.mark.postgres
def test_storage_benchmark_runs_and_reports_every_figure(capsys):
    spec = importlib.util.spec_from_file_location("bench_storage", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_storage"] = module
    spec.loader.exec_module(module)
    results = module.main(
        ["--postgres", POSTGRES_ADMIN_URL, "--days", "1", "--rpm", "5", "--ingest-records", "1500",
         "--batch", "500", "--repeats", "2"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "reference: raw binary COPY" in out
    assert 1440 * 5 - 20 < results["query"]["requests"] <= 1440 * 5  # the window starts 17 s in
    assert results["query"]["max_relative_error"] <= 0.01
    assert results["ingest"]["postgres_writer_per_s"] > 0
