"""The cost model and the math of unit economics: prices, instance costs, idle cost, attribution.

Money is ``Decimal`` with an explicit currency (``core.money.Money``, re-exported here);
amounts are kept to a millionth of the currency unit (``QUANTUM``). How a window's cost is
computed:

1. **Instance cost.** Each GPU of an instance is billed for the GPU-hours its samples cover,
   at the blended price of its GPU model (or the instance's own price): ``reserved_share ×
   reserved + (1 − reserved_share) × on_demand``. Measured NVML energy is billed at
   ``electricity_per_kwh`` when the operator pays for power; shared overhead adds
   ``overhead_per_gpu_hour`` and ``overhead_ratio`` × (GPU + energy). Every term is linear in
   GPU-hours and in price.
2. **Idle cost.** GPU time below ``idle_utilisation_floor`` is idle; an instance that served
   no request in the window is idle for all of it. Idle cost is that share of the instance's
   cost.
3. **Attribution.** An instance's whole cost (idle included) is shared among the series
   (model, tenant, priority) it served, in proportion to their GPU time — the request-seconds
   spent in prefill plus decode; under continuous batching concurrent requests share the GPU,
   so request-seconds are the share each series held. Series that reported no stage timings
   fall back to token counts. An instance that served nothing keeps its cost in an
   unattributed series (empty model, tenant and priority).
4. **Input / output split.** A series' cost splits into input (prefill) and output (decode)
   cost by its prefill-vs-decode GPU-time share (token share when stage timings are missing).
   Disaggregated serving splits by role: a prefill instance's cost (shared among the series
   of the prefill legs it ran, by prefill time) is all input, a decode instance's (shared by
   decode time) all output; the legs carry no requests or tokens, so a model's cost per
   million tokens is both pools' cost over its users' tokens, each counted once.
5. **Good tokens** are the tokens of successful requests that were within their SLO: the
   latency SLOs covering their series, else the cost model's ``GoodRequest`` limits
   (``core.goodput``); cost per million good tokens charges the whole cost to them, and every
   line says which basis its good tokens have.

Shares are allocated with the largest-remainder method at ``QUANTUM``, so they add up to the
total exactly.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_FLOOR, Decimal
from functools import lru_cache
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.goodput import GoodBasis, GoodLimits, GoodRule, basis_of
from infersight.core.gpu_slice import GpuSlice, parse_slice
from infersight.core.money import (
    MILLION,
    QUANTUM,
    ZERO,
    Money,
    allocate,
    check_currency,
    decimal_of,
    quantize,
)
from infersight.core.query import Selector, check_group_by
from infersight.core.records import GROUP_LABELS
from infersight.core.window import Window

MAX_PRICE: Final = Decimal(1_000_000)
SECONDS_PER_HOUR: Final = Decimal(3600)
JOULES_PER_KWH: Final = Decimal(3_600_000)
_WORD = re.compile(r"[A-Z0-9]+")


def _price(name: str, value: Decimal) -> Decimal:
    if not isinstance(value, Decimal) or not value.is_finite() or not ZERO <= value <= MAX_PRICE:
        raise InvalidInput(
            f"{name} must be a price in [0, {MAX_PRICE}]", details={name: str(value)}
        )
    return value


@dataclass(frozen=True, slots=True)
class GpuPrice:
    """The price of one GPU-hour: on demand, and optionally a reserved price for a share."""

    on_demand_per_hour: Decimal
    reserved_per_hour: Decimal | None = None
    reserved_share: Decimal = ZERO

    def __post_init__(self) -> None:
        _price("on_demand_per_hour", self.on_demand_per_hour)
        if self.reserved_per_hour is not None:
            _price("reserved_per_hour", self.reserved_per_hour)
        if not ZERO <= self.reserved_share <= 1:
            raise InvalidInput("reserved_share must be in [0, 1]")
        if self.reserved_share and self.reserved_per_hour is None:
            raise InvalidInput("a reserved_share needs a reserved_per_hour price")

    @property
    def blended_per_hour(self) -> Decimal:
        if self.reserved_per_hour is None:
            return self.on_demand_per_hour
        share = self.reserved_share
        return share * self.reserved_per_hour + (1 - share) * self.on_demand_per_hour


@dataclass(frozen=True, slots=True)
class GoodRequest:
    """What a request must meet for its tokens to count as good (seconds)."""

    ttft_s: float = 2.0
    tpot_s: float = 0.1

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise InvalidInput(f"good.{name} must be a positive number of seconds")

    @property
    def limits(self) -> GoodLimits:
        return GoodLimits(ttft_s=self.ttft_s, tpot_s=self.tpot_s)


@lru_cache(maxsize=1024)
def gpu_words(name: str) -> frozenset[str]:
    """The words of a GPU model name, without the vendor: ``NVIDIA A100-SXM4-80GB`` → A100,
    SXM4, 80GB. Kept for the last 1,024 names: pricing asks for the same few names once per
    GPU-hour row (issue 35)."""
    return frozenset(_WORD.findall(name.upper())) - {"NVIDIA"}


@dataclass(frozen=True, slots=True)
class CostModel:
    """How an operator prices GPU time (see the module docstring)."""

    name: str
    currency: str
    gpu_prices: Mapping[str, GpuPrice] = field(default_factory=dict)
    instance_prices: Mapping[str, GpuPrice] = field(default_factory=dict)
    default_price: GpuPrice | None = None
    electricity_per_kwh: Decimal | None = None
    overhead_per_gpu_hour: Decimal = ZERO
    overhead_ratio: Decimal = ZERO
    idle_utilisation_floor: float = 0.05
    sample_gap_s: float = 300.0
    good: GoodRequest = field(default_factory=GoodRequest)
    reserved_discount: Decimal | None = None
    """How much less a reserved GPU-hour costs than on-demand (a fraction in [0, 1)), for
    prices with no ``reserved_per_hour``; ``None``: the purchasing advice assumes its default
    (``core.purchasing.DEFAULT_RESERVED_DISCOUNT``) and says so."""
    example: bool = False
    """``True`` for the bundled example list prices, which operators are meant to replace."""
    slice_prices: Mapping[str, GpuPrice] = field(default_factory=dict)
    """A price per GPU-hour of a MIG slice profile (``3g.40gb``), instead of its fraction of
    the parent GPU's price."""

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 128:
            raise InvalidInput("a cost model needs a name of at most 128 characters")
        check_currency(self.currency)
        if self.electricity_per_kwh is not None:
            _price("electricity_per_kwh", self.electricity_per_kwh)
        _price("overhead_per_gpu_hour", self.overhead_per_gpu_hour)
        if not ZERO <= self.overhead_ratio <= 10:
            raise InvalidInput("overhead_ratio must be in [0, 10]")
        if not 0.0 <= self.idle_utilisation_floor <= 1.0:
            raise InvalidInput("idle_utilisation_floor must be in [0, 1]")
        if not 1.0 <= self.sample_gap_s <= 86400.0:
            raise InvalidInput("sample_gap_s must be in [1, 86400]")
        discount = self.reserved_discount
        if discount is not None and (
            not isinstance(discount, Decimal) or not discount.is_finite() or not 0 <= discount < 1
        ):
            raise InvalidInput(
                "reservedDiscount must be a fraction in [0, 1) of the on-demand price",
                details={"reservedDiscount": str(discount)[:32]},
            )
        for key in self.gpu_prices:
            if not gpu_words(key):
                raise InvalidInput("a GPU price key names a GPU model", details={"key": key})

    def price_for(self, instance: str, gpu_name: str) -> GpuPrice | None:
        """The instance's own price, else the GPU model whose key matches the most words of
        the GPU's name (``H100`` matches ``NVIDIA H100 80GB HBM3``), else the default."""
        if instance in self.instance_prices:
            return self.instance_prices[instance]
        words = gpu_words(gpu_name)
        best: tuple[int, str] | None = None
        for key in self.gpu_prices:
            need = gpu_words(key)
            if need <= words and (best is None or len(need) > best[0]):
                best = (len(need), key)
        if best is not None:
            return self.gpu_prices[best[1]]
        return self.default_price

    def slice_cost(
        self, instance: str, gpu_name: str, gpu_slice: GpuSlice | None
    ) -> tuple[Decimal, bool] | None:
        """(price per GPU-hour, own) of a device: ``own`` when a MIG profile has its own price
        (``slice_prices``; an instance's own price still wins), else the parent GPU's price,
        which a slice pays its fraction of; ``None`` when nothing prices it."""
        if (
            gpu_slice is not None
            and gpu_slice.profile in self.slice_prices
            and instance not in self.instance_prices
        ):
            return self.slice_prices[gpu_slice.profile].blended_per_hour, True
        price = self.price_for(instance, gpu_name)
        return None if price is None else (price.blended_per_hour, False)


