"""The JSON form of cost answers, shared by ``GET /api/v1/cost``, the CLI and the reports.

Money, hours and kWh are decimal strings with six places (never rounded through a binary
float); ratios (utilisation, tokens per joule) are numbers.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from api.params import iso
from core.cost import CostLine, CostResult, InstanceCost, Money, quantize


def amount(value: Decimal) -> str:
    """A Decimal quantity as the API writes it: a string with six decimal places."""
    return str(quantize(value))


def _money(value: Money | None) -> str | None:
    return None if value is None else amount(value.amount)


def line_dict(line: CostLine) -> dict[str, Any]:
    return {
        "labels": dict(line.labels),
        "requests": line.requests,
        "tokens": line.tokens,
        "input_tokens": line.input_tokens,
        "output_tokens": line.output_tokens,
        "good_tokens": line.good_tokens,
        "gpu_hours": amount(line.gpu_hours),
        "idle_gpu_hours": amount(line.idle_gpu_hours),
        "energy_kwh": amount(line.energy_kwh),
        "cost": amount(line.cost),
        "input_cost": amount(line.input_cost),
        "output_cost": amount(line.output_cost),
        "idle_cost": amount(line.idle_cost),
        "cost_per_million_tokens": {
            "total": _money(line.cost_per_million_tokens),
            "input": _money(line.cost_per_million_input_tokens),
            "output": _money(line.cost_per_million_output_tokens),
            "good": _money(line.cost_per_million_good_tokens),
        },
        "tokens_per_joule": line.tokens_per_joule,
        "utilisation": line.utilisation,
    }


def instance_dict(instance: InstanceCost) -> dict[str, Any]:
    return {
        "instance": instance.instance,
        "gpus": instance.gpus,
        "gpu_names": list(instance.gpu_names),
        "gpu_hours": amount(instance.gpu_hours),
        "idle_gpu_hours": amount(instance.idle_gpu_hours),
        "energy_kwh": amount(instance.energy_kwh),
        "gpu_cost": amount(instance.gpu_cost.amount),
        "energy_cost": amount(instance.energy_cost.amount),
        "overhead_cost": amount(instance.overhead_cost.amount),
        "cost": amount(instance.total.amount),
        "idle_cost": amount(instance.idle_cost.amount),
        "utilisation": instance.utilisation,
        "served": instance.served,
        "unpriced_gpus": list(instance.unpriced),
    }


def cost_dict(result: CostResult) -> dict[str, Any]:
    """The JSON answer of ``GET /api/v1/cost`` (the weekly report embeds the same shape)."""
    return {
        "start": iso(result.window.start),
        "end": iso(result.window.end),
        "currency": result.currency,
        "cost_model": {"name": result.model_name, "example_prices": result.example_prices},
        "group_by": list(result.group_by),
        "groups": [line_dict(g) for g in result.groups],
        "total": line_dict(result.total),
        "instances": [instance_dict(i) for i in result.instances],
        "unpriced_gpus": list(result.unpriced),
        "unmetered_instances": list(result.unmetered),
        "good_tokens_method": "exact" if result.good_tokens_exact else "partial",
    }
