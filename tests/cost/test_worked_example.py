"""The worked H200 example: hand-computed figures, compared with Decimal equality."""

from __future__ import annotations

from decimal import Decimal

import pytest

from infersight.core.cost import Money
from infersight.core.query import Selector
from infersight.storage import cost
from tests.cost.scenario import IDLE_DAY, MODEL, WEEK


def usd(text: str) -> Money:
    return Money(Decimal(text), "USD")


def test_an_h200_serving_a_known_week_costs_the_hand_computed_amounts(worked):
    result = cost.cost(worked.engine, WEEK, MODEL, Selector(instance="h200-a"), ("model",))
    (line,) = result.groups
    assert line.labels == {"model": "llama-70b"}
    assert line.gpu_hours == Decimal("168")
    assert line.energy_kwh == Decimal("84")
    (instance,) = result.instances
    assert instance.gpu_cost == usd("520.80")
    assert instance.energy_cost == usd("10.08")
    assert instance.overhead_cost == usd("33.60")
    assert line.cost == Decimal("564.48")
    assert line.tokens == 10_080_000
    assert line.cost_per_million_tokens == usd("56.00")
    assert line.input_cost == Decimal("112.896")
    assert line.output_cost == Decimal("451.584")
    assert line.cost_per_million_input_tokens == usd("16.80")
    assert line.cost_per_million_output_tokens == usd("134.40")
    assert line.good_tokens == 8_064_000
    assert line.cost_per_million_good_tokens == usd("70.00")
    assert line.tokens_per_joule == pytest.approx(1 / 30)
    assert line.utilisation == pytest.approx(0.6)
    assert line.idle_cost == 0
    assert result.good_tokens_exact


def test_an_instance_that_served_nothing_for_a_day_costs_that_day_as_idle(worked):
    result = cost.cost(worked.engine, IDLE_DAY, MODEL, Selector(instance="h200-idle"))
    total = result.total
    assert total.gpu_hours == Decimal("24")
    assert total.idle_gpu_hours == Decimal("24")
    assert total.energy_kwh == Decimal("2.4")
    assert total.cost == Decimal("79.488")
    assert total.idle_cost == Decimal("79.488")
    assert total.tokens == 0
    assert total.cost_per_million_tokens is None
    assert total.utilisation == pytest.approx(0.0)


def test_the_week_of_the_fleet_adds_the_idle_instance_as_unattributed_cost(worked):
    result = cost.cost(worked.engine, WEEK, MODEL, group_by=("model", "instance"))
    labels = [dict(g.labels) for g in result.groups]
    assert labels == [
        {"model": "", "instance": "h200-idle"},
        {"model": "llama-70b", "instance": "h200-a"},
    ]
    assert result.total.cost == Decimal("564.48") + Decimal("79.488")
    assert result.total.idle_cost == Decimal("79.488")
    assert sum(g.cost for g in result.groups) == result.total.cost
