"""GPU sampling through NVML, against a fake NVML with pynvml's interface."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import pynvml
import pytest

from infersight.collector.gpu.nvml import NvmlSource
from infersight.collector.gpu.source import GpuSampler, build_gpu_sampler
from infersight.collector.scrape.scraper import Scraper
from tests.collector.fake_nvml import FakeGpu, FakeNvml

TS = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def test_nvml_readings_are_converted_to_watts_joules_ratios_and_named_flags() -> None:
    gpu = FakeGpu()
    source = NvmlSource.open("node-1", FakeNvml([gpu, FakeGpu(uuid="GPU-1")]))
    try:
        first, second = source.read(TS)
    finally:
        source.close()
    assert (first.gpu_index, second.gpu_index) == (0, 1)
    assert first.power_w == pytest.approx(gpu.power_mw / 1000)
    assert first.power_limit_w == pytest.approx(700.0)
    assert first.energy_j == pytest.approx(gpu.energy_mj / 1000)
    assert (first.util_gpu, first.util_memory) == (pytest.approx(0.87), pytest.approx(0.40))
    assert (first.memory_used_bytes, first.memory_total_bytes) == gpu.memory
    assert (first.sm_clock_mhz, first.memory_clock_mhz) == gpu.clocks
    assert first.temperature_c == gpu.temperature_c
    assert first.throttle_reasons == ("sw_power_cap", "sw_thermal_slowdown")
    assert first.throttled
    assert (first.ecc_sbe_total, first.ecc_dbe_total) == gpu.ecc
    assert first.name == gpu.name
    assert second.uuid == "GPU-1"


def test_gpm_metrics_are_read_on_gpus_that_support_them() -> None:
    source = NvmlSource.open("node-1", FakeNvml([FakeGpu(), FakeGpu(gpm=None)]))
    try:
        hopper, older = source.read(TS)
    finally:
        source.close()
    assert hopper.sm_occupancy == pytest.approx(0.63)
    assert hopper.dram_bw_util == pytest.approx(0.415)
    assert hopper.tensor_util == pytest.approx(0.55)
    assert (older.sm_occupancy, older.dram_bw_util, older.tensor_util) == (None, None, None)


def test_an_unsupported_field_is_none_not_a_failed_sample() -> None:
    source = NvmlSource.open("node-1", FakeNvml([FakeGpu(power_limit_mw=None)]))
    try:
        (sample,) = source.read(TS)
    finally:
        source.close()
    assert sample.power_limit_w is None
    assert sample.power_w is not None


def test_xid_events_from_the_event_thread_reach_the_next_sample() -> None:
    nvml = FakeNvml([FakeGpu(), FakeGpu()])
    seen: list[tuple[int, int]] = []
    source = NvmlSource.open("node-1", nvml, on_xid=lambda gpu, xid: seen.append((gpu, xid)))
    try:
        nvml.xids.put((1, 79))
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.01)
        samples = source.read(TS)
    finally:
        source.close()
    assert seen == [(1, 79)]
    assert [s.xid_last for s in samples] == [None, 79]


def test_no_driver_is_one_clear_log_line_and_no_sampler(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with caplog.at_level(logging.WARNING):
        assert build_gpu_sampler("nvml", "node-1", nvml_module=nvml) is None
    lines = [r for r in caplog.records if "no GPU sampling" in r.getMessage()]
    assert len(lines) == 1


def test_no_gpu_at_all_is_also_no_sampler() -> None:
    assert build_gpu_sampler("nvml", "node-1", nvml_module=FakeNvml([])) is None


def test_gpu_source_choices() -> None:
    assert build_gpu_sampler("none", "node-1") is None
    dcgm = build_gpu_sampler("dcgm:http://127.0.0.1:9400/metrics", "node-1")
    assert isinstance(dcgm, Scraper)
    assert dcgm.url == "http://127.0.0.1:9400/metrics"
    dcgm.close()
    sampler = build_gpu_sampler("nvml", "node-1", nvml_module=FakeNvml([FakeGpu()]))
    assert isinstance(sampler, GpuSampler)
    try:
        assert len(sampler.sample()) == 1
    finally:
        sampler.close()
