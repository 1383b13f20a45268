"""A step run of a server with a known saturation point, built from client results."""

from __future__ import annotations

from datetime import UTC, datetime

from infersight.core.loadtest import LoadTestRun, RequestResult, ScenarioKind
from infersight.loadgen.scenarios import step

PER_USER_RPS = 2.0


def saturating_run(slots: int = 8, levels: tuple[int, ...] = (2, 4, 6, 8, 12, 16)) -> LoadTestRun:
    """A closed loop against ``slots`` batch slots: each user completes ``PER_USER_RPS``
    requests a second until the batch is full; past it users queue (E2E = users ÷ throughput)
    and TTFT grows with the queue."""
    phases = step(list(levels), 10.0)
    results, seq = [], 0
    for phase in phases:
        rps = PER_USER_RPS * min(phase.concurrency, slots)
        e2e = phase.concurrency / rps
        queue = e2e - 1 / PER_USER_RPS
        for k in range(int(rps * phase.duration_s)):
            seq += 1
            results.append(
                RequestResult(
                    seq=seq,
                    phase=phase.index,
                    sent_s=phase.start_s + k / rps,
                    e2e_s=e2e,
                    # Batching slows the first token a little per user, queueing a lot.
                    ttft_s=0.05 + 0.01 * phase.concurrency + queue,
                    tpot_s=0.45 / 99,
                    input_tokens=500,
                    output_tokens=100,
                )
            )
    return LoadTestRun(
        name="step",
        scenario=ScenarioKind.STEP,
        target="http://127.0.0.1:1",
        model="llama-3-8b",
        started_at=datetime(2026, 11, 30, tzinfo=UTC),
        phases=phases,
        results=tuple(results),
    )
