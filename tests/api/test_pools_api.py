"""``GET /api/v1/pools`` and the GPUs page's pool table (#30): each instance's part in
disaggregated serving, its own figures, and every user request counted once — on its decode
side — while the prefill legs stay the prefill pool's."""

from __future__ import annotations

from datetime import timedelta

import pytest

from infersight.core.records import Engine, RequestRecord, Role
from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.conftest import Store
from tests.doubles import NOW


def _split_requests(store: Store, count: int = 40) -> None:
    records = []
    for k in range(count):
        start = NOW - timedelta(minutes=5, seconds=-k)
        trace = f"{k + 1:032x}"
        records.append(
            RequestRecord(
                trace,
                "a" * 16,
                start + timedelta(milliseconds=5),
                "vllm-prefill-0",
                engine=Engine.VLLM,
                model="llama-70b",
                ttft_s=0.2,
                e2e_s=0.2,
                queue_s=0.04,
                prefill_s=0.16,
                input_tokens=2000,
                output_tokens=1,
                role=Role.PREFILL,
            )
        )
        records.append(
            RequestRecord(
                trace,
                "b" * 16,
                start,
                f"vllm-decode-{k % 2}",
                engine=Engine.VLLM,
                model="llama-70b",
                ttft_s=0.33,
                tpot_s=0.01,
                e2e_s=3.3,
                prefill_s=0.25,
                kv_transfer_s=0.05,
                route_s=0.003,
                input_tokens=2000,
                output_tokens=300,
                role=Role.DECODE,
                peer="10.0.0.4:8200",
            )
        )
    records.append(  # a request the proxy did not split, on a decode instance
        RequestRecord(
            f"{999:032x}",
            "c" * 16,
            NOW - timedelta(minutes=4),
            "vllm-decode-0",
            engine=Engine.VLLM,
            model="llama-70b",
            ttft_s=0.05,
            e2e_s=1.0,
            queue_s=0.01,
            input_tokens=100,
            output_tokens=50,
        )
    )
    result = open_writer(store.engine).write_requests(records)
    assert result.inserted == 2 * count + 1


def test_the_pools_route_gives_each_instance_its_role_and_own_figures(
    store: Store, api: Api
) -> None:
    _split_requests(store)
    body = api.get("/api/v1/pools", params={"range": "15m"}).json()
    assert body["disaggregated"] is True
    lines = {line["instance"]: line for line in body["instances"]}
    assert [line["role"] for line in body["instances"]] == ["prefill", "decode", "decode"]
    prefill = lines["vllm-prefill-0"]
    assert (prefill["requests"], prefill["input_tokens"], prefill["output_tokens"]) == (
        40,
        80_000,
        40,
    )
    assert prefill["queue_mean"] == pytest.approx(0.04)
    assert prefill["kv_transfer_mean"] is None
    decode = lines["vllm-decode-0"]
    assert decode["requests"] == 21  # 20 split requests and one the proxy did not split
    assert decode["kv_transfer_mean"] == pytest.approx(0.05)
    # The user's totals count each request once: the decode side's.
    throughput = api.get("/api/v1/throughput", params={"range": "15m"}).json()
    total = sum(g["requests"] for g in throughput["groups"])
    assert total == 41


def test_a_fleet_that_splits_nothing_has_no_pools(store: Store, api: Api) -> None:
    body = api.get("/api/v1/pools", params={"range": "15m"}).json()
    assert body == {**body, "disaggregated": False, "instances": []}
    refused = api.get("/api/v1/pools", params={"range": "nonsense"})
    assert refused.status_code == 400
