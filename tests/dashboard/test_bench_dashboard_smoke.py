"""The dashboard benchmark still runs end to end (a tiny data set; figures are not asserted)."""

from __future__ import annotations

import pytest

from tests.benchmarks import load_bench
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.mark.postgres
def test_dashboard_benchmark_times_every_page(capsys):
    module = load_bench("bench_dashboard")
    results = module.main(
        ["--postgres", POSTGRES_ADMIN_URL, "--days", "1", "--rpm", "2", "--repeats", "1",
         "--gpu-interval", "600"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "target: every page P95 < 300 ms" in out
    for page in module.PAGES:
        assert f"/ui/{page}" in out
        assert results["range_30d_ms"][page]["p50"] > 0
