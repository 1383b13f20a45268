"""``infersight baseline …``: the CI gate exits 1 on a regression and writes a Markdown summary."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import pytest
from click.testing import CliRunner

from bench.harness.baselines import CREATED, synthetic_run
from infersight.cli.commands_baseline import baseline
from infersight.cli.group import cli
from infersight.cli.settings import Settings
from infersight.core.errors import InvalidInput
from infersight.core.loadtest import LoadTestRun, Phase, RequestResult, ScenarioKind
from infersight.storage import migrate
from infersight.storage.baselines import save_baseline
from infersight.storage.engine import create_store_engine
from infersight.storage.runs import save_run
from infersight.storage.writer import open_writer
from tests.baselines.test_importers import DATA, load
from tests.doubles import NOW
from tests.factories import make_records


@dataclass
class Obj:
    settings: Settings


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    engine.dispose()
    return url


def run(url, *args):
    return CliRunner().invoke(baseline, list(args), obj=Obj(Settings(database_url=url)))


def stored(url, *baselines):
    engine = create_store_engine(url)
    try:
        for b in baselines:
            save_baseline(engine, b)
    finally:
        engine.dispose()


def test_the_gate_passes_the_same_configuration_and_fails_a_15_percent_slower_one(url, tmp_path):
    rng = np.random.default_rng(3)
    stored(
        url,
        synthetic_run(rng, "main"),
        synthetic_run(rng, "pr-same"),
        synthetic_run(rng, "pr-slow", slowdown=1.15),
    )
    same = run(url, "compare", "main", "--against", "pr-same")
    assert same.exit_code == 0, same.output
    assert same.output.splitlines()[0] == "baseline main vs pr-same: pass"
    summary = tmp_path / "comment.md"
    slow = run(url, "compare", "main", "--against", "pr-slow", "--markdown", str(summary))
    assert slow.exit_code == 1, slow.output
    assert "pr-slow: regressed" in slow.output.splitlines()[0]
    assert summary.read_text().startswith("### ❌ infersight baseline check: regressed")
    relaxed = run(url, "compare", "main", "--against", "pr-slow", "--threshold", "0.5", "--json")
    assert relaxed.exit_code == 0, relaxed.output
    assert json.loads(relaxed.output)["verdict"] in ("pass", "inconclusive")


def test_import_then_compare_a_result_file(url, tmp_path):
    imported = run(url, "import", str(DATA / "vllm_result.json"), "--name", "vllm-main")
    assert imported.exit_code == 0, imported.output
    assert imported.output.startswith("created baseline vllm-main (vllm: 200 requests")
    doc = load("vllm_result.json")
    for key in ("mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms"):
        doc[key] *= 1.2
    slower = tmp_path / "pr.json"
    slower.write_text(json.dumps(doc))
    gate = run(url, "compare", "vllm-main", "--file", str(slower), "--json")
    assert gate.exit_code == 1, gate.output
    verdicts = {m["metric"]: m["verdict"] for m in json.loads(gate.output)["metrics"]}
    assert verdicts["tpot.p50"] == "regressed"
    assert verdicts["ttft.p50"] == "pass"
    per_metric = run(
        url, "compare", "vllm-main", "--file", str(slower), "--metric-threshold", "tpot=0.25"
    )
    assert per_metric.exit_code == 0, per_metric.output
    samples = run(
        url,
        "import",
        str(DATA / "llmperf_summary.json"),
        "--name",
        "llmperf",
        "--samples",
        str(DATA / "llmperf_individual_responses.json"),
    )
    assert samples.exit_code == 0, samples.output
    aiperf = run(
        url,
        "import",
        str(DATA / "aiperf_profile_export_aiperf.json"),
        "--name",
        "aiperf",
        "--samples",
        str(DATA / "aiperf_profile_export.jsonl"),
    )
    assert aiperf.exit_code == 0, aiperf.output
    listing = run(url, "list").output.splitlines()
    assert listing[0].split()[:2] == ["NAME", "SOURCE"]
    rows = {line.split()[0]: line.split() for line in listing[1:]}
    assert rows["llmperf"][-1] == "yes"
    assert rows["aiperf"][-1] == "yes"
    assert rows["vllm-main"][-1] == "no"
    as_json = json.loads(run(url, "list", "--json").output)
    assert {b["name"] for b in as_json} == {"vllm-main", "llmperf", "aiperf"}


def store_two_hours(url: str) -> None:
    """800 requests over the two hours before ``NOW`` in the store at ``url``."""
    engine = create_store_engine(url)
    try:
        records = make_records(
            np.random.default_rng(4), NOW - timedelta(hours=2), 800, span=timedelta(hours=2)
        )
        open_writer(engine).write_requests(records)
    finally:
        engine.dispose()


def test_capture_a_window_of_the_store_and_compare_it_through_the_main_command(url):
    store_two_hours(url)
    window = [
        "--start",
        str(int((NOW - timedelta(hours=2)).timestamp())),
        "--end",
        str(int(NOW.timestamp())),
    ]
    runner = CliRunner()
    captured = runner.invoke(
        cli, ["--store", url, "baseline", "capture", "prod", *window, "--model", "llama-8b"]
    )
    assert captured.exit_code == 0, captured.output
    assert captured.output.startswith("created baseline prod (window: 400 requests")
    same = runner.invoke(
        cli, ["--store", url, "baseline", "compare", "prod", *window, "--model", "llama-8b"]
    )
    assert same.exit_code == 0, same.output
    assert "pass" in same.output.splitlines()[0]


def test_a_load_test_run_is_captured_and_compared(url):
    rng = np.random.default_rng(6)
    results = tuple(
        RequestResult(
            seq=i,
            phase=0,
            sent_s=i * 0.1,
            e2e_s=float(rng.lognormal(0.0, 0.3)),
            ttft_s=float(rng.lognormal(-2.0, 0.3)),
            tpot_s=float(rng.lognormal(-4.0, 0.2)),
            input_tokens=500,
            output_tokens=100,
        )
        for i in range(600)
    )
    loadtest = LoadTestRun(
        name="steady",
        scenario=ScenarioKind.STEADY,
        target="http://127.0.0.1:8000",
        model="llama-8b",
        started_at=CREATED,
        phases=(Phase(0, "steady", 8, 0.0, 60.0),),
        results=results,
    )
    engine = create_store_engine(url)
    try:
        run_id = save_run(engine, loadtest)
    finally:
        engine.dispose()
    captured = run(url, "capture", "nightly", "--run", str(run_id))
    assert captured.exit_code == 0, captured.output
    assert captured.output.startswith("created baseline nightly (run: 600 requests")
    again = run(url, "compare", "nightly", "--run", str(run_id))
    assert again.exit_code == 0, again.output
    mixed = run(url, "capture", "x", "--run", str(run_id), "--model", "m")
    assert isinstance(mixed.exception, InvalidInput)
