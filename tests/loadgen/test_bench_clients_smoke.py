"""The client-tools benchmark still runs end to end (``--quick``: the built-in engines only,
two seconds each, through a real sidecar and store; figures not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmarks import ROOT, run_bench

pytestmark = pytest.mark.e2e


def test_the_clients_benchmark_joins_each_run_to_what_the_sidecar_stored(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_clients",
        *("--quick", "--tools-path", tmp_path / "no-tools"),
        figures=tmp_path / "clients.json",
    )
    rows = {row["client"]: row for row in ran.figures["clients"]}
    assert list(rows) == ["asyncio", "locust1"]
    assert "Client ↔ engine gap" in ran.out
    assert "| asyncio |" in ran.out
    for row in rows.values():
        assert row["status"] == "ok"
        sent = row["client_figures"]["requests"]
        assert sent > 0
        assert row["client_figures"]["errors"] == 0
        # The sidecar stored every request the client completed, in the client's own window ...
        assert row["server"]["requests"] >= sent
        # ... and each one, sent with a traceparent, joined its server record.
        assert row["gap"]["joined"] == row["gap"]["calls"] == sent
        assert row["server"]["ttft_p50"] > 0


def test_a_tool_that_is_not_installed_is_a_row_or_with_require_tools_an_error(
    tmp_path: Path,
) -> None:
    command = [sys.executable, "bench/bench_clients.py", "--clients", "aiperf", "--seconds", "1",
               "--tools-path", str(tmp_path / "none"), "--require-tools"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "aiperf is not installed in" in done.stderr
    ran = run_bench(
        "bench_clients",
        *("--clients", "aiperf", "--seconds", "1", "--tools-path", tmp_path / "none"),
        figures=tmp_path / "none.json",
    )
    (row,) = ran.figures["clients"]
    assert row["status"].startswith("not installed")
    assert "| aiperf | not installed" in ran.out