# -- usage measured in the store ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuUsage:
    """One GPU of one instance over a window, from its samples."""

    instance: str
    gpu_index: int
    name: str
    gpu_seconds: Decimal
    idle_seconds: Decimal
    energy_j: Decimal
    util_seconds: float = 0.0
    """Seconds covered by samples that reported utilisation."""
    util_weighted: float = 0.0
    """Σ utilisation × seconds over those samples."""
    gpu_slice: str = ""
    """The slice of its parent GPU the device is (``core.gpu_slice``); empty: a whole GPU."""

    @property
    def slice(self) -> GpuSlice | None:
        return parse_slice(self.gpu_slice)

    def __post_init__(self) -> None:
        if self.gpu_seconds < 0 or not ZERO <= self.idle_seconds <= self.gpu_seconds:
            raise InvalidInput("GPU seconds must be ≥ 0 and idle seconds within them")
        if self.energy_j < 0:
            raise InvalidInput("energy must be ≥ 0")


@dataclass(frozen=True, slots=True)
class SeriesUsage:
    """What one series (model, instance, tenant, priority, adapter) served over a window."""

    labels: Mapping[str, str]
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    good_tokens: int = 0
    prefill_s: Decimal = ZERO
    decode_s: Decimal = ZERO
    good_basis: str = ""
    """``slo`` or ``cost_model``: what the series' good tokens were measured against."""
    role: str = ""
    """Disaggregated serving: ``prefill`` — a prefill instance's legs of users' requests (no
    requests or tokens of their own: those are counted on the decode side), its cost all
    input; ``decode`` — users' requests split by a P/D proxy, on their decode instance, its
    cost all output and its GPU time the decode time only (the prefill leg ran elsewhere);
    ``""`` — whole requests."""

    def __post_init__(self) -> None:
        if self.role not in ("", "prefill", "decode"):
            raise InvalidInput("a series' role is prefill, decode or empty")
        if set(self.labels) != set(GROUP_LABELS):
            raise InvalidInput(
                "series labels are " + ", ".join(GROUP_LABELS), details={"got": sorted(self.labels)}
            )

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def gpu_time_s(self) -> Decimal:
        if self.role == "decode":
            return self.decode_s
        return self.prefill_s + self.decode_s

    def split(self) -> list[Decimal]:
        """Weights of the series' cost between input and output: a prefill leg's is all
        input, a split request's decode side all output, else prefill vs decode GPU time (the
        tokens where stage timings are missing)."""
        if self.role == "prefill":
            return [Decimal(1), ZERO]
        if self.role == "decode":
            return [ZERO, Decimal(1)]
        if self.gpu_time_s > 0:
            return [self.prefill_s, self.decode_s]
        return [Decimal(self.input_tokens), Decimal(self.output_tokens)]


