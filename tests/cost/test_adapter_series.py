"""LoRA adapters as a series label (#30): one base model serving two adapters on one
instance, 116 / 112 / 72 requests for the base / ``sql-lora`` / ``chat-lora``. Throughput,
latency and cost come out per adapter and add up to the instance's: 300 requests, every
latency count, and the instance's whole cost. Read from raw rows and from rollups (a range
whose raw rows are past), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Final

import pytest

from infersight.core.query import Selector
from infersight.core.records import RequestRecord
from infersight.core.window import Resolution, Window
from infersight.storage import cost, queries
from infersight.storage.writer import open_writer
from tests.cost.scenario import MODEL, WEEK, gpu_series

BASE: Final = "meta-llama/Llama-3.1-8B-Instruct"
INSTANCE: Final = "vllm-lora-0"
MIX: Final = {"": 116, "sql-lora": 112, "chat-lora": 72}
HOUR: Final = Window(WEEK.start, WEEK.start + timedelta(hours=1))


def _records() -> list[RequestRecord]:
    out = []
    i = 0
    for adapter, count in MIX.items():
        for k in range(count):
            i += 1
            out.append(
                RequestRecord(
                    trace_id=f"{i:032x}",
                    span_id=f"{i:016x}",
                    start=HOUR.start + timedelta(seconds=11 * i),
                    instance=INSTANCE,
                    engine="vllm",
                    model=BASE,
                    adapter=adapter,
                    ttft_s=0.1 + 0.001 * k + (0.05 if adapter else 0.0),
                    e2e_s=2.0 + 0.01 * k,
                    prefill_s=0.08,
                    decode_s=1.9 + 0.01 * k,
                    input_tokens=500,
                    output_tokens=200 + k,
                )
            )
    return out


@pytest.fixture
def lora_store(store):
    writer = open_writer(store.engine)
    writer.write_gpu_samples(gpu_series(INSTANCE, HOUR, util=0.6, power_w=400.0))
    writer.write_requests(_records())
    cost.put_model(store.engine, MODEL, WEEK.end)
    return store


def test_per_adapter_throughput_latency_and_cost_add_up_to_the_instance(lora_store) -> None:
    engine = lora_store.engine
    by_adapter = {
        t.labels["adapter"]: t.requests
        for t in queries.throughput(engine, HOUR, group_by=("adapter",))
    }
    assert by_adapter == MIX
    hourly = queries.throughput(engine, HOUR, group_by=("adapter",), finest=Resolution.HOUR)
    assert {t.labels["adapter"]: t.requests for t in hourly} == MIX  # the coarser rollups too
    (whole,) = queries.throughput(engine, HOUR, Selector(instance=INSTANCE))
    assert whole.requests == sum(by_adapter.values()) == 300
    only = queries.throughput(engine, HOUR, Selector(adapter="sql-lora"))
    assert [t.requests for t in only] == [112]

    latency = queries.latency(engine, "ttft", HOUR, group_by=("model", "adapter"))
    counts = {(g.labels["model"], g.labels["adapter"]): g.count for g in latency.groups}
    assert counts == {(BASE, a): n for a, n in MIX.items()}
    p50 = {g.labels["adapter"]: g.quantiles[0.5] for g in latency.groups}
    assert p50["sql-lora"] > p50[""]  # each adapter's own latency, not the base's

    result = cost.cost(engine, HOUR, MODEL, Selector(), ("model", "adapter"))
    (instance,) = result.instances
    shares = {g.labels["adapter"]: g for g in result.groups}
    assert {a: g.requests for a, g in shares.items()} == MIX
    total = sum((g.cost for g in result.groups), Decimal(0))
    assert total == pytest.approx(instance.total.amount, rel=Decimal("1e-9"))
    assert total == pytest.approx(result.total.cost, rel=Decimal("1e-9"))
    # shares follow GPU time: the base served most requests and costs most
    assert shares[""].cost > shares["sql-lora"].cost > shares["chat-lora"].cost
