"""The sidecar's own scraper reads the simulator's /metrics back into the simulator's samples."""

from __future__ import annotations

import pytest

from infersight.collector.scrape.scraper import Scraper
from infersight.core.samples import GpuSample, ServerSample
from infersight.simulator.events import Batch
from infersight.simulator.faults import Fault, FaultKind
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.sinks.prometheus import MetricsServer, MetricsSink
from tests.simulator.support import RunFn

pytestmark = pytest.mark.e2e


def scrape(registry: object, instance: str, ts: object) -> list[GpuSample | ServerSample]:
    server = MetricsServer(registry)  # type: ignore[arg-type]
    try:
        return list(Scraper(server.url, instance, now=lambda: ts).sample())  # type: ignore[arg-type, return-value]
    finally:
        server.close()


def test_vllm_metrics_scrape_back_to_the_server_samples(run_fleet: RunFn) -> None:
    run = run_fleet(12.0, 90.0, faults=[Fault(FaultKind.KV_PRESSURE, "sim-0", 20.0, 90.0, 0.01)])
    sink = MetricsSink()
    sink.write(Batch(tuple(run.sink.completions), tuple(run.sink.server_samples), ()))
    truth = run.sink.server_samples[-1]
    (sample,) = scrape(sink.vllm_registry("sim-0"), "sim-0", truth.ts)
    assert isinstance(sample, ServerSample)
    assert sample.engine == "vllm"
    for name in (
        "requests_running",
        "requests_waiting",
        "kv_cache_usage",
        "preemptions_total",
        "prompt_tokens_total",
        "generation_tokens_total",
    ):
        assert getattr(sample, name) == pytest.approx(getattr(truth, name)), name
    assert sample.preemptions_total > 0
    assert sample.requests_total == len(run.sink.records)


def test_dcgm_metrics_scrape_back_to_the_gpu_samples(
    run_fleet: RunFn, profile_70b: ModelProfile
) -> None:
    run = run_fleet(
        3.0,
        60.0,
        profile=profile_70b,
        faults=[Fault(FaultKind.THERMAL_THROTTLE, "sim-0", 0, 60, 0.5)],
    )
    sink = MetricsSink()
    sink.write(Batch((), (), tuple(run.sink.gpu_samples)))
    last = {g.gpu_index: g for g in run.sink.gpu_samples}
    scraped = scrape(sink.dcgm_registry("sim-0"), "sim-0", run.sink.gpu_samples[-1].ts)
    assert len(scraped) == 4
    for sample in scraped:
        assert isinstance(sample, GpuSample)
        truth = last[sample.gpu_index]
        assert sample.uuid == truth.uuid
        assert sample.name == truth.name
        assert sample.throttle_reasons == truth.throttle_reasons
        assert sample.throttled
        assert sample.power_w == pytest.approx(truth.power_w)
        assert sample.util_gpu == pytest.approx(truth.util_gpu, abs=0.005)  # whole percent
        assert sample.memory_used_bytes == pytest.approx(truth.memory_used_bytes, abs=2**20)
        assert sample.energy_j == pytest.approx(truth.energy_j, abs=0.001)
        assert sample.sm_clock_mhz == pytest.approx(truth.sm_clock_mhz, abs=0.5)
        assert sample.dram_bw_util == pytest.approx(truth.dram_bw_util)