# -- instance cost --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceCost:
    """An instance's cost over a window; amounts quantized."""

    instance: str
    gpu_names: tuple[str, ...]
    gpus: int
    gpu_hours: Decimal
    idle_gpu_hours: Decimal
    energy_kwh: Decimal
    gpu_cost: Money
    energy_cost: Money
    overhead_cost: Money
    total: Money
    idle_cost: Money
    utilisation: float | None
    served: bool
    unpriced: tuple[str, ...] = ()
    """GPU names no price matched (their time costs nothing here)."""
    slices: tuple[GpuSlice, ...] = ()
    """The slices of GPUs the instance ran on (MIG slices, time-sliced shares); empty: whole
    GPUs only. Its GPU-hours and cost are its fraction of the parent GPUs'."""


def _fraction_of(hours: Decimal, gpu_slice: GpuSlice | None) -> Decimal:
    """``hours`` × the slice's exact fraction (``hours`` for a whole GPU)."""
    if gpu_slice is None:
        return hours
    return hours * gpu_slice.fraction.numerator / gpu_slice.fraction.denominator


def price_instance(
    model: CostModel, instance: str, gpus: Sequence[GpuUsage], served: bool
) -> InstanceCost:
    """The cost of ``instance``'s GPUs; all of it is idle when it ``served`` nothing."""
    currency = model.currency
    gpu_cost = energy_cost = ZERO
    gpu_hours = idle_hours = kwh = ZERO
    unpriced: set[str] = set()
    util_s = util_w = 0.0
    slices: dict[str, GpuSlice] = {}
    for gpu in gpus:
        part = gpu.slice
        if part is not None:
            slices[part.text] = part
        # A slice stands for its fraction of the parent GPU's hours, energy and price — or,
        # where the cost model prices its profile, for its own hours at that price.
        wall = gpu.gpu_seconds / SECONDS_PER_HOUR
        hours = _fraction_of(wall, part)
        gpu_hours += hours
        idle_hours += (
            hours if not served else _fraction_of(gpu.idle_seconds / SECONDS_PER_HOUR, part)
        )
        energy = _fraction_of(gpu.energy_j / JOULES_PER_KWH, part)
        kwh += energy
        priced = model.slice_cost(instance, gpu.name, part)
        if priced is None:
            unpriced.add(gpu.name or "?")
        else:
            per_hour, own = priced
            gpu_cost += (wall if own else hours) * per_hour
        if model.electricity_per_kwh is not None:
            energy_cost += energy * model.electricity_per_kwh
        util_s += gpu.util_seconds
        util_w += gpu.util_weighted
    overhead = gpu_hours * model.overhead_per_gpu_hour + model.overhead_ratio * (
        gpu_cost + energy_cost
    )
    if slices:
        # Rounded down, so that the slices of one GPU never add up to more than the GPU.
        total = (gpu_cost + energy_cost + overhead).quantize(QUANTUM, rounding=ROUND_FLOOR)
    else:
        total = quantize(gpu_cost + energy_cost + overhead)
    idle = quantize(total * idle_hours / gpu_hours) if gpu_hours else ZERO
    return InstanceCost(
        instance=instance,
        gpu_names=tuple(sorted({g.name for g in gpus})),
        gpus=len({g.gpu_index for g in gpus}),
        gpu_hours=quantize(gpu_hours),
        idle_gpu_hours=quantize(idle_hours),
        energy_kwh=quantize(kwh),
        gpu_cost=Money(quantize(gpu_cost), currency),
        energy_cost=Money(quantize(energy_cost), currency),
        overhead_cost=Money(quantize(overhead), currency),
        total=Money(total, currency),
        idle_cost=Money(idle, currency),
        utilisation=util_w / util_s if util_s > 0 else None,
        served=served,
        unpriced=tuple(sorted(unpriced)),
        slices=tuple(slices[k] for k in sorted(slices)),
    )


