"""Builders of valid records for tests (deterministic given a numpy Generator)."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from infersight.core.attribution import Attribution
from infersight.core.records import RequestRecord


def make_records(
    rng: np.random.Generator,
    start: datetime,
    count: int,
    *,
    span: timedelta,
    models: tuple[str, ...] = ("llama-8b", "llama-70b"),
    instances: tuple[str, ...] = ("gpu-0", "gpu-1"),
    tenants: tuple[str, ...] = ("acme", "globex"),
    priorities: tuple[str, ...] = ("interactive", "batch"),
    error_rate: float = 0.01,
) -> list[RequestRecord]:
    """``count`` requests spread uniformly over ``span`` from ``start``, log-normal latencies."""
    offsets = np.sort(rng.uniform(0, span.total_seconds(), count))
    ttft = rng.lognormal(np.log(0.08), 0.8, count)
    tpot = rng.lognormal(np.log(0.012), 0.3, count)
    queue = rng.exponential(0.02, count)
    outputs = rng.integers(1, 800, count)
    inputs = rng.integers(10, 4000, count)
    errors = rng.random(count) < error_rate
    ids = rng.integers(1, 2**63, size=(count, 3))
    records = []
    for i in range(count):
        decode = float(tpot[i] * max(int(outputs[i]) - 1, 0))
        prefill = float(ttft[i] * 0.5)
        records.append(
            RequestRecord(
                trace_id=f"{int(ids[i, 0]):016x}{int(ids[i, 1]):016x}",
                span_id=f"{int(ids[i, 2]):016x}",
                start=start + timedelta(seconds=float(offsets[i])),
                instance=instances[i % len(instances)],
                engine="vllm",
                model=models[(i // len(instances)) % len(models)],
                tenant=tenants[i % len(tenants)],
                priority=priorities[(i // 3) % len(priorities)],
                ttft_s=float(ttft[i]),
                tpot_s=float(tpot[i]),
                e2e_s=float(ttft[i]) + decode,
                queue_s=float(queue[i]),
                prefill_s=prefill,
                decode_s=decode,
                preprocess_s=0.002,
                input_tokens=int(inputs[i]),
                output_tokens=int(outputs[i]),
                status="error" if errors[i] else "ok",
                error_type="timeout" if errors[i] else "",
                finish_reason="" if errors[i] else "stop",
            )
        )
    return records


def gateway_span(record: RequestRecord, n: int, **labels: str) -> Attribution:
    """A LiteLLM gateway span over ``record``'s trace (span id ``n``), from half a second
    before the request for 3 s, naming ``labels`` (``tenant``, ``team``, ``workload``, …)."""
    return Attribution(
        record.trace_id,
        f"{n:016x}",
        record.start - timedelta(seconds=0.5),
        duration_s=3.0,
        source="litellm",
        **labels,
    )
