"""Cost model documents (YAML or JSON, ``apiVersion: infersight/v1``, ``kind: CostModel``) →
``core.cost.CostModel``, and back; and which cost model a process uses.

::

    apiVersion: infersight/v1
    kind: CostModel
    metadata: {name: default}
    spec:
      currency: USD                         # ISO 4217; every amount is in it
      gpuPrices:                            # per GPU-hour, by GPU model (matched to NVML names)
        H200: {onDemandPerHour: "4.00", reservedPerHour: "2.80", reservedShare: 0.75}
      instancePrices:                       # optional: per instance, wins over gpuPrices
        gpu-node-7: {onDemandPerHour: "2.10"}
      defaultPrice: {onDemandPerHour: "2.00"}   # optional: GPUs nothing else matches
      electricityPerKwh: "0.12"             # optional: bill measured NVML energy
      overhead: {perGpuHour: "0.20", ratio: "0.10"}   # shared overhead
      idle: {utilisationFloor: 0.05}        # GPU time below this utilisation is idle
      sampleGap: 5m                         # a silence longer than this is not billed
      goodRequest: {ttft: 2s, tpot: 100ms}  # tokens of requests meeting these are "good"
      reservedDiscount: "0.40"              # optional: reserved = on-demand × (1 − this) where
                                            # a price has no reservedPerHour (purchasing advice)
      sliceProfiles:                        # optional: per GPU-hour of a MIG slice profile;
        3g.40gb: {onDemandPerHour: "1.90"}  # else a slice pays its fraction of its GPU's price

Prices are strings or numbers (numbers are read through their decimal text, so ``4.1`` is
exactly 4.1). The process's model is the stored one named by the ``cost_model`` setting, else
the bundled example list prices (``core/data/gpu_prices.yaml``, flagged ``example``).

The purchasing advice (``core.purchasing``) prices a reserved GPU-hour at ``reservedPerHour``
where a price has one, else at on-demand less ``reservedDiscount``; without either it assumes
40 % off (a typical one-year commitment) and says so.
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import cache
from importlib import resources
from typing import Any, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import Engine

from infersight.core.cost import CostModel, GoodRequest, GpuPrice
from infersight.core.errors import InvalidInput
from infersight.core.gpu_slice import MIG, GpuSlice
from infersight.core.window import format_duration, parse_duration
from infersight.service.specs import Metadata, parse_threshold
from infersight.storage import cost as cost_store

API_VERSION: Final = "infersight/v1"
KIND: Final = "CostModel"
MAX_PRICES: Final = 10_000
Amount = str | float | int


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Price(_Strict):
    onDemandPerHour: Amount
    reservedPerHour: Amount | None = None
    reservedShare: Amount = 0


class _Overhead(_Strict):
    perGpuHour: Amount = 0
    ratio: Amount = 0


class _Idle(_Strict):
    utilisationFloor: float = 0.05


class _Good(_Strict):
    ttft: str | float = 2.0
    tpot: str | float = 0.1


class _Spec(_Strict):
    currency: str
    gpuPrices: dict[str, _Price] = Field(default_factory=dict)
    instancePrices: dict[str, _Price] = Field(default_factory=dict)
    defaultPrice: _Price | None = None
    electricityPerKwh: Amount | None = None
    overhead: _Overhead = Field(default_factory=_Overhead)
    idle: _Idle = Field(default_factory=_Idle)
    sampleGap: str = "5m"
    goodRequest: _Good = Field(default_factory=_Good)
    reservedDiscount: Amount | None = None
    sliceProfiles: dict[str, _Price] = Field(default_factory=dict)
    example: bool = False


class _Document(_Strict):
    apiVersion: str
    kind: str
    metadata: Metadata
    spec: _Spec


def decimal_of(name: str, value: Amount) -> Decimal:
    """``value`` as an exact, finite decimal; ``name`` says where it was read (budgets, cost
    models)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{name} must be a finite number")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise InvalidInput(
            f"{name} must be a decimal number", details={name: str(value)[:32]}
        ) from None
    if not amount.is_finite():
        raise InvalidInput(f"{name} must be a finite number")
    return amount


def _price(where: str, doc: _Price) -> GpuPrice:
    reserved = doc.reservedPerHour
    return GpuPrice(
        decimal_of(f"{where}.onDemandPerHour", doc.onDemandPerHour),
        None if reserved is None else decimal_of(f"{where}.reservedPerHour", reserved),
        decimal_of(f"{where}.reservedShare", doc.reservedShare),
    )


