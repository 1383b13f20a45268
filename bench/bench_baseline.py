"""Benchmark of the baseline comparison: speed, interval width, and the gate's error rates.

For each run size it times ``core.baseline_compare.compare`` (bootstrap over the two sketches
of each latency metric) against a reference measured in the same run: the textbook bootstrap
over the raw per-request values (``numpy`` resampling, ``np.quantile``) for the same nine
percentiles and the same number of resamples, the two interleaved in ``--rounds`` ABBA rounds
(each round's ratio against its own reference; the median and spread printed). It also prints
how wide the sketch intervals are relative to the raw ones (near 1 means the sketch loses
nothing that matters), and, over many seeds, how often the gate calls ``regressed`` for a 3 %
change (should be 0) and for a 15 % change (the gate's power) — the figures
docs/baselines.md's claims rest on.

    python bench/bench_baseline.py [--sizes 1000,10000,50000] [--seeds 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from harness.baselines import CREATED, synthetic_run
from harness.interleave import add_round_arguments, interleave, ratio_spread
from harness.results import write_json

from infersight.core.baseline import from_samples
from infersight.core.baseline_compare import COMPARED_QUANTILES, Policy, Verdict, compare


def _raw(rng: np.random.Generator, n: int, slowdown: float) -> dict[str, np.ndarray]:
    ttft = rng.lognormal(np.log(0.12), 0.4, n) * slowdown
    tpot = rng.lognormal(np.log(0.025), 0.2, n) * slowdown
    e2e = ttft + tpot * (rng.integers(64, 512, n) - 1)
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e}


def _raw_bootstrap(
    a: dict[str, np.ndarray], b: dict[str, np.ndarray], resamples: int, rng: np.random.Generator
) -> dict[str, tuple[float, float]]:
    """Reference: resample the raw values themselves; 95 % interval of q_b / q_a − 1."""
    out = {}
    for metric, x in a.items():
        y = b[metric]
        parts_x, parts_y = [], []
        for done in range(0, resamples, 50):  # in chunks: 50 resamples × n values at a time
            k = min(50, resamples - done)
            parts_x.append(
                np.quantile(x[rng.integers(0, x.size, (k, x.size))], COMPARED_QUANTILES, axis=1)
            )
            parts_y.append(
                np.quantile(y[rng.integers(0, y.size, (k, y.size))], COMPARED_QUANTILES, axis=1)
            )
        qx, qy = np.concatenate(parts_x, axis=1), np.concatenate(parts_y, axis=1)
        for i, q in enumerate(COMPARED_QUANTILES):
            low, high = np.quantile(qy[i] / qx[i] - 1.0, [0.025, 0.975])
            out[f"{metric}.p{round(q * 100)}"] = (float(low), float(high))
    return out


def speed(
    sizes: list[int], resamples: int, rounds: int = 3, order: str = "abba"
) -> list[dict[str, Any]]:
    """Per size, ``rounds`` rounds of the comparison and its reference in ``order`` (each
    round's ratio against its own reference): the medians and the ratio's spread."""
    header = f"{'requests':>9} {'compare ms':>11} {'raw bootstrap ms':>17}"
    print(header + f" {'ratio, each round':>30} {'CI width ratio':>15}")
    return [_speed_row(n, resamples, rounds, order) for n in sizes]


def _speed_row(n: int, resamples: int, rounds: int, order: str) -> dict[str, Any]:
    rng = np.random.default_rng(n)
    raw_a, raw_b = _raw(rng, n, 1.0), _raw(rng, n, 1.05)
    a, b = (
        from_samples(
            name, CREATED, duration_s=600.0, ttft_s=r["ttft"], tpot_s=r["tpot"], e2e_s=r["e2e"]
        )
        for name, r in (("a", raw_a), ("b", raw_b))
    )
    policy = Policy(resamples=resamples)
    answers: dict[str, Any] = {}

    def ours() -> float:
        t0 = time.perf_counter()
        answers["ours"] = compare(a, b, np.random.default_rng(0), policy)
        return time.perf_counter() - t0

    def raw() -> float:
        t0 = time.perf_counter()
        answers["raw"] = _raw_bootstrap(raw_a, raw_b, resamples, np.random.default_rng(0))
        return time.perf_counter() - t0

    runs = interleave({"raw": raw, "ours": ours}, rounds, order=order)
    result, reference = answers["ours"], answers["raw"]  # the same every round (seeded)
    widths = [
        (m.ci_high - m.ci_low) / (reference[m.name][1] - reference[m.name][0])
        for m in result.metrics
        if m.name in reference and m.ci_low is not None and m.ci_high is not None
    ]
    width = statistics.median(widths)
    ratio = ratio_spread(runs["raw"], runs["ours"])
    ours_s, ref_s = statistics.median(runs["ours"]), statistics.median(runs["raw"])
    print(
        f"{n:>9} {ours_s * 1000:>11.1f} {ref_s * 1000:>17.1f} {ratio.text('x', '.1f'):>30}"
        f" {width:>15.2f}"
    )
    return {
        "requests": n,
        "compare_s": ours_s,
        "reference_s": ref_s,
        "speedup": ratio.median,
        "speedup_spread": ratio.as_dict(),
        "ci_width_ratio": width,
    }


def error_rates(seeds: int, requests: int) -> dict[str, dict[str, int]]:
    print(f"\ngate verdicts over {seeds} seeds ({requests} requests per run):")
    rates: dict[str, dict[str, int]] = {}
    for label, slowdown in (("same", 1.0), ("+3%", 1.03), ("-3%", 0.97), ("+15%", 1.15)):
        counts: Counter[str] = Counter()
        for seed in range(seeds):
            rng = np.random.default_rng(10_000 + seed)
            base = synthetic_run(rng, "base", requests=requests)
            cand = synthetic_run(rng, "cand", requests=requests, slowdown=slowdown)
            counts[
                compare(base, cand, np.random.default_rng(seed), Policy(resamples=500)).verdict
            ] += 1
        rates[label] = {v.value: counts[v] for v in Verdict}
        print(f"  {label:>5}: " + ", ".join(f"{k} {v}" for k, v in rates[label].items()))
    return rates


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--requests", type=int, default=6000)
    add_round_arguments(parser, rounds=3)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    print("reference: bootstrap over raw per-request values (numpy), same resamples")
    print(
        f"(medians of {args.rounds} rounds, {args.order} order; ratio: reference / compare, "
        "median (min–max) of the rounds')\n"
    )
    results = {
        "speed": speed(
            [int(s) for s in args.sizes.split(",")], args.resamples, args.rounds, args.order
        ),
        "gate": error_rates(args.seeds, args.requests),
    }
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
