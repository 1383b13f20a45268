"""Imports of files the real tools wrote: AIPerf 0.13 and GuideLLM 0.8.1 run against
``infersight simulate --realtime`` (how, and what each tool printed: data/real/README.md).

Expected values are read from the files themselves (or from what the tool printed on its
console, to the digits it printed), never typed in from an earlier import.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bench.harness.baselines import CREATED
from infersight.cli.commands_baseline import baseline as baseline_cli
from infersight.cli.commands_capacity import capacity
from infersight.cli.settings import Settings
from infersight.core.errors import InvalidInput
from infersight.core.importers import detect, parse
from infersight.core.importers.guidellm import to_run
from infersight.core.loadtest import ScenarioKind, measured_capacity, summarise
from infersight.simulator.realtime import CHARS_PER_TOKEN
from infersight.storage.baselines import get_baseline
from infersight.storage.engine import create_store_engine
from infersight.storage.runs import get_run, list_runs

REAL = Path(__file__).parent / "data" / "real"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def aiperf_export():
    return json.loads((REAL / "aiperf_0.13_profile_export_aiperf.json").read_text())


def aiperf_records():
    text = gzip.decompress((REAL / "aiperf_0.13_profile_export.jsonl.gz").read_bytes()).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def guidellm_report():
    return json.loads(gzip.decompress((REAL / "guidellm_0.8.1_benchmarks.json.gz").read_bytes()))


def test_aiperf_0_13_keeps_the_model_and_its_own_token_totals():
    doc = aiperf_export()
    b = parse(doc, name="aiperf", created_at=CREATED, samples=aiperf_records())
    assert detect(doc) == "aiperf"
    assert doc["input_config"]["models"]["items"][0]["name"] == MODEL
    assert b.labels["model"] == MODEL
    assert b.labels["aiperf_version"] == doc["aiperf_version"]
    # Tokens are the file's totals, not throughput × duration.
    assert b.output_tokens == doc["total_output_tokens"]["avg"]
    assert b.input_tokens == doc["total_isl"]["avg"]
    assert b.requests == doc["request_count"]["avg"]
    assert b.request_throughput == pytest.approx(doc["request_throughput"]["avg"])
    # The quantiles AIPerf printed (ms, two decimals): TTFT p50 19.99, p99 78.65; ITL (its
    # per-request mean gap after the first token: TPOT) p50 6.36; request latency p50 422.07.
    assert b.latency["ttft"].quantiles[0.5] * 1e3 == pytest.approx(19.99, abs=0.005)
    assert b.latency["ttft"].quantiles[0.99] * 1e3 == pytest.approx(78.65, abs=0.005)
    assert b.latency["tpot"].quantiles[0.5] * 1e3 == pytest.approx(6.36, abs=0.005)
    assert b.latency["e2e"].quantiles[0.5] * 1e3 == pytest.approx(422.07, abs=0.005)
    assert b.latency["e2e"].quantiles[0.99] * 1e3 == pytest.approx(554.22, abs=0.005)
    # The per-request records give the distributions, one value per successful request.
    e2e = b.latency["e2e"].distribution()
    assert e2e is not None
    assert e2e.count == len(aiperf_records()) == b.requests


def test_a_guidellm_report_imports_one_benchmark_with_itl_as_tpot():
    doc = guidellm_report()
    assert detect(doc) == "guidellm"
    assert doc["metadata"]["guidellm_version"] == "0.8.1"
    bench = doc["benchmarks"][1]  # poisson@4.00
    metrics = bench["metrics"]
    b = parse(doc, name="g", created_at=CREATED, benchmark=1)
    assert b.source == "guidellm"
    assert b.labels["model"] == MODEL
    assert b.labels["strategy"] == "poisson@4.00"
    completed = metrics["request_totals"]["successful"]
    assert b.requests - b.errors == completed == len(bench["requests"]["successful"])
    assert b.duration_s == bench["duration"]
    assert b.request_throughput == pytest.approx(
        metrics["requests_per_second"]["successful"]["mean"]
    )
    assert b.output_tokens == metrics["output_token_count"]["successful"]["total_sum"]
    # What GuideLLM printed for poisson@4.00: TTFT median 20.3 ms, p95 53.8 ms; ITL median
    # 6.4 ms (its TPOT column, 6.6 ms, includes the first token and is not read).
    ttft, tpot, e2e = (b.latency[m] for m in ("ttft", "tpot", "e2e"))
    assert ttft.quantiles[0.5] * 1e3 == pytest.approx(20.3, abs=0.05)
    assert ttft.quantiles[0.95] * 1e3 == pytest.approx(53.8, abs=0.05)
    assert tpot.quantiles[0.5] * 1e3 == pytest.approx(6.4, abs=0.05)
    itl = metrics["inter_token_latency_ms"]["successful"]
    tpot_theirs = metrics["time_per_output_token_ms"]["successful"]
    assert tpot.quantiles[0.5] == pytest.approx(itl["median"] / 1e3)
    assert tpot.quantiles[0.5] < tpot_theirs["median"] / 1e3
    assert tpot.quantiles[0.99] == pytest.approx(itl["percentiles"]["p99"] / 1e3)
    assert tpot.quantiles[0.001] == pytest.approx(itl["percentiles"]["p001"] / 1e3)
    assert e2e.quantiles[0.5] == pytest.approx(metrics["request_latency"]["successful"]["median"])
    # Counts are requests (ITL's own count is token gaps), distributions from the records.
    assert tpot.count == ttft.count == e2e.count == completed
    assert itl["count"] > completed
    dist = e2e.distribution()
    assert dist is not None
    latencies = [r["request_latency"] for r in bench["requests"]["successful"]]
    assert dist.max == pytest.approx(max(latencies))


def test_the_simulator_counted_guidellm_content_part_prompts_as_their_text():
    # GuideLLM sends ``content: [{"type": "text", "text": ...}]``; the simulator's usage (which
    # GuideLLM recorded as prompt_tokens) is the text's length at four characters a token.
    requests = [r for b in guidellm_report()["benchmarks"] for r in b["requests"]["successful"]]
    sent = json.loads(requests[0]["request_args"])["body"]["messages"][0]["content"]
    assert sent[0]["type"] == "text"
    counted = [r["prompt_tokens"] for r in requests]
    text = [math.ceil(r["input_metrics"]["text_characters"] / CHARS_PER_TOKEN) for r in requests]
    assert counted == text


def test_a_guidellm_sweep_needs_a_benchmark_chosen_and_refuses_a_missing_one():
    doc = guidellm_report()
    with pytest.raises(InvalidInput, match="3 benchmarks"):
        parse(doc, name="g", created_at=CREATED)
    with pytest.raises(InvalidInput, match="no benchmark 3"):
        parse(doc, name="g", created_at=CREATED, benchmark=3)
    with pytest.raises(InvalidInput, match="only a GuideLLM report"):
        parse(aiperf_export(), name="a", created_at=CREATED, benchmark=0)
    broken = dict(doc, benchmarks=[{"metrics": {}}])
    with pytest.raises(InvalidInput, match="request_totals"):
        parse(broken, name="g", created_at=CREATED)


def test_a_guidellm_sweep_becomes_a_step_run_whose_levels_give_a_capacity():
    doc = guidellm_report()
    run = to_run(doc, name="sweep")
    assert run.scenario is ScenarioKind.STEP
    assert [p.label for p in run.phases] == ["poisson@2.00", "poisson@4.00", "poisson@8.00"]
    totals = [b["metrics"]["request_totals"]["successful"] for b in doc["benchmarks"]]
    ok = [sum(r.ok and r.phase == p.index for r in run.results) for p in run.phases]
    assert ok == totals
    means = [b["metrics"]["request_concurrency"]["successful"]["mean"] for b in doc["benchmarks"]]
    assert [p.concurrency for p in run.phases] == [max(1, round(m)) for m in means]
    assert run.model == MODEL
    levels = summarise(run, warmup=0.0)
    rates = [s.throughput_rps for s in levels]
    assert rates == sorted(rates)  # more offered load, more delivered
    for level, bench in zip(levels, doc["benchmarks"], strict=True):
        theirs = bench["metrics"]["time_to_first_token_ms"]["successful"]["median"] / 1e3
        assert level.quantile("ttft") == pytest.approx(theirs, rel=0.05)
    best = measured_capacity(levels, ttft_p99_max_s=1.0)
    assert best.throughput_rps == pytest.approx(max(rates))


@dataclass
class Obj:
    settings: Settings


def test_baseline_import_stores_a_guidellm_level_and_the_sweep_as_a_run(tmp_path):
    report = tmp_path / "benchmarks.json"
    report.write_bytes(gzip.decompress((REAL / "guidellm_0.8.1_benchmarks.json.gz").read_bytes()))
    url = f"sqlite:///{tmp_path / 'g.db'}"
    runner = CliRunner()
    obj = Obj(Settings(database_url=url))
    refused = runner.invoke(baseline_cli, ["import", str(report), "--name", "g"], obj=obj)
    assert isinstance(refused.exception, InvalidInput)  # the CLI's main() prints it
    assert "3 benchmarks" in str(refused.exception)
    args = ["import", str(report), "--name", "g", "--benchmark", "1", "--as-run"]
    result = runner.invoke(baseline_cli, args, obj=obj)
    assert result.exit_code == 0, result.output
    assert "stored run" in result.output
    engine = create_store_engine(url)
    try:
        saved = get_baseline(engine, "g")
        (listing,) = list_runs(engine)
        run = get_run(engine, listing.id)
    finally:
        engine.dispose()
    assert saved.labels["strategy"] == "poisson@4.00"
    assert len(run.phases) == 3
    assert len(run.results) == sum(
        len(b["requests"]["successful"]) + len(b["requests"].get("errored") or [])
        for b in json.loads(report.read_text())["benchmarks"]
    )
    assert np.isfinite([r.e2e_s for r in run.results]).all()
    # The stored sweep is a measured capacity for the plan: its best level within targets.
    args = ["plan", "--model", "llama-3-8b", "--gpu", "h200", "--peak-qps", "50"]
    args += ["--run", str(listing.id), "--output-tokens", "64", "--json"]  # GuideLLM's length
    planned = runner.invoke(capacity, args, obj=obj)
    assert planned.exit_code == 0, planned.output
    body = json.loads(planned.output)
    best = measured_capacity(summarise(run))
    assert best.mean_output_tokens == 64
    assert body["instances"]["capacity_rps"] == pytest.approx(best.throughput_rps)
    assert body["instances"]["capacity_source"].startswith(f"run {listing.id}")
