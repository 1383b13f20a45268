"""A small fleet whose engines' spans name no tenant, attributed by its gateway's spans (#34):
two serving H200s (one idle half the time) and one that served nothing; some gateway spans
reach the store before their requests, some after. Shared by the cost and dashboard tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from sqlalchemy import Engine

from infersight.core.attribution import Attribution
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample
from infersight.core.window import Window
from infersight.storage.writer import open_writer

T0: Final = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
WINDOW: Final = Window(T0, T0 + timedelta(hours=2))
#: Requests per tenant ("" : no gateway span named one), on gpu-a then gpu-b.
TENANTS: Final = {"acme": 20, "globex": 15, "initech": 10, "umbrella": 8, "": 7}
TEAMS: Final = {"acme": "search", "globex": "search", "initech": "ads", "umbrella": "ads"}


def _gpu(instance: str, utils: list[float]) -> list[GpuSample]:
    step = WINDOW.seconds / len(utils)
    return [
        GpuSample(
            ts=T0 + timedelta(seconds=i * step),
            instance=instance,
            gpu_index=0,
            name="NVIDIA H200",
            util_gpu=util,
            power_w=400.0,
            energy_j=1e6 + 400.0 * step * i,
        )
        for i, util in enumerate(utils)
    ]


def write_fleet(engine: Engine) -> dict[str, int]:
    """Two serving H200s (one idle half the time) and one that served nothing; requests whose
    engine spans name no tenant, attributed by their gateway spans (some before, some
    after the requests are stored). Answers the requests per tenant."""
    writer = open_writer(engine)
    writer.write_gpu_samples(_gpu("gpu-a", [0.6] * 8))
    writer.write_gpu_samples(_gpu("gpu-b", [0.4] * 4 + [0.01] * 4))
    writer.write_gpu_samples(_gpu("gpu-idle", [0.0] * 8))
    records: list[RequestRecord] = []
    gateway: list[Attribution] = []
    i = 0
    for tenant, n in TENANTS.items():
        for _ in range(n):
            start = T0 + timedelta(seconds=60 + 90 * i)
            trace = f"{i + 1:032x}"
            records.append(
                RequestRecord(
                    trace_id=trace,
                    span_id=f"{i + 1:016x}",
                    start=start,
                    instance="gpu-a" if i % 3 else "gpu-b",
                    engine="vllm",
                    model="llama-70b",
                    ttft_s=0.3 if i % 4 else 3.0,
                    tpot_s=0.02,
                    e2e_s=4.0,
                    prefill_s=0.4,
                    decode_s=3.5,
                    input_tokens=2000 + 10 * i,
                    output_tokens=300,
                )
            )
            if tenant:
                gateway.append(
                    Attribution(
                        trace,
                        f"{0xF000 + i:016x}",
                        start - timedelta(seconds=0.2),
                        5.0,
                        tenant=tenant,
                        team=TEAMS[tenant],
                        workload=f"key-{i % 2}",
                        source="litellm",
                    )
                )
            i += 1
    half = len(gateway) // 2
    writer.write_attributions(gateway[:half])  # these arrive first
    writer.write_requests(records)
    writer.write_attributions(gateway[half:])  # these after their requests
    return dict(TENANTS)
