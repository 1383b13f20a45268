"""Served model ids (Hugging Face names) resolve to the capacity catalogue's entries (#16).

The CLI, the API and the dashboard all go through ``Catalog.model``; the demo's models and the
models people serve today must resolve, quantised checkpoints keep the shape and change the
weight bytes, and an unknown id is answered with the closest entries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from infersight.cli.commands_capacity import capacity
from infersight.cli.settings import Settings
from infersight.core.errors import InvalidInput, NotFound
from infersight.core.hardware import GIB, Catalog, catalog_from_mappings
from infersight.service.capacity import load_catalog
from infersight.simulator.specs import load_profile
from tests.api.conftest import Api

DEMO_FLEET = Path(__file__).parents[2] / "infersight" / "cli" / "demo_fleet.yaml"


@dataclass
class Obj:
    settings: Settings


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _demo_models() -> list[str]:
    fleet = yaml.safe_load(DEMO_FLEET.read_text(encoding="utf-8"))["spec"]["fleet"]
    return [load_profile(d["profile"]).model_name for d in fleet]


@pytest.mark.parametrize(
    ("served", "entry"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("llama-3.1-8b-instruct", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("Qwen/Qwen2.5-14B-Instruct", "qwen2.5-14b"),
        ("qwen2.5-32b-instruct", "qwen2.5-32b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("mistralai/Mixtral-8x22B-Instruct-v0.1", "mixtral-8x22b"),
        ("deepseek-ai/DeepSeek-V3", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-r1"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek-r1-distill-qwen-32b"),
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "deepseek-r1-distill-llama-70b"),
        ("openai/gpt-oss-20b", "gpt-oss-20b"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
        ("LLAMA-3.1-8B", "llama-3.1-8b"),
    ],
)
def test_served_ids_resolve_with_or_without_their_organisation(
    catalog: Catalog, served: str, entry: str
) -> None:
    assert catalog.model(served).name == entry


def test_the_demo_fleets_models_are_in_the_catalogue(catalog: Catalog) -> None:
    served = _demo_models()
    assert served == ["meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"]
    assert [catalog.model(m).name for m in served] == ["llama-3.1-8b", "llama-3.1-70b"]


@pytest.mark.parametrize(
    ("served", "weights", "bytes_per_param"),
    [
        ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", "int4", 0.5),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8", "int8", 1.0),
        ("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4", "int4", 0.5),
        ("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8-dynamic", "fp8", 1.0),
        ("Qwen/Qwen2.5-72B-Instruct-AWQ", "int4", 0.5),
    ],
)
def test_a_quantised_checkpoint_keeps_the_shape_and_changes_the_weight_bytes(
    catalog: Catalog, served: str, weights: str, bytes_per_param: float
) -> None:
    quantised = catalog.model(served)
    base = catalog.models[quantised.name]
    assert quantised.weight_dtype == weights
    assert quantised.weight_bytes == pytest.approx(base.params * bytes_per_param)
    # The architecture, and so the KV cache (kept in the model's dtype), is the base model's.
    assert quantised.kv_bytes_per_token() == base.kv_bytes_per_token()
    assert (quantised.layers, quantised.kv_heads, quantised.head_dim) == (
        base.layers,
        base.kv_heads,
        base.head_dim,
    )


def test_mixtures_of_experts_and_latent_attention_by_hand(catalog: Catalog) -> None:
    # DeepSeek-V3 caches one 512 + 64 wide latent a layer: 61 × 576 × 2 B in BF16.
    v3 = catalog.model("deepseek-ai/DeepSeek-V3")
    assert v3.kv_bytes_per_token() == 61 * 576 * 2
    assert v3.weight_bytes == pytest.approx(671e9)  # FP8 weights, a byte each
    # Prefill runs the active parameters only; one sequence's decode reads far less than all.
    assert v3.prefill_flops(1) == pytest.approx(2 * 37e9 + 2 * 61 * 128 * 192)
    assert v3.decode_weight_bytes(1) < 0.1 * v3.weight_bytes
    assert v3.decode_weight_bytes(4096) == pytest.approx(v3.weight_bytes, rel=1e-6)
    # gpt-oss-120b: MXFP4 experts and BF16 for the rest, near its ~61 GiB checkpoint.
    assert 55 * GIB < catalog.model("openai/gpt-oss-120b").weight_bytes < 66 * GIB
    # A dense model reads all of its weights at any batch.
    dense = catalog.model("llama-3.1-8b")
    assert dense.decode_weight_bytes(1) == dense.decode_weight_bytes(64) == dense.weight_bytes


@pytest.mark.parametrize(
    ("served", "close"),
    [
        ("meta-llama/Llama-3.1-7B-Instruct", "llama-3.1-8b"),
        ("Qwen/Qwen2.5-70B-Instruct", "qwen2.5-72b"),
        ("mistral-7b", "mistral-7b-v0.3"),
    ],
)
def test_an_unknown_id_is_answered_with_its_closest_entries(
    catalog: Catalog, served: str, close: str
) -> None:
    with pytest.raises(NotFound) as caught:
        catalog.model(served)
    assert close in caught.value.details["close_matches"]
    assert close in caught.value.message
    assert served in caught.value.message


def test_an_id_two_entries_claim_is_refused() -> None:
    data = resources.files("infersight.core").joinpath("data")
    gpus = yaml.safe_load(data.joinpath("gpu_specs.yaml").read_text(encoding="utf-8"))
    entry = {
        "params_b": 8.0,
        "layers": 32,
        "attention_heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "dtype": "bfloat16",
    }
    models = {
        "models": [
            {**entry, "name": "a", "hf_id": "org/Same-8B"},
            {**entry, "name": "b", "aliases": ["other/same-8b"]},
        ]
    }
    with pytest.raises(InvalidInput, match="both claim"):
        catalog_from_mappings(gpus, models)


def test_every_entry_cites_its_config_json(catalog: Catalog) -> None:
    for spec in catalog.models.values():
        assert spec.source == f"https://huggingface.co/{spec.hf_id}/blob/main/config.json", spec
        assert spec.context_length > 0, spec.name


def test_capacity_plan_takes_the_demos_served_model_id(tmp_path) -> None:
    obj = Obj(Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}"))
    base = ["plan", "--gpu", "h200", "--peak-qps", "20", "--capacity-rps", "10"]
    args = [*base, "--concurrency", "32", "--model", "meta-llama/Llama-3.1-8B-Instruct"]
    result = CliRunner().invoke(capacity, [*args, "--json"], obj=obj)
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert body["catalogue_model"] == "llama-3.1-8b"
    assert body["memory"]["kv_bytes_per_token"] == 128 * 1024
    text = CliRunner().invoke(capacity, args, obj=obj)
    assert "[catalogue llama-3.1-8b, bfloat16 weights]" in text.output
    unknown = CliRunner().invoke(
        capacity, [*base, "--concurrency", "8", "--model", "Llama-3.1-7B"], obj=obj
    )
    assert isinstance(unknown.exception, NotFound)  # the CLI's main prints it, exit code 2
    assert "close matches: llama-3.1-70b, llama-3.1-8b" in unknown.exception.message


def test_capacity_models_lists_the_hugging_face_ids() -> None:
    result = CliRunner().invoke(capacity, ["models"])
    assert result.exit_code == 0, result.output
    line = next(
        x for x in result.output.splitlines() if x.startswith("deepseek-r1-distill-qwen-1.5b")
    )
    assert line.endswith("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")


def test_the_capacity_endpoint_takes_a_served_model_id(api: Api) -> None:
    query = {
        "gpu": "h200",
        "peak_qps": 10,
        "capacity_rps": 5,
        "concurrency": 16,
        "tensor_parallel": 4,
    }
    ok = api.get("/api/v1/capacity", params={**query, "model": "meta-llama/Llama-3.1-70B-Instruct"})
    assert ok.status_code == 200, ok.text
    assert ok.json()["catalogue_model"] == "llama-3.1-70b"
    unknown = api.get("/api/v1/capacity", params={**query, "model": "meta-llama/Llama-3.1-7B"})
    assert unknown.status_code == 404
    assert "llama-3.1-8b" in unknown.json()["error"]["details"]["close_matches"]
