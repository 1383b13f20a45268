"""``infersight capacity plan`` and ``GET /api/v1/capacity`` over a real store."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from infersight.cli.commands_capacity import capacity
from infersight.cli.settings import Settings
from infersight.core.errors import InvalidInput
from infersight.core.loadtest import measured_capacity, summarise
from infersight.storage.runs import save_run
from tests.api.conftest import Api
from tests.capacity.support import PER_USER_RPS, saturating_run
from tests.conftest import Store


@dataclass
class Obj:
    settings: Settings


def test_a_step_runs_capacity_is_its_knee_level() -> None:
    best = measured_capacity(summarise(saturating_run(8)))
    assert best.concurrency == 8
    assert best.throughput_rps == pytest.approx(PER_USER_RPS * 8, rel=0.05)
    assert best.mean_output_tokens == pytest.approx(100)


def test_a_latency_target_moves_the_operating_point_below_the_knee() -> None:
    run = saturating_run(8)
    # TTFT is 50 ms + 10 ms a user below the knee: a 115 ms target is met up to 6 users.
    best = measured_capacity(summarise(run), ttft_p99_max_s=0.115, tpot_p99_max_s=0.01)
    assert best.concurrency == 6
    with pytest.raises(InvalidInput, match="no level"):
        measured_capacity(summarise(run), tpot_p99_max_s=0.001)


def test_plan_with_a_given_capacity_prints_instances_and_checks(tmp_path) -> None:
    obj = Obj(Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}"))
    args = [
        "plan",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h100",
        "--peak-qps",
        "100",
        "--capacity-rps",
        "12",
        "--concurrency",
        "64",
        "--ttft-target",
        "0.5",
        "--tpot-target",
        "0.05",
        "--json",
    ]
    result = CliRunner().invoke(capacity, args, obj=obj)
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["instances"]["count"] == 12  # ceil(100 × 1.4 / 12)
    assert body["instances"]["range"] == {"headroom_30": 11, "headroom_50": 13}
    assert body["memory"]["kv_bytes_per_token"] == 128 * 1024
    assert body["memory"]["kv_cache_bytes"] == 128 * 1024 * 64 * 768
    assert body["feasible"] is True
    text = CliRunner().invoke(capacity, args[:-1], obj=obj)
    assert "12 instances" in text.output
    assert "floors: TPOT ≥" in text.output


def test_an_impossible_target_fails_the_plan_with_exit_code_1(tmp_path) -> None:
    obj = Obj(Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}"))
    args = [
        "plan",
        "--model",
        "llama-3-70b",
        "--gpu",
        "h100",
        "--tp",
        "4",
        "--peak-qps",
        "5",
        "--capacity-rps",
        "2",
        "--concurrency",
        "16",
        "--tpot-target",
        "0.005",
    ]
    result = CliRunner().invoke(capacity, args, obj=obj)
    assert result.exit_code == 1
    assert "FAIL  tpot" in result.output


def test_plan_from_a_stored_step_run(store: Store) -> None:
    run_id = save_run(store.engine, saturating_run(8))
    obj = Obj(Settings(database_url=store.url))
    args = [
        "plan",
        "--model",
        "llama-3-8b",
        "--gpu",
        "h200",
        "--peak-qps",
        "160",
        "--run",
        str(run_id),
        "--output-tokens",
        "200",
        "--json",
    ]
    result = CliRunner().invoke(capacity, args, obj=obj)
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    # 16 req/s of 100-token answers at the knee is 8 req/s of 200-token answers.
    assert body["instances"]["capacity_rps"] == pytest.approx(8, rel=0.05)
    assert body["instances"]["count"] == 28  # ceil(160 × 1.4 / 8)
    assert body["concurrency"] == {"per_instance": 8, "source": "the measured level"}
    assert body["instances"]["capacity_source"].startswith(f"run {run_id}")


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="neither a capacity nor a run"),
        pytest.param(["--capacity-rps", "3", "--run", "1"], id="both a capacity and a run"),
    ],
)
def test_plan_needs_exactly_one_capacity_source(tmp_path, args) -> None:
    obj = Obj(Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}"))
    base = ["plan", "--model", "llama-3-8b", "--gpu", "h100", "--peak-qps", "5"]
    result = CliRunner().invoke(capacity, base + args, obj=obj)
    assert result.exit_code == 2
    assert "exactly one of" in result.output


def test_the_capacity_endpoint_answers_a_plan(api: Api, store: Store) -> None:
    run_id = save_run(store.engine, saturating_run(8))
    query = {
        "model": "llama-2-7b",
        "gpu": "a100",
        "peak_qps": 40,
        "input_tokens": 512,
        "output_tokens": 512,
        "concurrency": 32,
    }
    given = api.get("/api/v1/capacity", params={**query, "capacity_rps": 10})
    assert given.status_code == 200, given.text
    body = given.json()
    assert body["memory"]["kv_cache_bytes"] == 16 * 1024**3  # 0.5 MiB × 32 × 1024
    assert body["instances"]["count"] == 6  # ceil(40 × 1.4 / 10)
    assert body["floors"]["tpot_s"] == pytest.approx(13.48e9 / 2.039e12)
    measured = api.get("/api/v1/capacity", params={**query, "run": run_id})
    assert measured.status_code == 200, measured.text
    assert measured.json()["instances"]["capacity_rps"] == pytest.approx(16 * 100 / 512, rel=0.05)


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        pytest.param({"model": "gpt-9"}, 404, "not_found", id="an unknown model is 404"),
        pytest.param({"gpu": "tpu"}, 404, "not_found", id="an unknown GPU is 404"),
        pytest.param(
            {"run": 999_999, "capacity_rps": None}, 404, "not_found", id="a missing run is 404"
        ),
        pytest.param({"run": 1}, 400, "invalid_input", id="a run and a capacity is 400"),
        pytest.param({"tpot_target": -1}, 400, "invalid_input", id="a negative target is 400"),
        pytest.param({"peak_qps": "lots"}, 400, "invalid_input", id="a non-number is 400"),
    ],
)
def test_the_capacity_endpoint_refuses_bad_queries(api: Api, params, status, code) -> None:
    query = {
        "model": "llama-3-8b",
        "gpu": "h100",
        "peak_qps": 5,
        "capacity_rps": 2,
        "concurrency": 4,
        **params,
    }
    response = api.get("/api/v1/capacity", params={k: v for k, v in query.items() if v is not None})
    assert response.status_code == status
    assert response.json()["error"]["code"] == code


def test_the_capacity_endpoint_needs_a_token_off_loopback(make_api) -> None:
    secured = make_api(api_tokens="read:read-token-0123456789", listen="0.0.0.0:8080")
    response = secured.get("/api/v1/capacity", params={"model": "x", "gpu": "y", "peak_qps": 1})
    assert response.status_code == 401
