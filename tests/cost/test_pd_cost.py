"""Cost of disaggregated serving (#30): one prefill and one decode instance behind a P/D
proxy, the same GPUs and price. Each user's request is stored once, on its decode side; its
prefill leg is a part. The model's cost is both pools' cost, its tokens the users' (counted
once), so its cost per million tokens is the whole bill over the real tokens — not half of it
(two records per request) and not the decode pool's alone. The prefill pool's cost is all
input cost, the decode pool's all output cost. On SQLite and PostgreSQL, from raw rows and
from rollups."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Final

import pytest

from infersight.core.query import Selector
from infersight.core.records import RequestRecord, Role
from infersight.core.window import Resolution, Window
from infersight.storage import cost
from infersight.storage.writer import open_writer
from tests.cost.scenario import MODEL, WEEK, gpu_series

MODEL_NAME: Final = "llama-70b-pd"
HOUR: Final = Window(WEEK.start, WEEK.start + timedelta(hours=1))
N: Final = 200


def _records() -> list[RequestRecord]:
    out = []
    for i in range(1, N + 1):
        start = HOUR.start + timedelta(seconds=15 * i)
        trace = f"{i:032x}"
        out.append(
            RequestRecord(
                trace,
                "a" * 16,
                start + timedelta(milliseconds=3),
                "vllm-prefill-0",
                engine="vllm",
                model=MODEL_NAME,
                ttft_s=0.25,
                e2e_s=0.25,
                queue_s=0.03,
                prefill_s=0.22,
                input_tokens=4000,
                output_tokens=1,
                role=Role.PREFILL,
            )
        )
        out.append(
            RequestRecord(
                trace,
                "b" * 16,
                start,
                "vllm-decode-0",
                engine="vllm",
                model=MODEL_NAME,
                ttft_s=0.36,
                tpot_s=0.02,
                e2e_s=6.4,
                route_s=0.003,
                prefill_s=0.25,
                kv_transfer_s=0.05,
                decode_s=6.0,
                input_tokens=4000,
                output_tokens=300,
                role=Role.DECODE,
                peer="10.0.0.4:8200",
            )
        )
    return out


@pytest.fixture
def pd_store(store):
    writer = open_writer(store.engine)
    for instance in ("vllm-prefill-0", "vllm-decode-0"):
        writer.write_gpu_samples(gpu_series(instance, HOUR, util=0.6, power_w=400.0))
    result = writer.write_requests(_records())
    assert result.inserted == 2 * N
    cost.put_model(store.engine, MODEL, WEEK.end)
    return store


@pytest.mark.parametrize("finest", [Resolution.MINUTE, Resolution.HOUR], ids=["raw", "rollups"])
def test_a_split_models_cost_is_both_pools_over_its_users_tokens(pd_store, finest) -> None:
    result = cost.cost(pd_store.engine, HOUR, MODEL, Selector(), ("model",), finest=finest)
    (line,) = result.groups
    both = sum((i.total.amount for i in result.instances), Decimal(0))
    assert len(result.instances) == 2
    assert line.cost == pytest.approx(both, rel=Decimal("1e-9"))  # nothing left unattributed
    assert line.requests == N
    assert (line.input_tokens, line.output_tokens) == (N * 4000, N * 300)

    by_instance = cost.cost(pd_store.engine, HOUR, MODEL, Selector(), ("instance",), finest=finest)
    lines = {g.labels["instance"]: g for g in by_instance.groups}
    prefill, decode = lines["vllm-prefill-0"], lines["vllm-decode-0"]
    # The legs are the users' requests, counted on the decode side.
    assert (prefill.requests, prefill.input_tokens) == (0, 0)
    assert prefill.cost > 0
    assert prefill.output_cost == 0  # the prefill pool: all input
    assert (decode.input_cost, decode.output_cost) == (0, decode.cost)  # decode: all output
    assert prefill.idle_cost < prefill.cost  # a prefill instance that ran legs is not idle
