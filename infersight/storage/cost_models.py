"""Cost models in the store: one row per name in ``cost_models``, in a JSON form of
``core.cost.CostModel`` of its own (Decimals as strings, so nothing is rounded), not the
operator's document, whose format is the API's business."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, Engine

from infersight.core.cost import CostModel, GoodRequest, GpuPrice
from infersight.storage.documents import NamedDocuments
from infersight.storage.tables import cost_models


def _price_json(price: GpuPrice) -> dict[str, Any]:
    return {
        "on_demand_per_hour": str(price.on_demand_per_hour),
        "reserved_per_hour": None
        if price.reserved_per_hour is None
        else str(price.reserved_per_hour),
        "reserved_share": str(price.reserved_share),
    }


def _price_from(data: Mapping[str, Any]) -> GpuPrice:
    reserved = data.get("reserved_per_hour")
    return GpuPrice(
        Decimal(data["on_demand_per_hour"]),
        None if reserved is None else Decimal(reserved),
        Decimal(data.get("reserved_share", "0")),
    )


def model_to_json(model: CostModel) -> str:
    """The stored form of a cost model (Decimals as strings, so nothing is rounded)."""
    slices = {k: _price_json(v) for k, v in model.slice_prices.items()}
    return json.dumps(
        {
            # Only where the model names slice prices (issue 34): other models' stored form,
            # and fingerprint, stay what they were.
            **({"slice_prices": slices} if slices else {}),
            "currency": model.currency,
            "gpu_prices": {k: _price_json(v) for k, v in model.gpu_prices.items()},
            "instance_prices": {k: _price_json(v) for k, v in model.instance_prices.items()},
            "default_price": None
            if model.default_price is None
            else _price_json(model.default_price),
            "electricity_per_kwh": None
            if model.electricity_per_kwh is None
            else str(model.electricity_per_kwh),
            "overhead_per_gpu_hour": str(model.overhead_per_gpu_hour),
            "overhead_ratio": str(model.overhead_ratio),
            "idle_utilisation_floor": model.idle_utilisation_floor,
            "sample_gap_s": model.sample_gap_s,
            "good": {"ttft_s": model.good.ttft_s, "tpot_s": model.good.tpot_s},
            "example": model.example,
            "reserved_discount": None
            if model.reserved_discount is None
            else str(model.reserved_discount),
        },
        sort_keys=True,
    )


def model_from_json(name: str, text: str) -> CostModel:
    data = json.loads(text)
    electricity = data.get("electricity_per_kwh")
    default = data.get("default_price")
    discount = data.get("reserved_discount")
    return CostModel(
        name=name,
        currency=data["currency"],
        gpu_prices={k: _price_from(v) for k, v in data["gpu_prices"].items()},
        instance_prices={k: _price_from(v) for k, v in data["instance_prices"].items()},
        default_price=None if default is None else _price_from(default),
        electricity_per_kwh=None if electricity is None else Decimal(electricity),
        overhead_per_gpu_hour=Decimal(data["overhead_per_gpu_hour"]),
        overhead_ratio=Decimal(data["overhead_ratio"]),
        idle_utilisation_floor=float(data["idle_utilisation_floor"]),
        sample_gap_s=float(data["sample_gap_s"]),
        good=GoodRequest(**data["good"]),
        reserved_discount=None if discount is None else Decimal(discount),
        example=bool(data.get("example", False)),
        slice_prices={k: _price_from(v) for k, v in data.get("slice_prices", {}).items()},
    )


_MODELS = NamedDocuments(cost_models, "spec", "cost model")


def put_model(engine: Engine | Connection, model: CostModel, now: datetime) -> bool:
    """Create or replace a cost model by name; ``True`` when it was created (on a connection,
    in the caller's transaction)."""
    return _MODELS.put_stamped(engine, model.name, model_to_json(model), now)


def get_model(engine: Engine, name: str) -> CostModel:
    """The stored cost model ``name``; ``NotFound`` when there is none."""
    return model_from_json(name, _MODELS.get(engine, name))


def find_model(engine: Engine, name: str) -> CostModel | None:
    spec = _MODELS.find(engine, name)
    return None if spec is None else model_from_json(name, spec)


def list_models(engine: Engine) -> list[CostModel]:
    return [model_from_json(name, spec) for name, spec in _MODELS.all(engine)]
