"""Properties of the cost math: linear in price and GPU-hours, shares that add up exactly."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infersight.core.cost import (
    QUANTUM,
    CostModel,
    GpuPrice,
    GpuUsage,
    InstanceCost,
    SeriesUsage,
    allocate,
    attribute,
    group_lines,
    price_instance,
)
from infersight.core.errors import InvalidInput

prices = st.decimals(min_value="0.01", max_value="100", places=2)
seconds = st.integers(min_value=1, max_value=30 * 86400).map(Decimal)
ratios = st.decimals(min_value="0", max_value="1", places=2)


def _model(price: Decimal, electricity: Decimal = Decimal("0.10")) -> CostModel:
    return CostModel(
        name="p",
        currency="EUR",
        gpu_prices={"H100": GpuPrice(price)},
        electricity_per_kwh=electricity,
        overhead_per_gpu_hour=Decimal("0.25"),
        overhead_ratio=Decimal("0.05"),
    )


def _gpu(secs: Decimal, idle_share: Decimal = Decimal(0), watts: int = 400) -> GpuUsage:
    return GpuUsage(
        "i-1",
        0,
        "NVIDIA H100 80GB HBM3",
        gpu_seconds=secs,
        idle_seconds=(secs * idle_share).quantize(Decimal("0.001")),
        energy_j=secs * watts,
        util_seconds=float(secs),
        util_weighted=float(secs) * 0.5,
    )


def _unrounded(cost: InstanceCost) -> Decimal:
    return cost.gpu_cost.amount + cost.energy_cost.amount + cost.overhead_cost.amount


@settings(max_examples=200, deadline=None)
@given(price=prices, secs=seconds, k=st.integers(min_value=2, max_value=9))
def test_cost_is_linear_in_the_price_per_gpu_hour(price, secs, k):
    model = _model(price, electricity=Decimal(0))
    one = price_instance(model, "i-1", [_gpu(secs)], served=True)
    scaled = price_instance(_model(price * k, Decimal(0)), "i-1", [_gpu(secs)], served=True)
    # GPU cost scales exactly; the per-GPU-hour overhead does not depend on the price.
    assert scaled.gpu_cost.amount == pytest.approx(one.gpu_cost.amount * k, abs=QUANTUM * k)
    assert scaled.overhead_cost.amount - one.overhead_cost.amount == pytest.approx(
        Decimal("0.05") * (k - 1) * one.gpu_cost.amount, abs=QUANTUM * 2 * k
    )


@settings(max_examples=200, deadline=None)
@given(price=prices, secs=seconds, k=st.integers(min_value=2, max_value=9))
def test_cost_is_linear_in_gpu_hours(price, secs, k):
    model = _model(price)
    one = price_instance(model, "i-1", [_gpu(secs)], served=True)
    many = price_instance(model, "i-1", [_gpu(secs * k)], served=True)
    assert many.total.amount == pytest.approx(one.total.amount * k, abs=QUANTUM * (k + 1))
    # Two GPUs of the same instance cost what one GPU costs for twice the time.
    two = price_instance(model, "i-1", [_gpu(secs), _gpu_index(_gpu(secs), 1)], served=True)
    double = price_instance(model, "i-1", [_gpu(secs * 2)], served=True)
    assert two.total == double.total


def _gpu_index(gpu: GpuUsage, index: int) -> GpuUsage:
    return GpuUsage(
        gpu.instance,
        index,
        gpu.name,
        gpu.gpu_seconds,
        gpu.idle_seconds,
        gpu.energy_j,
        gpu.util_seconds,
        gpu.util_weighted,
    )


@settings(max_examples=300, deadline=None)
@given(
    total=st.decimals(min_value="0", max_value="100000", places=6),
    weights=st.lists(
        st.decimals(min_value="0", max_value="1000", places=3), min_size=1, max_size=12
    ),
)
def test_allocated_shares_add_up_to_the_total_exactly(total, weights):
    shares = allocate(total, weights)
    assert sum(shares) == total
    assert all(s >= 0 for s in shares)
    whole = sum(weights)
    for share, weight in zip(shares, weights, strict=True):
        expected = total * weight / whole if whole else total / len(weights)
        assert abs(share - expected) <= QUANTUM


series_strategy = st.lists(
    st.tuples(
        st.sampled_from(["llama-8b", "llama-70b", "qwen"]),
        st.sampled_from(["acme", "globex"]),
        st.integers(min_value=0, max_value=10**7),
        st.integers(min_value=0, max_value=10**7),
        st.decimals(min_value="0", max_value="10000", places=3),
        st.decimals(min_value="0", max_value="10000", places=3),
    ),
    max_size=8,
    unique_by=lambda t: (t[0], t[1]),
)


@settings(max_examples=150, deadline=None)
@given(price=prices, secs=seconds, idle=ratios, rows=series_strategy)
def test_attributed_lines_add_up_to_the_instance_and_groups_to_the_total(price, secs, idle, rows):
    instance = price_instance(_model(price), "i-1", [_gpu(secs, idle)], served=bool(rows))
    series = [
        SeriesUsage(
            {
                "model": m,
                "instance": "i-1",
                "tenant": t,
                "priority": "",
                "adapter": "",
                "team": "",
                "workload": "",
            },
            requests=1,
            input_tokens=i,
            output_tokens=o,
            prefill_s=p,
            decode_s=d,
        )
        for m, t, i, o, p, d in rows
    ]
    lines = attribute(instance, series)
    assert sum(line.cost for line in lines) == instance.total.amount
    assert sum(line.idle_cost for line in lines) == instance.idle_cost.amount
    assert sum(line.gpu_hours for line in lines) == instance.gpu_hours
    for line in lines:
        assert line.input_cost + line.output_cost == line.cost
    groups, total = group_lines(lines, ("model",), "EUR")
    assert sum(g.cost for g in groups) == total.cost == instance.total.amount
    assert total.idle_cost <= total.cost
    if instance.total.amount:
        assert _unrounded(instance) == pytest.approx(instance.total.amount, abs=QUANTUM * 3)


def test_amounts_in_two_currencies_do_not_add_up():
    eur = price_instance(_model(Decimal(2)), "i-1", [_gpu(Decimal(3600))], True).total
    usd = eur.__class__(eur.amount, "USD")
    with pytest.raises(InvalidInput):
        _ = eur + usd


@pytest.mark.parametrize(
    ("gpu_name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", Decimal("3.00")),
        ("NVIDIA A100-SXM4-80GB", Decimal("1.80")),
        ("NVIDIA A100-SXM4-40GB", Decimal("1.50")),
        ("NVIDIA L40S", Decimal("1.20")),
    ],
    ids=[
        "an H100 80GB is priced as an H100",
        "an 80 GB A100 gets the more specific A100 80GB price",
        "a 40 GB A100 gets the plain A100 price",
        "an L40S is not mistaken for an L40",
    ],
)
def test_gpu_names_match_the_most_specific_price(gpu_name, expected):
    from infersight.service.cost_spec import example_model

    price = example_model().price_for("any", gpu_name)
    assert price is not None
    assert price.blended_per_hour == expected


def test_an_instance_price_wins_and_an_unknown_gpu_is_reported_unpriced():
    model = CostModel(
        "m",
        "USD",
        {"H100": GpuPrice(Decimal(3))},
        instance_prices={"special": GpuPrice(Decimal(1))},
    )
    assert model.price_for("special", "NVIDIA H100").blended_per_hour == 1  # type: ignore[union-attr]
    odd = price_instance(
        model,
        "x",
        [
            _gpu_index(_gpu(Decimal(3600)), 0).__class__(
                "x", 0, "Mystery GPU", Decimal(3600), Decimal(0), Decimal(0)
            )
        ],
        served=True,
    )
    assert odd.unpriced == ("Mystery GPU",)
    assert odd.total.amount == 0