# -- attribution ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CostLine:
    """Cost and usage of one group (any grouping of the four labels) over a window."""

    labels: Mapping[str, str]
    currency: str
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    good_tokens: int = 0
    gpu_hours: Decimal = ZERO
    idle_gpu_hours: Decimal = ZERO
    energy_kwh: Decimal = ZERO
    cost: Decimal = ZERO
    input_cost: Decimal = ZERO
    output_cost: Decimal = ZERO
    idle_cost: Decimal = ZERO
    util_weighted_hours: float = 0.0
    util_hours: float = 0.0
    good_bases: frozenset[str] = frozenset()
    """What the good tokens of the line's series were measured against (``core.goodput``)."""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def good_basis(self) -> str:
        """``slo``, ``cost_model`` or ``mixed`` (``""``: no series)."""
        return basis_of(self.good_bases)

    @property
    def utilisation(self) -> float | None:
        return self.util_weighted_hours / self.util_hours if self.util_hours > 0 else None

    def money(self, amount: Decimal) -> Money:
        return Money(amount, self.currency)

    @property
    def cost_per_million_tokens(self) -> Money | None:
        return self.money(self.cost).per_million(self.tokens)

    @property
    def cost_per_million_input_tokens(self) -> Money | None:
        return self.money(self.input_cost).per_million(self.input_tokens)

    @property
    def cost_per_million_output_tokens(self) -> Money | None:
        return self.money(self.output_cost).per_million(self.output_tokens)

    @property
    def cost_per_million_good_tokens(self) -> Money | None:
        return self.money(self.cost).per_million(self.good_tokens)

    @property
    def tokens_per_joule(self) -> float | None:
        joules = float(self.energy_kwh * JOULES_PER_KWH)
        return self.tokens / joules if joules > 0 else None

    def plus(self, other: CostLine, labels: Mapping[str, str]) -> CostLine:
        if other.currency != self.currency:
            raise InvalidInput("cannot add cost lines in different currencies")
        return CostLine(
            labels=labels,
            currency=self.currency,
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            good_tokens=self.good_tokens + other.good_tokens,
            gpu_hours=self.gpu_hours + other.gpu_hours,
            idle_gpu_hours=self.idle_gpu_hours + other.idle_gpu_hours,
            energy_kwh=self.energy_kwh + other.energy_kwh,
            cost=self.cost + other.cost,
            input_cost=self.input_cost + other.input_cost,
            output_cost=self.output_cost + other.output_cost,
            idle_cost=self.idle_cost + other.idle_cost,
            util_weighted_hours=self.util_weighted_hours + other.util_weighted_hours,
            util_hours=self.util_hours + other.util_hours,
            good_bases=self.good_bases | other.good_bases,
        )


