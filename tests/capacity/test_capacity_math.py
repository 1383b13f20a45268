"""Memory budgets, floors and instance counts against figures worked out by hand."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from infersight.core.capacity import (
    check_targets,
    floors,
    instances_needed,
    memory_budget,
    plan_instances,
    scale_capacity,
)
from infersight.core.errors import InvalidInput, NotFound
from infersight.core.hardware import GIB, MIB, Catalog, catalog_from_mappings


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    data = resources.files("infersight.core").joinpath("data")
    return catalog_from_mappings(
        yaml.safe_load(data.joinpath("gpu_specs.yaml").read_text()),
        yaml.safe_load(data.joinpath("models.yaml").read_text()),
    )


def test_llama_2_7b_in_fp16_keeps_half_a_mebibyte_of_kv_per_token(catalog: Catalog) -> None:
    model = catalog.model("Llama-2-7B")
    assert model.kv_bytes_per_token() == 2 * 32 * 32 * 128 * 2 == 0.5 * MIB
    assert model.kv_bytes_per_token("fp8") == 0.25 * MIB
    # Grouped-query attention: Llama 3 8B keeps 8 KV heads of 32, a quarter of the cache.
    assert catalog.model("llama-3-8b").kv_bytes_per_token() == 128 * 1024


def test_llama_2_7b_on_one_a100_budget_by_hand(catalog: Catalog) -> None:
    model, gpu = catalog.model("llama-2-7b"), catalog.gpu("a100")
    budget = memory_budget(model, gpu, concurrency=32, context_tokens=1024)
    weights = 6.74e9 * 2
    kv = 524_288 * 32 * 1024  # 16 GiB, as the essay's 0.5 MB × 32 × 512 ≈ 8 GB doubles
    activations = 8192 * (2 * 11008 + 4 * 4096) * 2 + 32 * 32000 * 4
    context = 512 * MIB
    assert kv == 16 * GIB
    assert budget.weights_bytes == pytest.approx(weights)
    assert budget.kv_cache_bytes == kv
    assert budget.activation_bytes == activations
    assert budget.total_bytes == pytest.approx(weights + kv + activations + context)
    assert budget.limit_bytes == pytest.approx(0.85 * 81920 * MIB)
    assert budget.fits
    free = 0.85 * 81920 * MIB - weights - activations - context
    assert budget.max_concurrency == int(free // (524_288 * 1024)) == 108
    fl = floors(model, gpu, input_tokens=512)
    assert fl.tpot_s == pytest.approx(13.48e9 / 2.039e12)  # 6.6 ms
    flops = 2 * 6.74e9 * 512 + 2 * 32 * 512**2 * 4096
    assert fl.prefill_flops == pytest.approx(flops)
    assert fl.ttft_s == pytest.approx(flops / 312e12)  # 22.3 ms: compute-bound
    assert fl.ttft_s == pytest.approx(0.02234, rel=1e-3)


def test_llama_3_70b_on_four_h100_budget_by_hand(catalog: Catalog) -> None:
    model, gpu = catalog.model("llama-3-70b"), catalog.gpu("h100")
    budget = memory_budget(model, gpu, concurrency=64, context_tokens=2560, tensor_parallel=4)
    weights = 70.6e9 * 2
    kv = (2 * 80 * 8 * 128 * 2) * 64 * 2560
    activations = 8192 * (2 * 28672 + 4 * 8192) * 2 + 64 * 128256 * 4
    contexts = 4 * 512 * MIB
    assert kv == 50 * GIB
    assert budget.total_bytes == pytest.approx(weights + kv + activations + contexts)
    assert budget.capacity_bytes == 4 * 81559 * MIB
    assert budget.fits  # 184 GiB of 270.8 GiB allowed
    fl = floors(
        model, gpu, input_tokens=2048, tensor_parallel=4, concurrency=64, context_tokens=2560
    )
    assert fl.tpot_s == pytest.approx(weights / (4 * 3.35e12))  # 10.5 ms
    assert fl.tpot_at_concurrency_s == pytest.approx((weights + kv) / (4 * 3.35e12))
    flops = 2 * 70.6e9 * 2048 + 2 * 80 * 2048**2 * 8192
    assert fl.ttft_s == pytest.approx(flops / (4 * 989e12))  # 74.5 ms
    assert fl.ttft_s == pytest.approx(0.07449, rel=1e-3)


def test_a_70b_model_does_not_fit_one_l4_and_the_check_says_so(catalog: Catalog) -> None:
    model, gpu = catalog.model("llama-3-70b"), catalog.gpu("l4")
    budget = memory_budget(model, gpu, concurrency=1, context_tokens=1024)
    assert not budget.fits
    assert budget.max_concurrency == 0
    fl = floors(model, gpu, input_tokens=100)
    findings = {
        f.check: f for f in check_targets(fl, budget, ttft_target_s=1.0, tpot_target_s=0.05)
    }
    assert not findings["memory"].ok
    assert not findings["tpot"].ok  # 141 GB ÷ 300 GB/s ≈ 0.47 s per token
    assert "below the physical floor" in findings["tpot"].message


@pytest.mark.parametrize(
    ("peak", "capacity", "headroom", "expected"),
    [
        pytest.param(100, 12, 0.4, 12, id="100 QPS on 12 rps instances with 40 % headroom: 12"),
        pytest.param(100, 12, 0.3, 11, id="30 % headroom: 11"),
        pytest.param(100, 12, 0.5, 13, id="50 % headroom: 13"),
        pytest.param(10, 14, 0.4, 1, id="an exact fit does not round up"),
        pytest.param(0, 5, 0.4, 1, id="no traffic still keeps one instance"),
    ],
)
def test_instances_by_hand(peak: float, capacity: float, headroom: float, expected: int) -> None:
    assert instances_needed(peak, capacity, headroom) == expected


def test_a_plan_gives_the_30_to_50_percent_range() -> None:
    plan = plan_instances(100, 12)
    assert (plan.instances_low, plan.instances, plan.instances_high) == (11, 12, 13)
    assert plan.utilisation_at_peak == pytest.approx(100 / 144)


def test_capacity_scales_with_output_length() -> None:
    assert scale_capacity(10, 256, 512) == pytest.approx(5)


@given(
    peak=st.floats(0, 1e5),
    capacity=st.floats(0.01, 1e4),
    headroom=st.floats(0, 1),
)
def test_instances_carry_the_peak_with_the_headroom(
    peak: float, capacity: float, headroom: float
) -> None:
    n = instances_needed(peak, capacity, headroom)
    assert n * capacity * (1 + 1e-6) >= peak * (1 + headroom)
    assert n == 1 or (n - 1) * capacity < peak * (1 + headroom)
    assert instances_needed(peak * 1.5, capacity, headroom) >= n


@given(concurrency=st.integers(1, 512), context=st.integers(1, 32768))
def test_max_concurrency_is_the_largest_batch_that_fits(
    catalog: Catalog, concurrency: int, context: int
) -> None:
    model, gpu = catalog.model("llama-3-8b"), catalog.gpu("h100")
    act = 2 * GIB
    budget = memory_budget(
        model, gpu, concurrency=concurrency, context_tokens=context, activation_bytes=act
    )
    assert budget.fits == (concurrency <= budget.max_concurrency)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        pytest.param(lambda c: c.model("gpt-5"), NotFound, id="an unknown model is not found"),
        pytest.param(lambda c: c.gpu("b300"), NotFound, id="an unknown GPU is not found"),
        pytest.param(
            lambda c: memory_budget(
                c.model("llama-2-7b"), c.gpu("a100"), concurrency=0, context_tokens=10
            ),
            InvalidInput,
            id="zero concurrency is refused",
        ),
        pytest.param(
            lambda c: floors(
                c.model("llama-2-7b"), c.gpu("a100"), input_tokens=1, tensor_parallel=0
            ),
            InvalidInput,
            id="zero GPUs are refused",
        ),
        pytest.param(lambda _c: instances_needed(10, 0, 0.4), InvalidInput, id="zero capacity"),
        pytest.param(
            lambda _c: catalog_from_mappings({"gpus": "a100"}, {"models": []}),
            InvalidInput,
            id="a table that is not a list is refused",
        ),
        pytest.param(
            lambda _c: catalog_from_mappings(
                {"gpus": [{"name": "x", "memory_mib": "lots"}]}, {"models": []}
            ),
            InvalidInput,
            id="a GPU whose memory is not a number is refused",
        ),
    ],
)
def test_bad_inputs_get_clear_errors(catalog: Catalog, call, error) -> None:
    with pytest.raises(error):
        call(catalog)
