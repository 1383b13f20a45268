"""A capacity plan for a disaggregated model (#30): each pool sized with its own per-instance
capacity from production — the prefill pool's busiest prefill-instance-minute whose legs did
not queue, the decode pool's busiest decode-instance-minute within the TPOT target — since
every split request uses both pools. A model served whole gets no pools."""

from __future__ import annotations

import math

import pytest

from tests.api.conftest import Api
from tests.conftest import Store
from tests.doubles import NOW
from tests.scaling.split_fleet import BUSY, MODEL, seed_split

QUERY = {
    "model": "llama-3.1-70b",
    "gpu": "h200",
    "tensor_parallel": 4,
    "peak_qps": 10,
    "output_tokens": 300,
    "production": "7d",
    "production_model": MODEL,
    "ttft_target": 0.6,
    "tpot_target": 0.05,
}


def test_a_split_model_is_planned_per_pool(api: Api, store: Store) -> None:
    seed_split(store.engine, NOW)
    body = api.get("/api/v1/capacity", params=QUERY)
    assert body.status_code == 200, body.text
    pools = {p["pool"]: p for p in body.json()["pools"]}
    assert set(pools) == {"prefill", "decode"}
    prefill, decode = pools["prefill"], pools["decode"]
    assert (prefill["observed_instances"], decode["observed_instances"]) == (2, 3)
    # The busy minute's 120 legs on one prefill instance, queued 10 ms (under 60 ms); the
    # minute of 240 legs queued 0.5 s does not count.
    assert prefill["capacity_rps"] == pytest.approx(BUSY / 60)
    assert prefill["instances"] == math.ceil(10 * 1.4 / (BUSY / 60))
    # The decode pool's busiest minute within the TPOT target: the 240 requests.
    assert decode["capacity_rps"] == pytest.approx(2 * BUSY / 60)
    assert decode["instances"] == math.ceil(10 * 1.4 / (2 * BUSY / 60))


def test_a_model_served_whole_has_no_pools(api: Api, store: Store) -> None:
    seed_split(store.engine, NOW)
    body = api.get("/api/v1/capacity", params={**QUERY, "production_model": "other"})
    assert body.status_code == 400  # no production traffic for it: nothing to plan with
    given = api.get(
        "/api/v1/capacity",
        params={k: v for k, v in QUERY.items() if k not in ("production", "production_model")}
        | {"capacity_rps": 3},
    )
    assert given.status_code == 200, given.text
    assert "pools" not in given.json()
