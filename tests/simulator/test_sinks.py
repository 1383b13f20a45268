"""The store sink and the /metrics sinks speak what the rest of infersight reads."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infersight.core.quantiles import exact_quantiles
from infersight.core.query import Method, Selector
from infersight.core.window import Window
from infersight.simulator.events import Batch
from infersight.simulator.faults import Fault, FaultKind
from infersight.simulator.profiles import ModelProfile
from infersight.simulator.sinks.prometheus import (
    ITL_BUCKETS_V1,
    TTFT_BUCKETS_V1,
    MetricsServer,
    MetricsSink,
    throttle_bitmask,
)
from infersight.simulator.sinks.store import StoreSink
from infersight.storage.queries import latency
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.simulator.support import START, Run, RunFn

QS = (0.5, 0.9, 0.99)


def test_stored_percentiles_equal_the_simulators_own(run_fleet: RunFn, store: Store) -> None:
    run = run_fleet(6.0, 90.0, instances=2)
    sink = StoreSink(open_writer(store.engine), batch_size=400)
    for part in _batches(run):
        sink.write(part)
    sink.close()
    records = run.sink.records
    assert sink.inserted == len(records)
    assert sink.samples_written == len(run.sink.server_samples) + len(run.sink.gpu_samples)
    window = Window(START, START + timedelta(hours=1))
    for metric in ("ttft", "tpot", "queue", "e2e"):
        answer = latency(
            store.engine, metric, window, Selector(instance="sim-1"), (), QS, Method.EXACT
        )
        (group,) = answer.groups
        truth = exact_quantiles(
            [
                getattr(r, f"{metric}_s")
                for r in records
                if r.instance == "sim-1" and getattr(r, f"{metric}_s") is not None
            ],
            QS,
        )
        assert group.count == len([r for r in records if r.instance == "sim-1"])
        for q in QS:
            assert group.quantiles[q] == pytest.approx(truth[q], rel=1e-9)
    # Writing the same run again stores nothing new.
    again = StoreSink(open_writer(store.engine))
    for part in _batches(run):
        again.write(part)
    again.close()
    assert (again.inserted, again.duplicates) == (0, len(records))


def _batches(run: Run) -> Iterator[Batch]:
    c, s, g = run.sink.completions, run.sink.server_samples, run.sink.gpu_samples
    yield Batch(tuple(c[: len(c) // 2]), tuple(s), ())
    yield Batch(tuple(c[len(c) // 2 :]), (), tuple(g))


def _scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = httpx.get(url, timeout=5).text
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_vllm_metrics_are_served_with_v1_names_and_default_buckets(run_fleet: RunFn) -> None:
    fault = Fault(FaultKind.KV_PRESSURE, "sim-0", 20.0, 60.0, 0.01)
    run = run_fleet(12.0, 60.0, faults=[fault])
    sink = MetricsSink()
    for part in _batches(run):
        sink.write(part)
    server = MetricsServer(sink.vllm_registry("sim-0"))
    try:
        metrics = _scrape(server.url)
    finally:
        server.close()
    records = run.sink.records
    model = records[0].model
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
    ):
        assert name in metrics, name
        assert all(labels["model_name"] == model for labels, _ in metrics[name])
    last = run.sink.server_samples[-1]
    assert metrics["vllm:num_preemptions_total"][0][1] == last.preemptions_total > 0
    assert metrics["vllm:num_requests_running"][0][1] == last.requests_running
    ttft_buckets = [float(lb["le"]) for lb, _ in metrics["vllm:time_to_first_token_seconds_bucket"]]
    assert ttft_buckets == [*TTFT_BUCKETS_V1, float("inf")]
    itl = [float(lb["le"]) for lb, _ in metrics["vllm:inter_token_latency_seconds_bucket"]]
    assert itl == [*ITL_BUCKETS_V1, float("inf")]
    (count,) = [v for _, v in metrics["vllm:e2e_request_latency_seconds_count"]]
    assert count == len(records)
    (ttft_sum,) = [v for _, v in metrics["vllm:time_to_first_token_seconds_sum"]]
    assert ttft_sum == pytest.approx(sum(r.ttft_s or 0 for r in records))
    (itl_count,) = [v for _, v in metrics["vllm:inter_token_latency_seconds_count"]]
    assert itl_count == sum((r.output_tokens or 1) - 1 for r in records)
    by_reason = {lb["finished_reason"]: v for lb, v in metrics["vllm:request_success_total"]}
    assert by_reason["stop"] + by_reason["length"] == len(records)


def test_dcgm_metrics_follow_the_gpu_samples(run_fleet: RunFn, profile_70b: ModelProfile) -> None:
    fault = Fault(FaultKind.THERMAL_THROTTLE, "sim-0", 0.0, 60.0, 0.5)
    run = run_fleet(3.0, 30.0, faults=[fault], profile=profile_70b)
    sink = MetricsSink()
    for part in _batches(run):
        sink.write(part)
    server = MetricsServer(sink.dcgm_registry("sim-0"))
    try:
        metrics = _scrape(server.url)
    finally:
        server.close()
    last = {g.gpu_index: g for g in run.sink.gpu_samples}
    power = metrics["DCGM_FI_DEV_POWER_USAGE"]
    assert len(power) == 4  # tensor parallel over four GPUs
    for labels, value in power:
        sample = last[int(labels["gpu"])]
        assert value == pytest.approx(sample.power_w)
        assert labels["UUID"] == sample.uuid
        assert labels["modelName"] == "NVIDIA H200"
        assert labels["Hostname"] == "sim-0"
    for labels, value in metrics["DCGM_FI_DEV_FB_USED"]:
        assert value == round(last[int(labels["gpu"])].memory_used_bytes / 2**20)
    for labels, value in metrics["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]:
        assert value == round(last[int(labels["gpu"])].energy_j * 1000)
    reasons = {v for _, v in metrics["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]}
    assert reasons == {throttle_bitmask(("sw_thermal_slowdown", "hw_thermal_slowdown"))} == {0x60}
    assert all(v <= 1000 for _, v in metrics["DCGM_FI_DEV_SM_CLOCK"])
    assert "DCGM_FI_PROF_DRAM_ACTIVE" in metrics