def parse_model(data: dict[str, Any]) -> CostModel:
    """One CostModel document (a mapping) → ``CostModel``; ``InvalidInput`` says what is wrong."""
    if data.get("apiVersion") != API_VERSION or data.get("kind") != KIND:
        raise InvalidInput(
            f"expected apiVersion {API_VERSION} and kind {KIND}",
            details={
                "apiVersion": str(data.get("apiVersion"))[:64],
                "kind": str(data.get("kind"))[:64],
            },
        )
    try:
        doc = _Document.model_validate(data)
    except ValidationError as exc:
        problems = [
            {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in exc.errors()
        ]
        raise InvalidInput("invalid CostModel document", details={"problems": problems}) from None
    spec = doc.spec
    if len(spec.gpuPrices) + len(spec.instancePrices) + len(spec.sliceProfiles) > MAX_PRICES:
        raise InvalidInput(f"a cost model holds at most {MAX_PRICES} prices")
    electricity = spec.electricityPerKwh
    return CostModel(
        name=doc.metadata.name,
        currency=spec.currency,
        gpu_prices={k: _price(f"gpuPrices.{k}", v) for k, v in spec.gpuPrices.items()},
        instance_prices={
            k: _price(f"instancePrices.{k}", v) for k, v in spec.instancePrices.items()
        },
        default_price=None
        if spec.defaultPrice is None
        else _price("defaultPrice", spec.defaultPrice),
        electricity_per_kwh=None
        if electricity is None
        else decimal_of("electricityPerKwh", electricity),
        overhead_per_gpu_hour=decimal_of("overhead.perGpuHour", spec.overhead.perGpuHour),
        overhead_ratio=decimal_of("overhead.ratio", spec.overhead.ratio),
        idle_utilisation_floor=spec.idle.utilisationFloor,
        sample_gap_s=parse_duration(spec.sampleGap).total_seconds(),
        good=GoodRequest(
            parse_threshold(spec.goodRequest.ttft), parse_threshold(spec.goodRequest.tpot)
        ),
        reserved_discount=None
        if spec.reservedDiscount is None
        else decimal_of("reservedDiscount", spec.reservedDiscount),
        example=spec.example,
        slice_prices={
            _profile(k): _price(f"sliceProfiles.{k}", v) for k, v in spec.sliceProfiles.items()
        },
    )


def _profile(name: str) -> str:
    """A MIG profile key (``3g.40gb``), checked as ``core.gpu_slice`` checks a slice's."""
    try:
        return GpuSlice(MIG, Fraction(1, 7), name.strip().lower()).profile
    except InvalidInput:
        raise InvalidInput(
            "a sliceProfiles key is a MIG profile, e.g. 3g.40gb", details={"key": name[:32]}
        ) from None


def parse_models(text: str | bytes) -> list[CostModel]:
    """Every CostModel document of a (multi-document) YAML or JSON file."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise InvalidInput(f"not valid YAML or JSON: {exc}") from None
    if not documents:
        raise InvalidInput("no CostModel documents found")
    if not all(isinstance(d, dict) for d in documents):
        raise InvalidInput("a CostModel document must be a mapping")
    return [parse_model(d) for d in documents]


def _price_doc(price: GpuPrice) -> dict[str, Any]:
    out: dict[str, Any] = {"onDemandPerHour": str(price.on_demand_per_hour)}
    if price.reserved_per_hour is not None:
        out["reservedPerHour"] = str(price.reserved_per_hour)
        out["reservedShare"] = str(price.reserved_share)
    return out


def to_document(model: CostModel) -> dict[str, Any]:
    """The CostModel document of ``model`` (what ``parse_model`` reads back to an equal model)."""
    spec: dict[str, Any] = {
        "currency": model.currency,
        "gpuPrices": {k: _price_doc(v) for k, v in model.gpu_prices.items()},
        "instancePrices": {k: _price_doc(v) for k, v in model.instance_prices.items()},
        "overhead": {
            "perGpuHour": str(model.overhead_per_gpu_hour),
            "ratio": str(model.overhead_ratio),
        },
        "idle": {"utilisationFloor": model.idle_utilisation_floor},
        "sampleGap": format_duration_s(model.sample_gap_s),
        "goodRequest": {"ttft": model.good.ttft_s, "tpot": model.good.tpot_s},
        "example": model.example,
    }
    if model.default_price is not None:
        spec["defaultPrice"] = _price_doc(model.default_price)
    if model.electricity_per_kwh is not None:
        spec["electricityPerKwh"] = str(model.electricity_per_kwh)
    if model.reserved_discount is not None:
        spec["reservedDiscount"] = str(model.reserved_discount)
    if model.slice_prices:
        spec["sliceProfiles"] = {k: _price_doc(v) for k, v in model.slice_prices.items()}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": model.name}, "spec": spec}


def format_duration_s(seconds: float) -> str:
    return format_duration(timedelta(seconds=int(seconds)))


@cache
def example_model() -> CostModel:
    """The bundled example list prices (read once per process)."""
    text = (
        resources.files("infersight.core")
        .joinpath("data/gpu_prices.yaml")
        .read_text(encoding="utf-8")
    )
    return parse_models(text)[0]


def active_model(engine: Engine, name: str) -> CostModel:
    """The stored cost model ``name``, or the example prices when none is stored under it."""
    return cost_store.find_model(engine, name) or example_model()
