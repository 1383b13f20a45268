"""``bench/bench_grpc_front.py`` still runs end to end: exports through the gRPC receiver's own
accept loop and straight to gRPC's port, interleaved (figures are not asserted)."""

from __future__ import annotations

from tests.benchmarks import run_bench


def test_the_grpc_front_benchmark_runs_both_cases_and_prints_their_ratio() -> None:
    ran = run_bench("bench_grpc_front", "--exports", "5", "--spans", "2", "--rounds", "2")
    assert ran.out.count("front/direct") == 3  # two rounds and the summary
    assert "added per export median" in ran.out
