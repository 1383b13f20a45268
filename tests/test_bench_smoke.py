"""The storage benchmark and the diagnosis matrix still run end to end (a tiny data set, the
matrix's smoke cell; figures are not asserted)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bench.harness import diagnosis_matrix
from tests.benchmarks import run_bench
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.mark.postgres
def test_storage_benchmark_runs_and_reports_every_figure(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_storage",
        *("--postgres", POSTGRES_ADMIN_URL, "--days", "1", "--rpm", "5", "--ingest-records",
          "1500", "--batch", "500", "--repeats", "2"),
        figures=tmp_path / "storage.json",
    )  # fmt: skip
    results = ran.figures
    assert "reference: raw binary COPY" in ran.out
    assert 1440 * 5 - 20 < results["query"]["requests"] <= 1440 * 5  # the window starts 17 s in
    assert results["query"]["max_relative_error"] <= 0.01
    assert results["ingest"]["postgres_writer_per_s"] > 0


@pytest.mark.e2e
def test_the_diagnosis_matrix_smoke_cell_runs_through_the_real_path(tmp_path: Path) -> None:
    """``bench_diagnosis --quick``: one cell with every adversarial shape (no GPU samples, two
    engines per instance, client spans in the server's trace, a fault that clears) from the
    simulator through sidecars, scrapes and the API's jobs to the printed table."""
    saved = tmp_path / "matrix.json"
    ran = run_bench("bench_diagnosis", "--quick", figures=saved)
    [outcome] = ran.figures
    assert f"cell {outcome['cell']}" in ran.out  # the progress line
    assert "top-1 right at page time (single faults):" in ran.out
    assert "GPU telemetry off" in ran.out
    assert outcome["engines"] == 2
    assert outcome["client_spans"]
    assert not outcome["gpu"]
    assert outcome["sent"] > 500
    assert outcome["stored"] == outcome["sent"]  # client spans are not requests, none was lost
    seen = outcome["incidents"]
    assert seen, "the starved host did not page"
    assert all(s["paged"] for s in seen)
    # 20 minutes after the fault cleared its incident has resolved, keeping the page's cause.
    assert all(s["state"] == "resolved" for s in seen)
    assert all(s["final"].get("cause") == s["paged"].get("cause") for s in seen)
    # The saved run is read back and judged again to the same verdict ...
    [again] = diagnosis_matrix.rejudged(ran.figures)
    assert [dataclasses.asdict(s) for s in again.seen] == seen
    assert list(again.problems) == outcome["problems"]
    # ... and ``--table`` prints the tables of the run from it.
    table = run_bench("bench_diagnosis", "--table", saved)
    assert table.out.strip()
    assert table.out in ran.out


@pytest.mark.postgres
def test_fleet_benchmark_quick_run_prints_the_fleet_table(tmp_path: Path) -> None:
    """``bench_fleet --quick``: N = 1, 2 sidecar processes (real spool and shipper) into a
    throwaway PostgreSQL database, the table printed and its figures sane."""
    ran = run_bench(
        "bench_fleet", "--quick", "--modes", "direct", "--postgres", POSTGRES_ADMIN_URL,
        figures=tmp_path / "fleet.json",
    )  # fmt: skip
    assert "reference: raw binary COPY" in ran.out
    rows = {row["n"]: row for row in ran.figures["fleet"]}
    assert set(rows) == {1, 2}
    for n, row in rows.items():
        assert row["mode"] == "direct"
        assert row["steps"], "no step ran"
        first = row["steps"][0]
        assert first["connections"] >= n  # one pooled connection per sidecar
        assert 0.0 <= first["pg_cpu"] <= 1.0
        assert first["p99_ack_visible_s"] is None or first["p99_ack_visible_s"] >= 0.0
        assert first["acked_per_s"] > 0
    assert ran.figures["references"]["copy_per_s"] > 0


@pytest.mark.postgres
def test_fault_benchmark_runs_its_fastest_row_and_prints_the_table(tmp_path: Path) -> None:
    """``bench_faults --only login``: a live ``serve`` over a throwaway PostgreSQL database,
    300 wrong tokens, the one-row table printed (``--report-only``: whatever the verdict)."""
    ran = run_bench(
        "bench_faults", "--only", "login", "--report-only", "--postgres-url", POSTGRES_ADMIN_URL,
        figures=tmp_path / "faults.json",
    )  # fmt: skip
    [row] = ran.figures["rows"]
    assert row["fault"].startswith("login brute force")
    assert "| login brute force" in ran.out
    assert "rows meet their target" in ran.out
    assert "'401'" in row["measured"] or "'429'" in row["measured"]  # every attempt answered
