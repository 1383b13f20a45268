"""``GET /api/v1/engines`` and the API's engine gauges (#30): each server's figures from the
scrapes its sidecar stored — the dialect, the prefix-cache hit ratio and speculative
decoding's acceptance over the window, absent where the server never reported them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.core.samples import ServerSample
from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.conftest import Store
from tests.doubles import NOW


def _store_scrapes(store: Store) -> None:
    samples = []
    for k in range(1, 9):  # the last 4 minutes, a scrape every 30 s
        ts = NOW - timedelta(seconds=30 * k)
        samples.append(
            ServerSample(
                ts=ts,
                instance="vllm-70b-1",
                engine="vllm",
                kv_cache_usage=0.5,
                prefix_cache_hit_ratio=0.8 if k % 2 else 0.6,
                spec_drafts_total=1000.0 * (9 - k),
                spec_acceptance_rate=0.14,
                spec_accept_length=1.42,
                requests_deferred=2.0,
            )
        )
        samples.append(ServerSample(ts=ts, instance="sglang-8b-0", engine="sglang"))
    assert open_writer(store.engine).write_server_samples(samples) == 16


def test_the_engines_route_answers_each_servers_figures_over_the_window(
    store: Store, api: Api
) -> None:
    _store_scrapes(store)
    body = api.get("/api/v1/engines", params={"range": "15m"}).json()
    servers = {s["instance"]: s for s in body["servers"]}
    assert set(servers) == {"vllm-70b-1", "sglang-8b-0"}
    spec = servers["vllm-70b-1"]
    assert (spec["dialect"], spec["samples"]) == ("vllm", 8)
    assert spec["prefix_cache_hit_ratio"] == pytest.approx(0.7)
    assert spec["spec_acceptance_rate"] == pytest.approx(0.14)
    assert spec["spec_accept_length"] == pytest.approx(1.42)
    assert spec["requests_deferred"] == pytest.approx(2.0)
    plain = servers["sglang-8b-0"]
    assert plain["dialect"] == "sglang"
    assert plain["spec_accept_length"] is None  # not speculating: absent, never 0
    assert plain["prefix_cache_hit_ratio"] is None
    one = api.get("/api/v1/engines", params={"range": "15m", "instance": "sglang-8b-0"}).json()
    assert [s["instance"] for s in one["servers"]] == ["sglang-8b-0"]
    refused = api.get("/api/v1/engines", params={"range": "15m", "model": "x"})
    assert refused.status_code == 400


def test_the_metrics_export_carries_engine_figures_only_where_reported(
    store: Store, api: Api
) -> None:
    _store_scrapes(store)
    families = {f.name: f for f in text_string_to_metric_families(api.get("/metrics").text)}
    length = families["infersight_engine_spec_accept_length"].samples
    assert [(s.labels["instance"], s.value) for s in length] == [
        ("vllm-70b-1", pytest.approx(1.42))
    ]
    rate = families["infersight_engine_spec_acceptance_rate"].samples
    assert [s.labels["instance"] for s in rate] == ["vllm-70b-1"]
