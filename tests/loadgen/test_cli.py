"""``infersight loadtest`` against the simulator: stored runs, replay, a captured baseline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from click.testing import CliRunner

from infersight.cli.commands_baseline import baseline as baseline_cli
from infersight.cli.commands_loadtest import loadtest
from infersight.cli.settings import Settings
from infersight.core.errors import Unavailable
from infersight.storage import migrate
from infersight.storage.baselines import get_baseline
from infersight.storage.engine import create_store_engine
from infersight.storage.runs import get_run, list_runs
from infersight.storage.writer import open_writer
from tests.factories import make_records
from tests.loadgen.support import scaled_profile, serving

pytestmark = pytest.mark.e2e


@dataclass
class Obj:
    settings: Settings


def test_a_steady_run_is_stored_and_captured_as_a_baseline(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'lt.db'}"
    with serving(scaled_profile(1.0)) as (base, server, sink):
        args = [
            base,
            "--model",
            server.model,
            "--concurrency",
            "2",
            "--duration",
            "1.5",
            "--input-tokens",
            "fixed:64",
            "--output-tokens",
            "uniform:4:12",
            "--seed",
            "1",
            "--capture-baseline",
            "release-1",
            "--json",
            "--quiet",
        ]
        result = CliRunner().invoke(loadtest, args, obj=Obj(Settings(database_url=url)))
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    engine = create_store_engine(url)
    try:
        (listing,) = list_runs(engine)
        run = get_run(engine, listing.id)
        baseline = get_baseline(engine, "release-1")
    finally:
        engine.dispose()
    assert body["run"] == listing.id
    assert body["requests"] == len(run.results) > 5
    assert len(sink.records) == len(run.results) + 1  # and the preflight request
    assert body["errors"] == 0
    assert {r.trace_id for r in run.results} <= {r.trace_id for r in sink.records}
    assert all(4 <= r.output_tokens <= 12 for r in run.results)
    assert baseline.source == "run"
    assert baseline.requests == len(run.results)
    assert baseline.labels["run"] == str(listing.id)
    assert body["phases"][0]["concurrency"] == 2
    assert "generator" in body
    # One throughput per run: the report, the captured baseline and compare --run agree, on
    # the measured length (to the last completion, past the nominal 1.5 s by the drain).
    last = max(r.done_s for r in run.results)
    assert body["duration_s"] == pytest.approx(last)
    assert body["duration_s"] >= 1.5
    assert body["throughput_rps"] == pytest.approx(len(run.results) / last)
    assert baseline.request_throughput == pytest.approx(body["throughput_rps"])
    assert baseline.duration_s == pytest.approx(body["duration_s"])
    compared = CliRunner().invoke(
        baseline_cli,
        ["compare", "release-1", "--run", str(listing.id), "--json"],
        obj=Obj(Settings(database_url=url)),
    )
    assert compared.exit_code == 0, compared.output
    rows = {m["metric"]: m for m in json.loads(compared.stdout)["metrics"]}
    assert rows["request_throughput"]["candidate"] == pytest.approx(body["throughput_rps"])
    assert rows["output_token_throughput"]["candidate"] == pytest.approx(
        body["output_tokens_per_s"]
    )


def test_a_replay_sends_the_production_shapes_in_order(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'replay.db'}"
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    now = datetime.now(UTC)
    records = make_records(
        np.random.default_rng(3), now - timedelta(minutes=30), 40, span=timedelta(minutes=20)
    )
    records = [r for r in records if r.status.value == "ok"]
    short = [
        r.__class__(
            **{
                **{f: getattr(r, f) for f in r.__dataclass_fields__},
                "input_tokens": 20 + i,
                "output_tokens": 2 + i % 5,
            }
        )
        for i, r in enumerate(records)
    ]
    open_writer(engine).write_requests(short)
    try:
        with serving(scaled_profile(1.0)) as (base, server, sink):
            args = [
                base,
                "--model",
                server.model,
                "--concurrency",
                "1",
                "--duration",
                "1.0",
                "--replay",
                "1h",
                "--quiet",
            ]
            result = CliRunner().invoke(loadtest, args, obj=Obj(Settings(database_url=url)))
        assert result.exit_code == 0, result.output
        (listing,) = list_runs(engine)
        run = get_run(engine, listing.id)
    finally:
        engine.dispose()
    expected = [(r.input_tokens, r.output_tokens) for r in sorted(short, key=lambda r: r.start)]
    sent = [(r.input_tokens, r.output_tokens) for r in run.results]
    assert sent == (expected * 10)[: len(sent)]
    served = {r.trace_id: (r.input_tokens, r.output_tokens) for r in sink.records}
    assert [served[r.trace_id] for r in run.results] == sent
    assert "TTFT p50" in result.stdout
    assert "steady" in result.stdout


def test_a_wrong_model_fails_before_the_run_starts(tmp_path) -> None:
    with serving(scaled_profile(1.0)) as (base, _server, sink):
        args = [base, "--model", "not-served", "--duration", "1", "--no-store", "--quiet"]
        result = CliRunner().invoke(loadtest, args, obj=Obj(Settings()))
    assert isinstance(result.exception, Unavailable)
    assert "404" in result.exception.details["error"]
    assert sink.records == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param(["--levels", "4,2", "--scenario", "step"], "rise", id="falling levels"),
        pytest.param(["--input-tokens", "zipf:3"], "length distribution", id="unknown dist"),
        pytest.param(
            ["--capture-baseline", "x", "--no-store"],
            "needs the store",
            id="a baseline without the store",
        ),
    ],
)
def test_bad_options_are_refused_before_any_request(extra, message) -> None:
    args = ["http://127.0.0.1:9", "--model", "m", "--no-store", "--quiet", *extra]
    result = CliRunner().invoke(loadtest, args, obj=Obj(Settings()))
    assert result.exit_code != 0
    text = result.output + str(getattr(result.exception, "message", ""))
    assert message in text


def test_a_run_in_which_nothing_succeeds_exits_1() -> None:
    with serving(scaled_profile(1.0)) as (base, server, _sink):
        args = [
            base,
            "--model",
            server.model,
            "--concurrency",
            "1",
            "--duration",
            "0.5",
            "--output-tokens",
            "fixed:40000",
            "--no-store",
            "--quiet",
            "--json",
        ]
        result = CliRunner().invoke(loadtest, args, obj=Obj(Settings()))
    assert result.exit_code == 1
    body = json.loads(result.stdout)
    assert body["requests"] == body["errors"] > 0
    assert "no request succeeded" in result.stderr
