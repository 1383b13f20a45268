"""Scraping real ``prometheus_client``-served endpoints, one per engine flavour, with metric
names, label sets and buckets composed from the engines' documentation."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from infersight.collector.scrape.exposition import parse
from infersight.collector.scrape.scraper import Scraper
from infersight.core.errors import Unavailable
from infersight.core.samples import GpuSample, ServerSample

TS = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
)


class Raw:
    """A custom collector for shapes ``prometheus_client``'s metric classes cannot produce
    (TGI's counters without ``_total``)."""

    def __init__(self, *metrics: Metric) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics


def raw_counter(name: str, value: float, **labels: str) -> Metric:
    metric = Metric(name, name, "counter")
    metric.add_sample(name, labels, value)
    return metric


def scrape(url: str) -> tuple[Scraper, list[GpuSample | ServerSample]]:
    scraper = Scraper(url, "node-1", timeout_s=5, now=lambda: TS)
    try:
        return scraper, list(scraper.sample())
    finally:
        scraper.close()


def vllm_registry(renamed: bool) -> CollectorRegistry:
    r = CollectorRegistry()
    labels = {"model_name": MODEL}
    Gauge("vllm:num_requests_running", "", ["model_name"], registry=r).labels(**labels).set(7)
    Gauge("vllm:num_requests_waiting", "", ["model_name"], registry=r).labels(**labels).set(3)
    usage = "vllm:kv_cache_usage_perc" if renamed else "vllm:gpu_cache_usage_perc"
    Gauge(usage, "", ["model_name"], registry=r).labels(**labels).set(0.42)
    Counter("vllm:num_preemptions", "", ["model_name"], registry=r).labels(**labels).inc(5)
    Counter("vllm:prompt_tokens", "", ["model_name"], registry=r).labels(**labels).inc(12000)
    Counter("vllm:generation_tokens", "", ["model_name"], registry=r).labels(**labels).inc(3400)
    success = Counter("vllm:request_success", "", ["model_name", "finished_reason"], registry=r)
    success.labels(MODEL, "stop").inc(90)
    success.labels(MODEL, "length").inc(8)
    success.labels(MODEL, "abort").inc(2)
    if renamed:
        Counter("vllm:prefix_cache_queries", "", ["model_name"], registry=r).labels(**labels).inc(
            1000
        )
        Counter("vllm:prefix_cache_hits", "", ["model_name"], registry=r).labels(**labels).inc(250)
    else:
        Gauge("vllm:num_requests_swapped", "", ["model_name"], registry=r).labels(**labels).set(1)
    ttft = Histogram(
        "vllm:time_to_first_token_seconds", "", ["model_name"], buckets=TTFT_BUCKETS, registry=r
    )
    ttft.labels(**labels).observe(0.09)
    return r


@pytest.mark.parametrize("renamed", [False, True], ids=["V0 names", "V1 renamed names"])
def test_vllm_metrics_normalise_under_old_and_renamed_names(
    serve: Callable[[CollectorRegistry], str], renamed: bool
) -> None:
    scraper, (sample,) = scrape(serve(vllm_registry(renamed)))
    assert isinstance(sample, ServerSample)
    assert scraper.flavour == "vllm"
    assert (sample.engine, sample.model, scraper.model) == ("vllm", MODEL, MODEL)
    assert (sample.requests_running, sample.requests_waiting) == (7, 3)
    assert sample.kv_cache_usage == pytest.approx(0.42)
    assert sample.preemptions_total == 5
    assert (sample.prompt_tokens_total, sample.generation_tokens_total) == (12000, 3400)
    assert (sample.requests_total, sample.request_errors_total) == (100, 2)
    if renamed:
        # The counters are kept; their ratio needs a second scrape (an interval): absent.
        assert (sample.prefix_cache_queries_total, sample.prefix_cache_hits_total) == (1000, 250)
        assert sample.prefix_cache_hit_ratio is None
        assert sample.requests_swapped is None
    else:
        assert sample.requests_swapped == 1


def test_sglang_metrics_normalise(serve: Callable[[CollectorRegistry], str]) -> None:
    r = CollectorRegistry()
    for name, value in [
        ("sglang:num_running_reqs", 12),
        ("sglang:num_queue_reqs", 4),
        ("sglang:token_usage", 0.8),
        ("sglang:cache_hit_rate", 0.35),
    ]:
        Gauge(name, "", ["model_name"], registry=r).labels("qwen").set(value)
    for name, value in [
        ("sglang:prompt_tokens", 500),
        ("sglang:generation_tokens", 900),
        ("sglang:num_requests", 20),
    ]:
        Counter(name, "", ["model_name"], registry=r).labels("qwen").inc(value)
    _, (sample,) = scrape(serve(r))
    assert isinstance(sample, ServerSample)
    assert (sample.engine, sample.model) == ("sglang", "qwen")
    assert (sample.requests_running, sample.requests_waiting) == (12, 4)
    assert (sample.kv_cache_usage, sample.prefix_cache_hit_ratio) == (
        pytest.approx(0.8),
        pytest.approx(0.35),
    )
    assert (sample.prompt_tokens_total, sample.generation_tokens_total, sample.requests_total) == (
        500,
        900,
        20,
    )


def test_tgi_counters_without_total_are_read_under_their_real_names(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    r = CollectorRegistry()
    r.register(
        Raw(
            raw_counter("tgi_request_count", 41),
            raw_counter("tgi_request_success", 40),
            raw_counter("tgi_request_failure", 1, err="validation"),
        )
    )
    Gauge("tgi_batch_current_size", "", registry=r).set(6)
    Gauge("tgi_queue_size", "", registry=r).set(2)
    Histogram("tgi_request_input_length", "", buckets=(10, 100, 1000), registry=r).observe(300)
    Histogram("tgi_request_generated_tokens", "", buckets=(10, 100, 1000), registry=r).observe(64)
    url = serve(r)
    body = __import__("httpx").get(url).text
    assert "\ntgi_request_count 41.0" in body  # the shape TGI really exposes
    _, (sample,) = scrape(url)
    assert isinstance(sample, ServerSample)
    assert sample.engine == "tgi"
    assert (sample.requests_total, sample.request_errors_total) == (41, 1)
    assert (sample.requests_running, sample.requests_waiting) == (6, 2)
    assert (sample.prompt_tokens_total, sample.generation_tokens_total) == (300, 64)


def test_triton_trtllm_metrics_normalise(serve: Callable[[CollectorRegistry], str]) -> None:
    r = CollectorRegistry()
    success = Counter("nv_inference_request_success", "", ["model", "version"], registry=r)
    success.labels("ensemble", "1").inc(70)
    Counter("nv_inference_request_failure", "", ["model", "version"], registry=r).labels(
        "ensemble", "1"
    ).inc(3)
    Counter("nv_inference_request_duration_us", "", ["model", "version"], registry=r).labels(
        "ensemble", "1"
    ).inc(9.1e6)
    Gauge("nv_inference_pending_request_count", "", ["model", "version"], registry=r).labels(
        "ensemble", "1"
    ).set(5)
    requests = Gauge(
        "nv_trt_llm_request_metrics", "", ["model", "version", "request_type"], registry=r
    )
    requests.labels("tensorrt_llm", "1", "active").set(9)
    requests.labels("tensorrt_llm", "1", "max").set(64)
    blocks = Gauge(
        "nv_trt_llm_kv_cache_block_metrics",
        "",
        ["model", "version", "kv_cache_block_type"],
        registry=r,
    )
    blocks.labels("tensorrt_llm", "1", "used").set(300)
    blocks.labels("tensorrt_llm", "1", "max").set(1200)
    _, (sample,) = scrape(serve(r))
    assert isinstance(sample, ServerSample)
    assert sample.engine == "trtllm"
    assert (sample.requests_total, sample.request_errors_total) == (73, 3)
    assert (sample.requests_running, sample.requests_waiting) == (9, 5)
    assert sample.kv_cache_usage == pytest.approx(300 / 1200)


def test_dcgm_exporter_fields_become_gpu_samples_with_units_converted(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    r = CollectorRegistry()
    names = ["gpu", "UUID", "device", "modelName", "Hostname"]
    fields = {
        "DCGM_FI_DEV_GPU_UTIL": 87,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 40,
        "DCGM_FI_DEV_FB_USED": 70000,
        "DCGM_FI_DEV_FB_FREE": 11559,
        "DCGM_FI_DEV_POWER_USAGE": 612.5,
        "DCGM_FI_DEV_GPU_TEMP": 71,
        "DCGM_FI_DEV_SM_CLOCK": 1755,
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x4 | 0x20,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.55,
    }
    for name, value in fields.items():
        gauge = Gauge(name, "", names, registry=r)
        for gpu in ("0", "1"):
            gauge.labels(gpu, f"GPU-{gpu}", f"nvidia{gpu}", "NVIDIA H100 80GB HBM3", "h").set(value)
    energy = Counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "", names, registry=r)
    energy.labels("0", "GPU-0", "nvidia0", "NVIDIA H100 80GB HBM3", "h").inc(5_000_000)
    scraper, samples = scrape(serve(r))
    assert scraper.flavour == "dcgm"
    assert [s.gpu_index for s in samples] == [0, 1]
    gpu0 = samples[0]
    assert isinstance(gpu0, GpuSample)
    assert gpu0.util_gpu == pytest.approx(0.87)
    assert gpu0.memory_used_bytes == 70000 * 2**20
    assert gpu0.memory_total_bytes == (70000 + 11559) * 2**20
    assert gpu0.power_w == pytest.approx(612.5)
    assert gpu0.energy_j == pytest.approx(5000.0)
    assert gpu0.throttle_reasons == ("sw_power_cap", "sw_thermal_slowdown")
    assert gpu0.tensor_util == pytest.approx(0.55)
    assert gpu0.name == "NVIDIA H100 80GB HBM3"


def test_openmetrics_bodies_with_exemplars_parse() -> None:
    r = CollectorRegistry()
    counter = Counter("nv_inference_request_success", "", ["model"], registry=r)
    counter.labels("ensemble").inc(10, exemplar={"trace_id": "abc123"})
    body = openmetrics_latest(r).decode()
    assert "# {trace_id=" in body
    assert body.endswith("# EOF\n")
    exposition = parse(body, "application/openmetrics-text; version=1.0.0")
    assert exposition.total("nv_inference_request_success") == 10


def test_a_dead_endpoint_is_an_unreachable_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scraper = Scraper(f"http://127.0.0.1:{port}/metrics", "node-1", timeout_s=1)
    with pytest.raises(Unavailable) as caught:
        scraper.sample()
    scraper.close()
    assert caught.value.details["reason"] == "unreachable"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_slow_endpoint_times_out(silent_server: str) -> None:
    scraper = Scraper(silent_server, "node-1", timeout_s=0.3)
    with pytest.raises(Unavailable) as caught:
        scraper.sample()
    scraper.close()
    assert caught.value.details["reason"] == "timeout"