def unattributed_labels(instance: str) -> dict[str, str]:
    return {**dict.fromkeys(GROUP_LABELS, ""), "instance": instance}


def _weights(series: Sequence[SeriesUsage]) -> list[Decimal]:
    if any(s.gpu_time_s > 0 for s in series):
        return [s.gpu_time_s for s in series]
    return [Decimal(s.tokens) for s in series]


def attribute(instance: InstanceCost, series: Sequence[SeriesUsage]) -> list[CostLine]:
    """``instance``'s cost shared among the ``series`` it served (one line each), or one
    unattributed line when it served nothing. The lines add up to the instance exactly."""
    currency = instance.total.currency
    if not series:
        series = [SeriesUsage(unattributed_labels(instance.instance))]
    weights = _weights(series)
    cost = allocate(instance.total.amount, weights)
    idle = allocate(instance.idle_cost.amount, weights)
    hours = allocate(instance.gpu_hours, weights)
    idle_hours = allocate(instance.idle_gpu_hours, weights)
    kwh = allocate(instance.energy_kwh, weights)
    util = instance.utilisation
    lines = []
    for i, s in enumerate(series):
        split = s.split()
        input_cost, output_cost = allocate(cost[i], split) if any(split) else (ZERO, cost[i])
        lines.append(
            CostLine(
                labels=dict(s.labels),
                currency=currency,
                requests=s.requests,
                input_tokens=s.input_tokens,
                output_tokens=s.output_tokens,
                good_tokens=s.good_tokens,
                gpu_hours=hours[i],
                idle_gpu_hours=idle_hours[i],
                energy_kwh=kwh[i],
                cost=cost[i],
                input_cost=input_cost,
                output_cost=output_cost,
                idle_cost=idle[i],
                util_weighted_hours=float(hours[i]) * util if util is not None else 0.0,
                util_hours=float(hours[i]) if util is not None else 0.0,
                good_bases=frozenset({s.good_basis}) if s.good_basis else frozenset(),
            )
        )
    return lines


def group_lines(
    lines: Iterable[CostLine], group_by: Sequence[str], currency: str
) -> tuple[list[CostLine], CostLine]:
    """Lines summed per ``group_by`` labels (sorted by labels), and the grand total."""
    groups: dict[tuple[str, ...], CostLine] = {}
    total = CostLine({}, currency)
    for line in lines:
        key = tuple(line.labels.get(name, "") for name in group_by)
        labels = dict(zip(group_by, key, strict=True))
        groups[key] = groups.get(key, CostLine(labels, currency)).plus(line, labels)
        total = total.plus(line, {})
    return [groups[key] for key in sorted(groups)], total


