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


@pytest.mark.e2e
def test_the_diagnosis_matrix_smoke_cell_runs_through_the_real_path(capsys, tmp_path):
    """``bench_diagnosis --quick``: one cell with every adversarial shape (no GPU samples, two
    engines per instance, client spans in the server's trace, a fault that clears) from the
    simulator through sidecars, scrapes and the API's jobs to the printed table."""
    module = load_bench("bench_diagnosis")
    saved = tmp_path / "matrix.json"
    [outcome] = module.main(["--quick", "--json", str(saved)])
    out = capsys.readouterr().out
    assert f"cell {outcome.cell.name}" in out  # the progress line
    assert "top-1 right at page time (single faults):" in out
    assert "GPU telemetry off" in out
    assert outcome.cell.engines == 2
    assert outcome.cell.client
    assert not outcome.cell.gpu
    assert outcome.sent > 500
    assert outcome.stored == outcome.sent  # client spans are not requests, none was lost
    assert outcome.seen, "the starved host did not page"
    assert all(s.paged for s in outcome.seen)
    # 20 minutes after the fault cleared its incident has resolved, keeping the page's cause.
    assert all(s.state == "resolved" for s in outcome.seen)
    assert all(s.final.get("cause") == s.paged.get("cause") for s in outcome.seen)
    # The saved run is read back and judged again to the same verdict.
    [again] = module.main(["--table", str(saved)])
    assert again.seen == outcome.seen
    assert again.problems == outcome.problems
