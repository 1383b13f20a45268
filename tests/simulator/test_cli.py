"""``infersight simulate``: a scenario into a store and a collector, with progress and truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from sqlalchemy import func, select

from infersight.cli.commands_simulate import simulate
from infersight.storage.engine import create_store_engine
from infersight.storage.tables import gpu_samples, requests, server_samples
from tests.simulator.otlp_receiver import http_receiver

SCENARIO = """
apiVersion: infersight/v1
kind: Scenario
metadata: {name: cli-small}
spec:
  start: "2026-02-01T10:00:00Z"
  duration: 90s
  seed: 5
  sample_interval: 10s
  fleet:
    - profile: llama-3.1-8b-h200x1
      instances: 2
      name_prefix: small
      arrival: {process: poisson, rate: 8}
      mix:
        input: {median: 300, sigma: 0.5}
        output: {median: 60, sigma: 0.5}
  faults:
    - {kind: slow_tokenizer, instance: small-1, start: 30s, end: 60s}
"""


def test_simulate_writes_the_store_exports_spans_and_reports(tmp_path: Path) -> None:
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SCENARIO)
    db = tmp_path / "sim.db"
    truth = tmp_path / "truth.json"
    with http_receiver() as (endpoint, received):
        result = CliRunner().invoke(
            simulate,
            [
                "--scenario",
                str(scenario),
                "--store",
                f"sqlite:///{db}",
                "--otlp-endpoint",
                endpoint,
                "--ground-truth",
                str(truth),
            ],
            catch_exceptions=False,
        )
        spans = received.spans()
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["requests"] > 500  # 8 req/s over the deployment for 90 s
    assert summary["store"]["inserted"] == summary["requests"]
    assert summary["otlp"] == {"exported_spans": 2 * summary["requests"], "failed_spans": 0}
    assert len([s for _, s in spans if s.name == "llm_request"]) == summary["requests"]
    assert "[100.0%]" in result.stderr
    engine = create_store_engine(f"sqlite:///{db}")
    with engine.connect() as c:
        assert c.scalar(select(func.count()).select_from(requests)) == summary["requests"]
        assert c.scalar(select(func.count()).select_from(server_samples)) == 18
        assert c.scalar(select(func.count()).select_from(gpu_samples)) == 18
    engine.dispose()
    (fault,) = json.loads(truth.read_text())
    assert fault["instance"] == "small-1"
    assert fault["expected_cause"] == "preprocessing_slow"
    assert fault["start"] == "2026-02-01T10:00:30+00:00"


def test_simulate_lists_scenarios_and_refuses_bad_input(tmp_path: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(simulate, ["--list"])
    assert "quiet-day" in listed.output.split()
    assert runner.invoke(simulate, []).exit_code == 2
    bad = runner.invoke(simulate, ["--scenario", "quiet-day", "--speed", "fast"])
    assert bad.exit_code == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump({"apiVersion": "infersight/v1", "kind": "Scenario"}))
    refused = runner.invoke(simulate, ["--scenario", str(broken)])
    assert refused.exit_code != 0


def test_seed_and_duration_overrides_are_deterministic(tmp_path: Path) -> None:
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SCENARIO)
    runner = CliRunner()
    args = ["--scenario", str(scenario), "--quiet", "--duration", "45s"]
    a = json.loads(runner.invoke(simulate, [*args, "--seed", "1"]).stdout)
    b = json.loads(runner.invoke(simulate, [*args, "--seed", "1"]).stdout)
    c = json.loads(runner.invoke(simulate, [*args, "--seed", "2"]).stdout)
    assert a["virtual_s"] == 45.0
    assert a["requests"] == b["requests"]
    assert a["requests"] != c["requests"]


def test_simulate_realtime_serves_the_fleet_for_its_duration(tmp_path: Path) -> None:
    scenario = tmp_path / "small.yaml"
    scenario.write_text(SCENARIO.replace("duration: 90s", "duration: 2s").split("  faults:")[0])
    result = CliRunner().invoke(
        simulate,
        ["--scenario", str(scenario), "--realtime", "--listen", "127.0.0.1:0", "--quiet"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert set(summary["urls"]) == {"small-0", "small-1"}
    assert summary["requests"] > 0  # the scenario's own traffic, in real time
    assert "/v1/chat/completions" in result.stderr
    refused = CliRunner().invoke(
        simulate, ["--scenario", str(scenario), "--realtime", "--store", "sqlite:///x.db"]
    )
    assert refused.exit_code == 2


def test_speed_paces_virtual_time_against_the_wall_clock() -> None:
    from infersight.cli.commands_simulate import _Reporter
    from infersight.simulator.fleet import Progress

    slept: list[float] = []
    reporter = _Reporter(60.0, quiet=True, clock=lambda: 0.0, sleep=slept.append)
    reporter(Progress(virtual_s=120.0, duration_s=600.0, requests=10, wall_s=0.5))
    reporter(Progress(virtual_s=180.0, duration_s=600.0, requests=20, wall_s=3.5))  # behind
    assert slept == [pytest.approx(1.5)]  # 120 virtual s at 60× is 2 s of wall time
