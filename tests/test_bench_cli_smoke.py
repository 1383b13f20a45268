"""The CLI start-up benchmark still runs end to end (one run per command; figures are not
asserted, only that every one is there with its same-run, interleaved reference)."""

from __future__ import annotations

from pathlib import Path

from tests.benchmarks import run_bench

COMMANDS = ("--help", "--version", "slo list", "baseline list", "db current")


def test_the_cli_benchmark_times_every_command_against_the_interpreter(tmp_path: Path) -> None:
    ran = run_bench("bench_cli", "--runs", "1", figures=tmp_path / "cli.json")
    assert "reference python -c pass" in ran.out
    figures = ran.figures["this_tree"]
    assert figures["reference_s"] > 0
    assert set(figures["commands"]) == set(COMMANDS)
    for name in COMMANDS:
        row = figures["commands"][name]
        assert row["median_s"] > 0
        # Each round's ratio against that round's reference: the median of those, and the
        # spread it lies in.
        spread = row["ratio_spread"]
        assert row["ratio_to_reference"] == spread["median"]
        assert spread["min"] <= spread["median"] <= spread["max"]
        assert len(spread["rounds"]) == len(row["runs_s"]) == len(figures["reference_runs_s"])
        assert row["largest_imports"]
        assert f"infersight {name}" in ran.out
