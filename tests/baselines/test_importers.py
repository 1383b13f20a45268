"""Importers of vllm bench serve, LLMPerf and AIPerf results, on files composed from their keys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.harness.baselines import CREATED
from infersight.core.baseline_compare import Verdict, compare
from infersight.core.errors import InvalidInput
from infersight.core.importers import detect, parse

DATA = Path(__file__).parent / "data"


def load(name: str):
    return json.loads((DATA / name).read_text())


def records(name: str):
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("vllm_result.json", "vllm"),
        ("vllm_result_detailed.json", "vllm"),
        ("llmperf_summary.json", "llmperf"),
        ("aiperf_profile_export_aiperf.json", "aiperf"),
    ],
)
def test_each_format_is_recognised_from_its_keys(name, fmt):
    assert detect(load(name)) == fmt


def test_a_vllm_summary_gives_percentiles_in_seconds_and_no_distribution():
    b = parse(load("vllm_result.json"), name="vllm-a", created_at=CREATED)
    assert b.source == "vllm"
    assert (b.requests, b.errors, b.duration_s) == (200, 2, 42.5)
    assert b.request_throughput == pytest.approx(198 / 42.5)
    assert b.output_token_throughput == pytest.approx(25344 / 42.5)
    assert b.latency["ttft"].quantiles == pytest.approx({0.5: 0.0582, 0.99: 0.1413})
    assert b.latency["ttft"].mean == pytest.approx(0.06451)
    assert b.latency["tpot"].quantiles == pytest.approx({0.5: 0.0241, 0.99: 0.0339})
    assert "e2e" not in b.latency  # e2el was not among --percentile-metrics
    assert b.latency["ttft"].sketch is None
    assert b.labels["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert b.labels["max_concurrency"] == "16"


def test_a_default_flags_vllm_result_measures_e2e_from_its_latencies():
    # vllm bench serve --save-result without --save-detailed drops ttfts/itls/errors but keeps
    # the per-request ``latencies``; e2el is not a default --percentile-metric.
    doc = load("vllm_result_default_flags.json")
    assert "mean_e2el_ms" not in doc
    assert "errors" not in doc
    b = parse(doc, name="vllm-default", created_at=CREATED)
    e2e = b.latency["e2e"]
    ok = sorted(v for v in doc["latencies"] if v > 0)  # the two failures stay at 0
    assert e2e.count == len(ok) == doc["completed"] == 38
    assert e2e.distribution() is not None
    assert e2e.quantiles[0.99] == pytest.approx(float(np.quantile(ok, 0.99)), rel=0.02)
    assert e2e.quantiles[0.5] == pytest.approx(float(np.median(ok)), rel=0.02)
    assert b.latency["tpot"].sketch is None  # summary-only metrics


def test_an_e2e_regression_in_default_flags_vllm_results_fails_the_gate():
    doc = load("vllm_result_default_flags.json")
    slower = dict(doc, latencies=[v * 1.3 for v in doc["latencies"]])
    before = parse(doc, name="before", created_at=CREATED)
    after = parse(slower, name="after", created_at=CREATED)
    result = compare(before, after, np.random.default_rng(0))
    got = {m.name: m.verdict for m in result.metrics}
    assert got["e2e.p50"] is Verdict.REGRESSED
    assert result.verdict is Verdict.REGRESSED


def test_vllm_latencies_of_the_wrong_shape_are_refused():
    doc = load("vllm_result_detailed.json")
    with pytest.raises(InvalidInput, match="latencies and errors"):
        parse(dict(doc, latencies=[0.3]), name="x", created_at=CREATED)
    with pytest.raises(InvalidInput, match="not a number"):
        parse(dict(load("vllm_result.json"), latencies=["slow"]), name="x", created_at=CREATED)


def test_a_detailed_vllm_result_rebuilds_per_request_values_of_the_successes():
    doc = load("vllm_result_detailed.json")
    b = parse(doc, name="vllm-b", created_at=CREATED)
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    ttft = b.latency["ttft"].distribution()
    e2e = b.latency["e2e"].distribution()
    tpot = b.latency["tpot"].distribution()
    assert ttft is not None
    assert e2e is not None
    assert tpot is not None
    assert ttft.count == e2e.count == len(ok) == 38
    assert b.errors == 2
    expected_e2e = [doc["ttfts"][i] + sum(doc["itls"][i]) for i in ok]
    assert e2e.max == pytest.approx(max(expected_e2e))
    expected_tpot = [sum(doc["itls"][i]) / (doc["output_lens"][i] - 1) for i in ok]
    assert tpot.min == pytest.approx(min(expected_tpot))
    # The file's own percentiles win over the ones computed from the samples.
    assert b.latency["ttft"].quantiles[0.5] == pytest.approx(doc["median_ttft_ms"] / 1000)
    assert b.latency["e2e"].quantiles[0.99] == pytest.approx(doc["p99_e2el_ms"] / 1000)


def test_an_llmperf_summary_derives_duration_from_the_completion_rate():
    b = parse(load("llmperf_summary.json"), name="llmperf-a", created_at=CREATED)
    assert b.source == "llmperf"
    assert b.duration_s == pytest.approx(318 / 119.25 * 60)
    assert (b.requests, b.errors) == (320, 2)
    assert b.request_throughput == pytest.approx(119.25 / 60)
    assert b.output_token_throughput == pytest.approx(301.7)
    assert b.latency["ttft"].quantiles[0.99] == pytest.approx(0.612)
    assert b.latency["tpot"].quantiles[0.5] == pytest.approx(0.0224)
    assert b.latency["e2e"].quantiles[0.9] == pytest.approx(4.61)
    assert b.output_tokens == round(151.6 * 318)
    assert b.labels["model"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_llmperf_individual_responses_give_the_distribution_without_failed_requests():
    individual = load("llmperf_individual_responses.json")
    b = parse(
        load("llmperf_summary.json"), name="llmperf-b", created_at=CREATED, samples=individual
    )
    sketch = b.latency["ttft"].distribution()
    assert sketch is not None
    assert sketch.count == sum(1 for r in individual if r["error_code"] is None) == 29
    assert b.latency["ttft"].quantiles[0.99] == pytest.approx(0.612)  # the summary's own


def test_an_aiperf_export_converts_milliseconds_and_counts_errors():
    b = parse(load("aiperf_profile_export_aiperf.json"), name="aiperf-a", created_at=CREATED)
    assert b.source == "aiperf"
    assert (b.requests, b.errors, b.duration_s) == (504, 4, 100.0)
    assert b.request_throughput == pytest.approx(5.0)
    assert b.latency["e2e"].quantiles[0.99] == pytest.approx(3.37124)
    assert b.latency["ttft"].quantiles[0.5] == pytest.approx(0.1712)
    assert b.latency["tpot"].quantiles[0.95] == pytest.approx(0.0198)
    assert b.latency["e2e"].count == 500
    assert b.output_tokens == round(751.5 * 100)
    assert b.labels["model"] == "Qwen/Qwen3-8B"


def test_aiperf_per_request_records_give_the_distribution():
    rows = records("aiperf_profile_export.jsonl")
    b = parse(
        load("aiperf_profile_export_aiperf.json"), name="aiperf-b", created_at=CREATED, samples=rows
    )
    sketch = b.latency["ttft"].distribution()
    assert sketch is not None
    assert sketch.count == 24
    assert sketch.max == pytest.approx(
        max(r["metrics"]["time_to_first_token"]["value"] for r in rows if r["error"] is None) / 1000
    )


@pytest.mark.parametrize(
    ("doc", "fmt", "message"),
    [
        ({"hello": 1}, None, "not a vllm bench serve"),
        ([1, 2], None, "not a vllm bench serve"),
        ({"duration": 10, "completed": 5}, "vllm", "request_throughput"),
        ({"duration": "soon", "completed": 5, "request_throughput": 1}, "vllm", "not a number"),
        (
            {"duration": 10, "completed": 5, "request_throughput": 1, "output_throughput": 2},
            "vllm",
            "no TTFT",
        ),
        (
            {"results_num_completed_requests": 0, "results_num_completed_requests_per_min": 0},
            "llmperf",
            "no request",
        ),
        (
            {
                "request_latency": {"unit": "fortnights", "avg": 1},
                "request_count": {"avg": 2},
                "request_throughput": {"avg": 1},
            },
            "aiperf",
            "unknown time unit",
        ),
        ({"request_latency": {"unit": "ms"}}, "aiperf", "request_count"),
        ({"a": 1}, "gatling", "unknown result format"),
    ],
)
def test_malformed_results_are_refused_with_a_clear_message(doc, fmt, message):
    with pytest.raises(InvalidInput, match=message):
        parse(doc, name="bad", created_at=CREATED, fmt=fmt)
