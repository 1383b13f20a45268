"""``/api/v1/cost`` (unit economics of any window) and the cost model in use.

``GET /api/v1/cost?start=&end=&model=&instance=&tenant=&priority=&group_by=model`` answers,
per group and in total: requests, tokens (input, output, good), GPU-hours, idle GPU-hours,
energy, cost (total, input, output, idle), cost per million tokens (total, input, output,
good), tokens per joule and average GPU utilisation; plus each instance's cost. Money and
hours are decimal strings (never rounded through binary floats) with the currency beside
them. ``GET /api/v1/cost/model`` shows the cost model in use; ``PUT`` replaces it (admin).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from api.auth import Scope, requires
from api.cost_spec import active_model, parse_models, to_document
from api.params import Common, common, iso
from core.cost import CostLine, CostModel, CostResult, InstanceCost, Money, quantize
from core.errors import InvalidInput
from storage import cost as cost_store

Params = Annotated[Common, Depends(common)]
router = APIRouter(prefix="/api/v1")
_READ = [Depends(requires(Scope.READ))]
_ADMIN = [Depends(requires(Scope.ADMIN))]


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


def model_for(request: Request) -> CostModel:
    state = request.app.state
    model: CostModel = active_model(state.engine, state.settings.cost_model)
    return model


@router.get(
    "/cost",
    summary="Cost, cost per million tokens, energy and idle cost per group",
    dependencies=_READ,
)
def get_cost(request: Request, params: Params) -> dict[str, Any]:
    state = request.app.state
    result = cost_store.cost(
        state.engine,
        params.window,
        model_for(request),
        params.selector,
        params.group_by,
        finest=state.retention.finest_for(params.window, params.now),
    )
    return cost_dict(result)


@router.get("/cost/model", summary="The cost model in use", dependencies=_READ)
def get_model(request: Request) -> dict[str, Any]:
    return to_document(model_for(request))


@router.put("/cost/model", summary="Replace the cost model in use (admin)", dependencies=_ADMIN)
async def put_model(request: Request) -> dict[str, Any]:
    models = parse_models(await request.body())
    if len(models) != 1:
        raise InvalidInput("send exactly one CostModel document")
    name = request.app.state.settings.cost_model
    model = models[0]
    if model.name != name:
        raise InvalidInput(
            f"the cost model in use is named {name!r} (the cost_model setting)",
            details={"name": model.name},
        )
    now: datetime = request.app.state.clock()
    cost_store.put_model(request.app.state.engine, model, now)
    return to_document(model)
