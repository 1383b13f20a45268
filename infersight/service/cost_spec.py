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

from pydantic import BaseModel, ConfigDict, Field

from infersight.core.cost import CostModel, GoodRequest, GpuPrice
from infersight.core.errors import InvalidInput
from infersight.core.gpu_slice import MIG, GpuSlice
from infersight.core.window import format_duration, parse_duration
from infersight.service.documents import DocumentKind, Header, Reading, at, read_value, read_values
from infersight.service.specs import parse_threshold
from infersight.storage.seam import Store

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
    with at(where):
        return GpuPrice(
            decimal_of(f"{where}.onDemandPerHour", doc.onDemandPerHour),
            None if reserved is None else decimal_of(f"{where}.reservedPerHour", reserved),
            decimal_of(f"{where}.reservedShare", doc.reservedShare),
        )


def parse_model(data: dict[str, Any]) -> CostModel:
    """One CostModel document (a mapping) → ``CostModel``; ``InvalidInput`` says what is wrong."""
    return read_value(data, COST_MODEL)


def _model(header: Header, spec: _Spec) -> CostModel:
    if len(spec.gpuPrices) + len(spec.instancePrices) + len(spec.sliceProfiles) > MAX_PRICES:
        raise InvalidInput(f"a cost model holds at most {MAX_PRICES} prices")
    electricity = spec.electricityPerKwh
    with at("spec.sampleGap"):
        sample_gap = parse_duration(spec.sampleGap)
    with at("spec.goodRequest.ttft"):
        ttft = parse_threshold(spec.goodRequest.ttft)
    with at("spec.goodRequest.tpot"):
        tpot = parse_threshold(spec.goodRequest.tpot)
    return CostModel(
        name=header.name,
        currency=spec.currency,
        gpu_prices={k: _price(f"spec.gpuPrices.{k}", v) for k, v in spec.gpuPrices.items()},
        instance_prices={
            k: _price(f"spec.instancePrices.{k}", v) for k, v in spec.instancePrices.items()
        },
        default_price=None
        if spec.defaultPrice is None
        else _price("spec.defaultPrice", spec.defaultPrice),
        electricity_per_kwh=None
        if electricity is None
        else decimal_of("spec.electricityPerKwh", electricity),
        overhead_per_gpu_hour=decimal_of("spec.overhead.perGpuHour", spec.overhead.perGpuHour),
        overhead_ratio=decimal_of("spec.overhead.ratio", spec.overhead.ratio),
        idle_utilisation_floor=spec.idle.utilisationFloor,
        sample_gap_s=sample_gap.total_seconds(),
        good=GoodRequest(ttft, tpot),
        reserved_discount=None
        if spec.reservedDiscount is None
        else decimal_of("spec.reservedDiscount", spec.reservedDiscount),
        example=spec.example,
        slice_prices={
            _profile(k): _price(f"spec.sliceProfiles.{k}", v) for k, v in spec.sliceProfiles.items()
        },
    )


def _profile(name: str) -> str:
    """A MIG profile key (``3g.40gb``), checked as ``core.gpu_slice`` checks a slice's."""
    try:
        return GpuSlice(MIG, Fraction(1, 7), name.strip().lower()).profile
    except InvalidInput:
        raise InvalidInput(
            "spec.sliceProfiles: a sliceProfiles key is a MIG profile, e.g. 3g.40gb",
            details={"key": name[:32]},
        ) from None


def parse_models(text: str | bytes) -> list[CostModel]:
    """Every CostModel document of a (multi-document) YAML or JSON file."""
    return read_values(text, COST_MODEL)


#: The CostModel kind; the core type's own errors name its fields by their document paths.
COST_MODEL: Final[DocumentKind[CostModel]] = DocumentKind(
    KIND,
    {API_VERSION: Reading(_Spec, _model)},
    field_paths={
        "a cost model needs a name": "metadata.name",
        "currency": "spec.currency",
        "overhead_ratio": "spec.overhead.ratio",
        "idle_utilisation_floor": "spec.idle.utilisationFloor",
        "sample_gap_s": "spec.sampleGap",
        "good.ttft": "spec.goodRequest.ttft",
        "good.tpot": "spec.goodRequest.tpot",
        "reservedDiscount": "spec.reservedDiscount",
        "electricity_per_kwh": "spec.electricityPerKwh",
        "overhead_per_gpu_hour": "spec.overhead.perGpuHour",
    },
)


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


def active_model(store: Store, name: str) -> CostModel:
    """The stored cost model ``name``, or the example prices when none is stored under it."""
    return store.cost_models.find(name) or example_model()
