"""A scenario fleet served in real time: every instance on its own port, with its own traffic."""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.simulator.scenario import Deployment, Scenario
from infersight.simulator.serve import FleetServer
from infersight.simulator.sinks import MemorySink
from infersight.simulator.specs import load_profile
from infersight.simulator.workload import LengthDist, LengthKind, Poisson, RequestMix
from tests.simulator.support import START

pytestmark = pytest.mark.e2e

TINY = RequestMix(
    input=LengthDist(LengthKind.FIXED, 100, 0.0, 1, 1000),
    output=LengthDist(LengthKind.FIXED, 8, 0.0, 1, 100),
)


def test_each_instance_serves_http_and_runs_its_scenario_traffic() -> None:
    scenario = Scenario(
        name="rt",
        start=START,
        duration_s=3600.0,
        seed=1,
        sample_interval_s=0.2,
        deployments=(
            Deployment(load_profile("llama-3.1-8b-h200x1"), ("rt-a", "rt-b"), Poisson(40.0), TINY),
        ),
    )
    memory = MemorySink()
    fleet = FleetServer(scenario, epoch=START, sinks=[memory])
    urls = fleet.start()
    try:
        assert set(urls) == {"rt-a", "rt-b"}
        answers = {
            name: httpx.post(
                url + "/v1/completions", json={"prompt": "hi " * 20, "max_tokens": 4}, timeout=10
            ).json()
            for name, url in urls.items()
        }
        time.sleep(1.0)
        scraped = {name: httpx.get(url + "/metrics", timeout=5).text for name, url in urls.items()}
        gpu = httpx.get(urls["rt-a"] + "/dcgm/metrics", timeout=5).text
    finally:
        fleet.stop()
    for answer in answers.values():
        assert answer["usage"]["completion_tokens"] == 4
    # The scenario's own traffic (20 req/s per instance) ran alongside the HTTP requests.
    assert fleet.requests > 20
    assert {r.instance for r in memory.records} == {"rt-a", "rt-b"}
    for text in scraped.values():
        families = {f.name: f for f in text_string_to_metric_families(text)}
        (count,) = [
            s.value
            for s in families["vllm:e2e_request_latency_seconds"].samples
            if s.name.endswith("_count")
        ]
        assert count > 5
    assert "DCGM_FI_DEV_GPU_UTIL" in gpu
    assert memory.closed
