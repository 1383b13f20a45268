"""``infersight scaling backtest`` through click, and the store's recorded demand behind
``--from-store`` (``storage.demand``) on a real SQLite store."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from infersight.cli.commands_scaling import scaling
from infersight.cli.settings import Settings
from infersight.core.errors import InvalidInput, NotFound
from infersight.storage import migrate
from infersight.storage.demand import recorded_demand
from infersight.storage.engine import create_store_engine
from infersight.storage.writer import open_writer
from tests.benchmarks import run_bench
from tests.factories import make_records

FAST = ["--step", "60", "--quiet"]
DAY = date(2026, 11, 20)
MODEL = "llama-8b"


@dataclass
class Obj:
    settings: Settings


def _store(tmp_path: Path, days: tuple[date, ...] = ()) -> Obj:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = create_store_engine(url)
    migrate.upgrade(engine)
    writer = open_writer(engine)
    for i, day in enumerate(days):
        start = datetime(day.year, day.month, day.day, 9, tzinfo=UTC)
        records = make_records(
            np.random.default_rng(i),
            start,
            1200,
            span=timedelta(hours=2),
            models=(MODEL,),
            error_rate=0.0,
        )
        writer.write_requests(records)
    engine.dispose()
    return Obj(Settings(database_url=url))


def test_the_backtest_prints_its_setting_and_one_row_per_policy() -> None:
    ran = CliRunner().invoke(scaling, ["backtest", "--seed", "3", *FAST])
    assert ran.exit_code == 0, ran.output
    out = ran.output
    assert "cold start 600 s" in out
    assert "seed 3" in out
    assert "rebound 14:00–14:20" in out
    rows = [line.split()[0] for line in out.splitlines()[-4:]]
    assert rows == ["static", "reactive", "reactive", "infersight"]


def test_the_json_answer_holds_every_figure_and_progress_goes_to_stderr() -> None:
    ran = CliRunner().invoke(scaling, ["backtest", "--format", "json", "--step", "60"])
    assert ran.exit_code == 0, ran.output
    figures = json.loads(ran.stdout)
    assert figures["cold_start_s"] == 600
    assert figures["results"][0]["policy"] == "static (peak)"
    for r in figures["results"]:
        assert 0 <= r["attainment"] <= 1
        assert r["cost"] == pytest.approx(r["gpu_hours"] * 4.0)
    assert figures["price_source"] == "the default price"
    assert "backtest: [4/4] done" in ran.stderr
    assert "\r" not in ran.stderr  # one line per policy: readable in a log


def test_a_policy_file_drives_the_recommender(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "apiVersion: infersight/v1\nkind: ScalingPolicy\nmetadata: {name: no-util}\n"
        "spec: {replicas: {min: 2, max: 20}, reactive: {gpuUtil: {up: 1.0, down: 0.3}}}\n"
    )
    ran = CliRunner().invoke(
        scaling, ["backtest", "--policy", str(path), "--cold-start", "5m", *FAST]
    )
    assert ran.exit_code == 0, ran.output
    assert "recommender policy: no-util" in ran.output
    assert "cold start 300 s" in ran.output


def test_a_bad_policy_file_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken-policy.yaml"
    path.write_text(
        "apiVersion: infersight/v1\nkind: ScalingPolicy\nmetadata: {name: x}\n"
        "spec: {replicas: {min: 5, max: 2}}\n"
    )
    ran = CliRunner().invoke(scaling, ["backtest", "--policy", str(path), *FAST])
    assert isinstance(ran.exception, InvalidInput)
    assert "broken-policy.yaml" in str(ran.exception)
    assert "spec.replicas" in str(ran.exception) or "max_replicas" in str(ran.exception)


def test_from_store_on_an_empty_store_says_which_model_and_day_had_no_requests(
    tmp_path: Path,
) -> None:
    obj = _store(tmp_path)
    ran = CliRunner().invoke(
        scaling,
        ["backtest", "--from-store", "--day", DAY.isoformat(), "--served-model", MODEL, *FAST],
        obj=obj,
    )
    assert isinstance(ran.exception, NotFound)
    assert MODEL in str(ran.exception)
    assert DAY.isoformat() in str(ran.exception)


def test_from_store_replays_the_recorded_day_with_its_history_weeks(tmp_path: Path) -> None:
    obj = _store(tmp_path, (DAY, DAY - timedelta(weeks=1)))
    ran = CliRunner().invoke(
        scaling,
        ["backtest", "--from-store", "--day", DAY.isoformat(), "--served-model", MODEL,
         "--format", "json", *FAST],
        obj=obj,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    figures = json.loads(ran.stdout)
    assert figures["requests"] == pytest.approx(1200)
    assert "1 history weeks" in figures["demand"]
    assert "weeks 2, 3, 4 earlier had no requests" in figures["demand"]
    # Priced by the active cost model (the bundled example prices here: H200 at $4.00).
    assert figures["price_source"] == "NVIDIA H200 in cost model 'example'"
    assert figures["price_per_gpu_hour"] == pytest.approx(4.0)
    other = CliRunner().invoke(
        scaling,
        ["backtest", "--from-store", "--day", DAY.isoformat(), "--served-model", "gpt-x", *FAST],
        obj=obj,
    )
    assert isinstance(other.exception, NotFound)
    assert f"models with requests that day: {MODEL}" in str(other.exception)


def test_recorded_demand_counts_each_minute_of_the_day(tmp_path: Path) -> None:
    obj = _store(tmp_path, (DAY,))
    engine = create_store_engine(obj.settings.database_url)
    try:
        got = recorded_demand(engine, MODEL, DAY, weeks=2)
    finally:
        engine.dispose()
    assert got.requests == pytest.approx(1200)
    busy = [m for m, n in enumerate(got.minutes) if n]
    assert busy[0] >= 9 * 60
    assert busy[-1] < 11 * 60
    assert got.history == ()
    assert got.weeks_without_data == (1, 2)


def test_the_scaling_benchmark_prints_its_table_and_checks_the_target(tmp_path: Path) -> None:
    ran = run_bench(
        "bench_scaling", "--step", "60", "--seeds", "2", "--cold-starts", "",
        "--history-scales", "0.7",
        figures=tmp_path / "scaling.json",
    )  # fmt: skip
    assert "cold start 600 s" in ran.out
    assert [v["policy"] for v in ran.figures["verdicts"]] == ["infersight"]
    assert [(o["seed"], o["history_scale"]) for o in ran.figures["others"]] == [(2, 1.0), (1, 0.7)]
    assert "history at 0.7 × the day" in ran.out
    assert ran.figures["results"][0]["policy"] == "static (peak)"
