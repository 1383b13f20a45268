"""The ``/metrics`` dialects of current serving stacks (#30), scraped for real: each engine's
series are served by ``prometheus_client``'s HTTP server under the names the engines' current
source declares, and read by the sidecar's ``Scraper`` across consecutive scrapes.

Ratios of counters are taken over the interval between two scrapes and pooled over the
data-parallel engines; an engine's own ratio gauge is never read where the counters exist.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from infersight.collector.engines import DIALECTS
from infersight.collector.scrape.scraper import Scraper
from infersight.core.samples import ServerSample

T0 = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class Clock:
    """Scrape times 15 s apart."""

    def __init__(self) -> None:
        self.ts = T0

    def __call__(self) -> datetime:
        self.ts += timedelta(seconds=15)
        return self.ts


def scraper_for(url: str) -> Scraper:
    return Scraper(url, "node-1", timeout_s=5, now=Clock())


def one(scraper: Scraper) -> ServerSample:
    (sample,) = scraper.sample()
    assert isinstance(sample, ServerSample)
    return sample


class VllmEngines:
    """vLLM V1 with two data-parallel engines (label ``engine``), as ``PrometheusStatLogger``
    names its series."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        labels = ["model_name", "engine"]
        self.queries = Counter("vllm:prefix_cache_queries", "", labels, registry=r)
        self.hits = Counter("vllm:prefix_cache_hits", "", labels, registry=r)
        self.success = Counter("vllm:request_success", "", [*labels, "finished_reason"], registry=r)
        self.drafts = Counter("vllm:spec_decode_num_drafts", "", labels, registry=r)
        self.draft_tokens = Counter("vllm:spec_decode_num_draft_tokens", "", labels, registry=r)
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "", labels, registry=r)
        self.by_source = Counter(
            "vllm:prompt_tokens_by_source", "", [*labels, "source"], registry=r
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting_by_reason", "", [*labels, "reason"], registry=r
        )
        self.rejections = Counter(
            "vllm:admission_rejections", "", ["model_name", "reason"], registry=r
        )
        Gauge("vllm:kv_cache_usage_perc", "", labels, registry=r)
        for engine in ("0", "1"):
            for reason in ("stop", "length", "abort", "error", "repetition"):
                self.success.labels(MODEL, engine, reason)  # vLLM creates every series
            for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
                self.by_source.labels(MODEL, engine, source)
            for reason in ("capacity", "deferred"):
                self.waiting.labels(MODEL, engine, reason)

    def traffic(self, engine: str, queries: int, hits: int) -> None:
        self.queries.labels(MODEL, engine).inc(queries)
        self.hits.labels(MODEL, engine).inc(hits)

    def speculate(self, engine: str, drafts: int, draft_tokens: int, accepted: int) -> None:
        self.drafts.labels(MODEL, engine).inc(drafts)
        self.draft_tokens.labels(MODEL, engine).inc(draft_tokens)
        self.accepted.labels(MODEL, engine).inc(accepted)