@dataclass(frozen=True, slots=True)
class CostResult:
    """The answer to a cost question over a window: per-group lines, the total, and the
    instance costs they were attributed from."""

    window: Window
    model_name: str
    currency: str
    example_prices: bool
    group_by: tuple[str, ...]
    groups: tuple[CostLine, ...]
    total: CostLine
    instances: tuple[InstanceCost, ...]
    unmetered: tuple[str, ...] = ()
    """Instances that served requests but sent no GPU samples (their time is not priced)."""
    good_tokens_exact: bool = True
    """``False`` when raw rows of part of the window are gone, so good tokens undercount."""
    good_rules: tuple[tuple[GoodRule, tuple[Mapping[str, str], ...]], ...] = ()
    """Each set of good-token limits used, with the series (labels) held to it."""
    lines: tuple[CostLine, ...] = ()
    """The series' attributed lines (within the selector) that ``groups`` and ``total`` add
    up: what ``regrouped`` groups again."""

    @property
    def unpriced(self) -> tuple[str, ...]:
        return tuple(sorted({name for i in self.instances for name in i.unpriced}))

    def regrouped(self, group_by: Sequence[str]) -> CostResult:
        """The same answer grouped by ``group_by`` instead: what the store answers for that
        grouping, from this answer's lines (one read of the window for several groupings).
        ``total`` is unchanged: the same lines, added up in the same order."""
        names = check_group_by(group_by)
        groups, total = group_lines(self.lines, names, self.currency)
        if total != self.total:  # an answer built without its lines
            raise InvalidInput("this cost answer cannot be grouped again (it has no lines)")
        return replace(self, group_by=names, groups=tuple(groups))


__all__ = [
    "JOULES_PER_KWH",
    "MILLION",
    "QUANTUM",
    "SECONDS_PER_HOUR",
    "ZERO",
    "CostLine",
    "CostModel",
    "CostResult",
    "GoodRequest",
    "GpuPrice",
    "GpuSlice",
    "GpuUsage",
    "InstanceCost",
    "Money",
    "SeriesUsage",
    "allocate",
    "attribute",
    "check_currency",
    "decimal_of",
    "gpu_words",
    "group_lines",
    "price_instance",
    "quantize",
    "unattributed_labels",
]


def rules_used(
    rules: Mapping[tuple[str, ...], GoodRule], selector: Selector
) -> tuple[tuple[GoodRule, tuple[dict[str, str], ...]], ...]:
    """Each good-token rule with the series (``GROUP_LABELS`` keys) ``selector`` picks that
    it held, SLO rules first."""
    held: dict[GoodRule, list[dict[str, str]]] = defaultdict(list)
    for key, rule in sorted(rules.items()):
        labels = dict(zip(GROUP_LABELS, key, strict=True))
        if selector.matches(labels):
            held[rule].append(labels)
    order = sorted(held, key=lambda r: (r.basis != GoodBasis.SLO, r.slos, r.limits.key))
    return tuple((rule, tuple(held[rule])) for rule in order)


def priced(
    window: Window,
    model: CostModel,
    selector: Selector,
    groups: tuple[str, ...],
    usage: Iterable[GpuUsage],
    series: Iterable[SeriesUsage],
    *,
    good_tokens_exact: bool,
    rules: Mapping[tuple[str, ...], GoodRule],
) -> CostResult:
    """The cost answer from what a store read: every instance that sampled GPUs (``usage``)
    or served requests (``series``) priced, its cost attributed to the series it served; the
    groups are the attributed lines of the series ``selector`` picks, summed per ``groups``,
    and the total sums the same lines (each store reads, this prices)."""
    by_instance: dict[str, list[GpuUsage]] = defaultdict(list)
    for gpu in usage:
        by_instance[gpu.instance].append(gpu)
    served: dict[str, list[SeriesUsage]] = defaultdict(list)
    for s in series:
        served[s.labels["instance"]].append(s)
    instances = [
        price_instance(model, name, by_instance.get(name, []), bool(served.get(name)))
        for name in sorted({*by_instance, *served})
    ]
    lines = [
        line
        for instance in instances
        for line in attribute(instance, served.get(instance.instance, []))
        if selector.matches(line.labels)
    ]
    grouped, total = group_lines(lines, groups, model.currency)
    return CostResult(
        window=window,
        model_name=model.name,
        currency=model.currency,
        example_prices=model.example,
        group_by=groups,
        groups=tuple(grouped),
        total=total,
        instances=tuple(i for i in instances if selector.instance in (None, i.instance)),
        unmetered=tuple(sorted(set(served) - set(by_instance))),
        good_tokens_exact=good_tokens_exact,
        good_rules=rules_used(rules, selector),
        lines=tuple(lines),
    )
