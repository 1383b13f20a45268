"""Synthetic load-test runs for the baseline benchmark and tests (deterministic given a numpy
Generator)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from infersight.core.baseline import Baseline, from_samples

CREATED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def synthetic_run(
    rng: np.random.Generator,
    name: str = "run",
    *,
    requests: int = 6000,
    slowdown: float = 1.0,
    sigma: float = 0.4,
    concurrency: int = 16,
    error_rate: float = 0.005,
) -> Baseline:
    """A closed-loop run at ``concurrency``: log-normal TTFT and TPOT, all ``slowdown`` × slower.

    Its duration follows from the latencies (``concurrency`` requests in flight), so a slower
    server also has proportionally lower throughput, as it would in a real load test.
    """
    ttft = rng.lognormal(np.log(0.12), sigma, requests) * slowdown
    tpot = rng.lognormal(np.log(0.025), sigma / 2, requests) * slowdown
    outputs = rng.integers(64, 512, requests)
    e2e = ttft + tpot * (outputs - 1)
    errors = int(rng.binomial(requests, error_rate))
    return from_samples(
        name,
        CREATED,
        duration_s=float(e2e.sum() / concurrency),
        ttft_s=ttft[errors:],
        tpot_s=tpot[errors:],
        e2e_s=e2e[errors:],
        errors=errors,
        input_tokens=int(rng.integers(100, 2000, requests).sum()),
        output_tokens=int(outputs[errors:].sum()),
        source="run",
        labels={"model": "llama-8b"},
    )
