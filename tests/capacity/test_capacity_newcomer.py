"""Capacity as a newcomer meets it (issue 35, item 6).

``infersight capacity plan --model meta-llama/Llama-3.1-8B-Instruct --gpu H100 --peak-qps 20
--run 1`` on the demo's store answered 65 instances from "0.43 req/s" while the Capacity page
showed 3.7 req/s for the same run: it rescaled the run's ~30-token answers to a default of 256
and planned H100 from a simulated H200 run without a word. Now a run is planned at its own
lengths unless others are given, every step from the measured figure to the planned one is
said (CLI text, its JSON and the API answer alike, and the page says why its figure can differ),
and every GPU the cost model prices is one the plan knows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from infersight.cli.commands_capacity import capacity
from infersight.cli.demo_seed import store_step_run
from infersight.cli.settings import Settings
from infersight.core.errors import NotFound
from infersight.core.loadtest import measured_capacity, summarise
from infersight.service.capacity import load_catalog
from infersight.service.cost_spec import example_model
from infersight.storage.runs import get_run
from tests.api.conftest import Api
from tests.conftest import Store

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass
class Obj:
    settings: Settings


def _plan(store: Store, *args: str) -> tuple[int, str]:
    obj = Obj(Settings(database_url=store.url))
    base = ["plan", "--model", MODEL, "--gpu", "H100", "--peak-qps", "20"]
    result = CliRunner().invoke(capacity, [*base, *args], obj=obj)
    return result.exit_code, result.output


def test_the_demo_run_is_planned_at_its_own_length_with_every_step_said(
    store: Store, api: Api
) -> None:
    run = store_step_run(store.sql)  # the demo's: a simulated, slowed H200 instance
    best = measured_capacity(summarise(get_run(store.engine, run.id)))
    assert best.mean_output_tokens < 64  # ~30-token answers

    code, out = _plan(store, "--run", str(run.id), "--json")
    assert code == 0, out
    body = json.loads(out)
    # The Capacity page's figure: no silent rescale to a default length.
    assert body["instances"]["capacity_rps"] == pytest.approx(best.throughput_rps)
    assert body["instances"]["measured_capacity_rps"] == pytest.approx(best.throughput_rps)
    assert body["output_tokens"] == round(best.mean_output_tokens)
    steps = "\n".join(body["instances"]["capacity_steps"])
    assert f"run {run.id}" in steps
    assert "the run's mean" in steps  # where the planned length came from
    assert "simulated" in steps  # the run measured the simulator, not a GPU
    assert "h200" in steps.lower()
    assert "h100" in steps.lower()  # and the plan is for another GPU: said, not converted

    code, text = _plan(store, "--run", str(run.id))
    assert code == 0, text
    assert f"{best.throughput_rps:.3g} req/s" in text
    assert "simulated" in text
    assert "h200" in text.lower()

    # Another length is a rescale, and it says so with its arithmetic.
    code, text = _plan(store, "--run", str(run.id), "--output-tokens", "256")
    assert code == 0, text
    scaled = best.throughput_rps * best.mean_output_tokens / 256
    assert f"{scaled:.2f} req/s" in text
    assert "rescaled to 256 output tokens" in text

    # The API answers the same figure and steps for the same inputs.
    answer = api.get(
        "/api/v1/capacity",
        params={"model": MODEL, "gpu": "H100", "peak_qps": 20, "run": run.id},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["instances"]["capacity_rps"] == pytest.approx(best.throughput_rps)
    assert answer.json()["instances"]["capacity_steps"] == body["instances"]["capacity_steps"]
    assert answer.json()["output_tokens"] == body["output_tokens"]

    # The page shows the measured figure and says what the plan does with it.
    page = api.get(f"/ui/capacity?run={run.id}")
    assert page.status_code == 200
    assert f"{best.throughput_rps:.3g} req/s per instance" in page.text
    assert f"{round(best.mean_output_tokens)} output tokens" in page.text
    assert "simulated" in page.text
    assert "capacity plan" in page.text


def test_a_given_capacity_says_its_lengths_are_the_defaults(store: Store) -> None:
    code, out = _plan(store, "--capacity-rps", "4", "--concurrency", "8", "--json")
    assert code == 0, out
    body = json.loads(out)
    assert body["instances"]["capacity_rps"] == 4
    steps = "\n".join(body["instances"]["capacity_steps"])
    assert "512 input tokens" in steps
    assert "256 output tokens" in steps
    assert "default" in steps


def test_every_gpu_the_cost_model_prices_is_plannable() -> None:
    catalog = load_catalog()
    for key in example_model().gpu_prices:
        catalog.gpu(key)  # resolves, or raises NotFound
    assert catalog.gpu("B200").name == "b200"
    assert catalog.gpu("A10G").name == "a10g"
    assert catalog.gpu("T4").name == "t4"
    # The names NVML and dcgm-exporter report, as the cost model matches them.
    assert catalog.gpu("NVIDIA H100 80GB HBM3").name == "h100"
    assert catalog.gpu("NVIDIA A100-SXM4-40GB").name == "a100-40gb"
    assert catalog.gpu("NVIDIA A100-SXM4-80GB").name == "a100"
    assert catalog.gpu("A100 80GB").name == "a100"
    assert catalog.gpu("NVIDIA L40S").name == "l40s"
    assert catalog.gpu("L40").name == "l40"
    assert catalog.gpu("A10").name == "a10"


def test_an_unknown_gpu_names_the_known_ones() -> None:
    with pytest.raises(NotFound) as raised:
        load_catalog().gpu("TPU-v5e")
    message = str(raised.value)
    assert "unknown GPU 'TPU-v5e'" in message
    for name in ("b200", "h100", "a10g", "t4"):
        assert name in message


def test_a_b200_plan_answers(store: Store) -> None:
    obj = Obj(Settings(database_url=store.url))
    args = ["plan", "--model", MODEL, "--gpu", "B200", "--peak-qps", "20"]
    args += ["--capacity-rps", "10", "--concurrency", "16"]
    result = CliRunner().invoke(capacity, args, obj=obj)
    assert result.exit_code == 0, result.output
    assert "on 1× B200" in result.output
    listed = CliRunner().invoke(capacity, ["gpus"], obj=obj)
    for name in ("b200", "a10g", "t4", "a100-40gb"):
        assert name in listed.output