def test_the_prefix_cache_hit_ratio_is_hits_gained_over_queries_gained_pooled_over_engines(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    """Engine 0 answered most queries from its cache since the server started and engine 1
    few; over the last interval they saw 9,000 and 1,000 queries with 8,100 and 100 hits. The
    truth of that interval is 8,200 / 10,000 — not either cumulative ratio, nor their mean."""
    vllm = VllmEngines()
    vllm.traffic("0", queries=100_000, hits=95_000)
    vllm.traffic("1", queries=100_000, hits=5_000)
    scraper = scraper_for(serve(vllm.registry))
    first = one(scraper)
    assert first.prefix_cache_hit_ratio is None  # no interval yet: absent, not 0.5
    assert first.prefix_cache_queries_total == 200_000
    vllm.traffic("0", queries=9_000, hits=8_100)
    vllm.traffic("1", queries=1_000, hits=100)
    second = one(scraper)
    assert second.prefix_cache_hit_ratio == pytest.approx(8_200 / 10_000)
    engines = {e.rank: e.prefix_cache_hit_ratio for e in second.per_engine}
    assert engines == {"0": pytest.approx(0.9), "1": pytest.approx(0.1)}
    # No traffic in the next interval: no ratio at all (the old reading stood at 0.493).
    idle = one(scraper)
    assert idle.prefix_cache_hit_ratio is None
    assert all(e.prefix_cache_hit_ratio is None for e in idle.per_engine)


def test_a_restarted_engine_counts_from_zero_again(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    first_life = VllmEngines()
    first_life.traffic("0", queries=50_000, hits=40_000)
    first_life.traffic("1", queries=50_000, hits=40_000)
    url = serve(first_life.registry)
    scraper = scraper_for(url)
    one(scraper)
    # The server restarted behind the same address: its counters went back to zero.
    second_life = VllmEngines()
    second_life.traffic("0", queries=1_000, hits=250)
    second_life.traffic("1", queries=1_000, hits=250)
    scraper.url = serve(second_life.registry)
    assert one(scraper).prefix_cache_hit_ratio == pytest.approx(0.25)


def test_vllm_counts_finished_reason_error_as_a_failure_beside_abort(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    vllm = VllmEngines()
    for reason, n in (("stop", 90), ("length", 5), ("abort", 2), ("error", 3)):
        vllm.success.labels(MODEL, "0", reason).inc(n)
    sample = one(scraper_for(serve(vllm.registry)))
    assert (sample.requests_total, sample.request_errors_total) == (100, 5)


def test_speculative_decoding_acceptance_is_taken_over_the_interval(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    """Acceptance rate = accepted ÷ draft tokens gained; mean acceptance length = 1 +
    accepted ÷ drafts gained (the drafts kept plus the target model's own token)."""
    vllm = VllmEngines()
    vllm.speculate("0", drafts=10_000, draft_tokens=30_000, accepted=21_000)
    scraper = scraper_for(serve(vllm.registry))
    assert one(scraper).spec_acceptance_rate is None
    # Healthy: 3 draft tokens a step, 70 % accepted → 3.1 tokens a step.
    vllm.speculate("0", drafts=1_000, draft_tokens=3_000, accepted=2_100)
    vllm.speculate("1", drafts=1_000, draft_tokens=3_000, accepted=2_100)
    healthy = one(scraper)
    assert healthy.spec_acceptance_rate == pytest.approx(0.70)
    assert healthy.spec_accept_length == pytest.approx(3.1)
    # The draft model no longer fits the traffic: 14 % accepted → 1.42 tokens a step.
    vllm.speculate("0", drafts=1_000, draft_tokens=3_000, accepted=420)
    vllm.speculate("1", drafts=1_000, draft_tokens=3_000, accepted=420)
    collapsed = one(scraper)
    assert collapsed.spec_acceptance_rate == pytest.approx(0.14)
    assert collapsed.spec_accept_length == pytest.approx(1.42)
    assert {e.rank: e.spec_accept_length for e in collapsed.per_engine} == {
        "0": pytest.approx(1.42),
        "1": pytest.approx(1.42),
    }


def test_vllm_disaggregation_and_admission_figures_are_read(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    vllm = VllmEngines()
    vllm.waiting.labels(MODEL, "0", "deferred").set(6)
    vllm.waiting.labels(MODEL, "1", "deferred").set(2)
    vllm.waiting.labels(MODEL, "0", "capacity").set(4)
    vllm.by_source.labels(MODEL, "0", "external_kv_transfer").inc(48_000)
    vllm.by_source.labels(MODEL, "0", "local_compute").inc(1_000)
    vllm.rejections.labels(MODEL, "max_num_queued_reqs").inc(7)
    sample = one(scraper_for(serve(vllm.registry)))
    assert sample.requests_deferred == 8
    assert sample.kv_transfer_tokens_total == 48_000
    assert sample.admission_rejections_total == 7


def sglang_registry(*, cached: float, prompt: float, rate_gauge: float) -> CollectorRegistry:
    """SGLang's tokenizer counters and its scheduler's gauges (``engine_type`` on each)."""
    r = CollectorRegistry()
    labels = {"model_name": "qwen", "engine_type": "unified"}
    Gauge("sglang:cache_hit_rate", "", list(labels), registry=r).labels(**labels).set(rate_gauge)
    Gauge("sglang:num_running_reqs", "", list(labels), registry=r).labels(**labels).set(9)
    source = Counter("sglang:cached_tokens", "", [*labels, "cache_source"], registry=r)
    source.labels(**labels, cache_source="device").inc(cached * 0.75)
    source.labels(**labels, cache_source="host").inc(cached * 0.25)
    streaming = Counter("sglang:prompt_tokens", "", [*labels, "is_streaming"], registry=r)
    streaming.labels(**labels, is_streaming="true").inc(prompt)
    Gauge("sglang:spec_accept_length", "", list(labels), registry=r).labels(**labels).set(2.6)
    Gauge("sglang:spec_accept_rate", "", list(labels), registry=r).labels(**labels).set(0.53)
    return r


def test_sglang_hit_ratio_comes_from_cached_over_prompt_tokens_never_the_batch_gauge(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    """``sglang:cache_hit_rate`` is the last prefill batch's (0.0 right after decode logging
    reset it, 0.94 after one lucky batch); the interval's truth is 6,200 / 10,000."""
    scraper = scraper_for(serve(sglang_registry(cached=0, prompt=0, rate_gauge=0.0)))
    assert one(scraper).prefix_cache_hit_ratio is None
    scraper.url = serve(sglang_registry(cached=6_200, prompt=10_000, rate_gauge=0.94))
    sample = one(scraper)
    assert sample.prefix_cache_hit_ratio == pytest.approx(0.62)
    assert (sample.spec_accept_length, sample.spec_acceptance_rate) == (
        pytest.approx(2.6),
        pytest.approx(0.53),
    )


def test_trtllm_serve_exposition_is_read_under_its_own_names(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    r = CollectorRegistry()
    labels = {"model_name": MODEL, "engine_type": "pytorch"}
    names = list(labels)
    Gauge("trtllm_num_requests_running", "", names, registry=r).labels(**labels).set(11)
    Gauge("trtllm_num_requests_waiting", "", names, registry=r).labels(**labels).set(5)
    Gauge("trtllm_kv_cache_utilization", "", names, registry=r).labels(**labels).set(0.66)
    Counter("trtllm_prompt_tokens", "", names, registry=r).labels(**labels).inc(40_000)
    Counter("trtllm_generation_tokens", "", names, registry=r).labels(**labels).inc(9_000)
    success = Counter("trtllm_request_success", "", [*names, "finished_reason"], registry=r)
    success.labels(**labels, finished_reason="stop").inc(120)
    Counter("trtllm_request_error", "", [*names, "http_code"], registry=r).labels(
        **labels, http_code="500"
    ).inc(4)
    scraper = scraper_for(serve(r))
    sample = one(scraper)
    assert scraper.flavour == "trtllm"
    assert (sample.requests_running, sample.requests_waiting) == (11, 5)
    assert sample.kv_cache_usage == pytest.approx(0.66)
    assert (sample.prompt_tokens_total, sample.generation_tokens_total) == (40_000, 9_000)
    assert (sample.requests_total, sample.request_errors_total) == (124, 4)
    assert {d.name: d.path for d in DIALECTS}["trtllm"] == "/prometheus/metrics"


def test_dynamo_frontend_is_a_dialect_of_its_own(
    serve: Callable[[CollectorRegistry], str],
) -> None:
    r = CollectorRegistry()
    total = Counter(
        "dynamo_frontend_requests",
        "",
        ["model", "endpoint", "request_type", "status", "error_type"],
        registry=r,
    )
    total.labels(MODEL, "chat_completions", "stream", "success", "").inc(300)
    total.labels(MODEL, "chat_completions", "stream", "error", "overload").inc(6)
    Gauge("dynamo_frontend_inflight_requests", "", ["model"], registry=r).labels(MODEL).set(17)
    Gauge("dynamo_frontend_queued_requests", "", ["model"], registry=r).labels(MODEL).set(3)
    Counter("dynamo_frontend_output_tokens", "", ["model"], registry=r).labels(MODEL).inc(70_000)
    scraper = scraper_for(serve(r))
    sample = one(scraper)
    assert (scraper.flavour, sample.engine) == ("dynamo", "dynamo")
    assert (sample.requests_total, sample.request_errors_total) == (306, 6)
    assert (sample.requests_running, sample.requests_waiting) == (17, 3)
    assert sample.generation_tokens_total == 70_000


@pytest.mark.parametrize("legacy", [False, True], ids=["llm_d_epp names", "inference_* names"])
def test_llm_d_endpoint_picker_is_read_under_new_and_deprecated_names(
    serve: Callable[[CollectorRegistry], str], legacy: bool
) -> None:
    r = CollectorRegistry()
    request_labels = ["model_name", "target_model_name", "fairness_id", "priority"]
    if legacy:
        total = Counter("inference_objective_request_total", "", request_labels, registry=r)
        kv = Gauge("inference_pool_average_kv_cache_utilization", "", ["name"], registry=r)
        running = Gauge("inference_objective_running_requests", "", ["model_name"], registry=r)
    else:
        total = Counter("llm_d_epp_request_total", "", request_labels, registry=r)
        kv = Gauge("llm_d_epp_average_kv_cache_utilization", "", ["name"], registry=r)
        running = Gauge("llm_d_epp_request_running", "", ["model_name"], registry=r)
    total.labels(MODEL, MODEL, "team-a", "0").inc(80)
    total.labels(MODEL, MODEL, "team-b", "0").inc(20)
    kv.labels("pool").set(0.57)
    running.labels(MODEL).set(12)
    scraper = scraper_for(serve(r))
    sample = one(scraper)
    assert scraper.flavour == "llm-d-epp"
    assert (sample.requests_total, sample.requests_running) == (100, 12)
    assert sample.kv_cache_usage == pytest.approx(0.57)


def test_every_dialect_is_declared_once_with_distinct_prefixes() -> None:
    names = [d.name for d in DIALECTS]
    prefixes = [p for d in DIALECTS for p in d.prefixes]
    assert len(names) == len(set(names))
    assert len(prefixes) == len(set(prefixes))
    assert all(d.extract is not None for d in DIALECTS if d.yields == "server")
