"""The reader benchmark still runs end to end: real ``serve --workers 1`` and ``2`` processes
on a tiny data set, a few clients for a moment each (figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks import run_bench
from tests.conftest import POSTGRES_ADMIN_URL


@pytest.mark.postgres
@pytest.mark.e2e
def test_reader_benchmark_runs_and_reports_every_figure(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_readers",
        *("--postgres", POSTGRES_ADMIN_URL, "--quick"),
        figures=tmp_path / "readers.json",
    )  # fmt: skip
    results = ran.figures
    configs = results["configs"]
    assert [(c["workers"], c["answer_ttl_s"] > 0) for c in configs] == [
        (1, True), (2, True), (2, False),
    ]  # fmt: skip
    for config in configs:
        assert set(config["reference_ms"]) == {"latency", "cost", "overview"}
        assert [p["clients"] for p in config["phases"]] == [2, 4]
        for phase in config["phases"]:
            assert phase["answers"] > 0
            assert not phase["errors"], phase["errors"]
            assert all(t["count"] > 0 for t in phase["targets"].values())
            assert phase["workers_seen"] == config["workers"]
            assert phase["skipped"] >= 0
        assert config["writer"]["batches_written"] >= 0
    assert results["verdict"] == {}  # no 16-client phase in a quick run
    assert "today (issue 19, 1 process, no cache): 16 clients 4.5 req/s" in ran.out
    assert "reference, each request alone" in ran.out
    assert "evaluations done/skipped" in ran.out
