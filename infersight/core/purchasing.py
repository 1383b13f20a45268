"""Purchasing advice from recorded GPU demand: the reserved / on-demand split, and idle windows.

**The split.** A reserved GPU is paid every hour of the commitment whether it is used or not;
an on-demand GPU-hour only when used, at a higher price. Given the GPU-hours in use in each
hour of a range (``u_1 … u_H``: GPUs provisioned, whatever they were doing), reserving ``R``
GPUs costs::

    cost(R) = R × reserved × H + Σ_h max(0, u_h − R) × on_demand

This is the newsvendor problem: one more reserved GPU costs ``reserved`` every hour and saves
``on_demand`` in each hour where demand exceeds ``R``, so the best ``R`` is the
``1 − reserved / on_demand`` quantile of the hourly usage (reserve what is in use at least
that share of the time). ``best_split`` finds it exactly: ``cost`` is convex and piecewise
linear in ``R``, so it evaluates the whole GPUs on either side of the quantile from the
sorted usage and its prefix sums, and keeps the cheaper (the smaller on a tie: the smaller
commitment). A reserved price at or above on-demand gives ``R = 0``; the saving against all
on-demand is never negative, since ``R = 0`` is all on-demand.

Where the cost model gives no reserved price for a GPU, one is assumed at
``1 − reserved_discount`` of on-demand (``DEFAULT_RESERVED_DISCOUNT``: 40 % off, a typical
one-year commitment), and the answer says it was assumed. Only the GPU price is compared:
energy and overhead do not depend on how the GPUs are bought.

**Idle windows.** The same hours, folded onto the 168 hours of a week (weekday × hour, in a
time zone), give each cell's GPU-hours, time-weighted mean utilisation and idle GPU-hours —
the GPU time not busy, ``GPU-hours × (1 − utilisation)`` — and what that idle time cost
(its share of the cell's GPU cost, at the cost model's price). Cells whose utilisation sits
below a floor (``DEFAULT_IDLE_FLOOR``, 30 %) are where offline or batch work fits; adjacent
ones (across midnight and the week's end) merge into windows such as ``Sat 01:00–07:00``,
ranked by idle cost.

**Filling them.** Unit cost is cost over tokens; if tokens grow with busy GPU time (the
range's tokens per busy GPU-hour) and filling the windows adds no GPU-hours (the work runs on
GPUs already paid for), lifting the windows' utilisation to a target multiplies cost per
million tokens by ``busy before / busy after`` — the essay's 35 % → 60 % is a 42 % cut.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from functools import lru_cache
from itertools import accumulate
from typing import Final
from zoneinfo import ZoneInfo

from infersight.core.cost import CostModel, GpuPrice
from infersight.core.errors import InvalidInput
from infersight.core.money import QUANTUM, ZERO, quantize

#: Where a price has no reserved price: reserved GPU-hours cost this much less than on-demand.
DEFAULT_RESERVED_DISCOUNT: Final = Decimal("0.40")
#: Hour-of-week cells with mean utilisation below this are idle windows.
DEFAULT_IDLE_FLOOR: Final = 0.30
#: The utilisation the idle windows are filled to in the what-if.
DEFAULT_FILL_TARGET: Final = 0.60
#: How many merged idle windows an answer lists.
DEFAULT_TOP_WINDOWS: Final = 5
MAX_TOP_WINDOWS: Final = 50
#: The most hours one answer reads (a quarter of hourly buckets).
MAX_HOURS: Final = 92 * 24
HOURS_PER_WEEK: Final = 168
DAY_NAMES: Final = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_HOUR: Final = timedelta(hours=1)
_SECONDS_PER_HOUR: Final = 3600.0


def check_fraction(name: str, value: float, *, low_open: bool = False) -> float:
    """``value`` as a share in [0, 1] (``(0, 1]`` with ``low_open``); else ``InvalidInput``."""
    ok = isinstance(value, int | float) and math.isfinite(value) and 0.0 <= value <= 1.0
    if not ok or (low_open and value == 0.0):
        bounds = "(0, 1]" if low_open else "[0, 1]"
        raise InvalidInput(f"{name} must be a share in {bounds}", details={name: str(value)[:32]})
    return float(value)


def check_discount(value: Decimal) -> Decimal:
    """A reserved discount: a fraction of on-demand in [0, 1)."""
    if not isinstance(value, Decimal) or not value.is_finite() or not ZERO <= value < 1:
        raise InvalidInput(
            "reserved_discount must be a fraction in [0, 1) of the on-demand price",
            details={"reserved_discount": str(value)[:32]},
        )
    return value


# -- the reserved / on-demand split ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Split:
    """The cheapest number of reserved GPUs for an hourly usage, and what it saves."""

    reserved_gpus: int
    hours: int
    gpu_hours: Decimal
    reserved_gpu_hours: Decimal
    """GPU-hours in use that the reserved GPUs serve: Σ min(u_h, R)."""
    on_demand_gpu_hours: Decimal
    on_demand_price: Decimal
    reserved_price: Decimal
    split_cost: Decimal
    on_demand_cost: Decimal

    @property
    def saving(self) -> Decimal:
        return self.on_demand_cost - self.split_cost

    @property
    def saving_share(self) -> float | None:
        return float(self.saving / self.on_demand_cost) if self.on_demand_cost else None

    @property
    def coverage(self) -> float | None:
        """The share of GPU-hours in use that run on reserved GPUs."""
        return float(self.reserved_gpu_hours / self.gpu_hours) if self.gpu_hours else None

    @property
    def reservation_use(self) -> float | None:
        """The share of the reserved GPU-hours paid for that were in use."""
        paid = self.reserved_gpus * self.hours
        return float(self.reserved_gpu_hours / paid) if paid else None

    @property
    def price_ratio(self) -> float | None:
        if not self.on_demand_price:
            return None
        return float(self.reserved_price / self.on_demand_price)

    @property
    def quantile(self) -> float | None:
        """The usage quantile the newsvendor answer reserves: 1 − reserved / on-demand."""
        ratio = self.price_ratio
        return None if ratio is None else max(0.0, 1.0 - ratio)


def _usage(usage: Iterable[Decimal]) -> list[Decimal]:
    out = []
    for u in usage:
        if not isinstance(u, Decimal) or not u.is_finite() or u < 0:
            raise InvalidInput("hourly GPU usage must be finite and ≥ 0", details={"u": str(u)})
        out.append(u)
    if len(out) > MAX_HOURS:
        raise InvalidInput(f"purchasing advice reads at most {MAX_HOURS} hours")
    return out


def split_cost(
    usage: Sequence[Decimal], reserved_gpus: int, on_demand: Decimal, reserved: Decimal
) -> Decimal:
    """``cost(R)`` of the module docstring, directly (the tests' reference)."""
    r = Decimal(reserved_gpus)
    return r * reserved * len(usage) + sum((max(ZERO, u - r) * on_demand for u in usage), ZERO)


def best_split(usage: Iterable[Decimal], on_demand: Decimal, reserved: Decimal) -> Split:
    """The whole number of reserved GPUs that minimises the cost of ``usage`` (GPU-hours in
    use in each hour), at ``on_demand`` and ``reserved`` per GPU-hour (see the module
    docstring); the smallest such number on a tie."""
    for name, price in (("on_demand", on_demand), ("reserved", reserved)):
        if not isinstance(price, Decimal) or not price.is_finite() or price < 0:
            raise InvalidInput(f"the {name} price must be ≥ 0", details={name: str(price)})
    hours = _usage(usage)
    ordered = sorted(hours)
    prefix = [ZERO, *accumulate(ordered)]
    total = prefix[-1]
    n = len(ordered)

    def above(r: int) -> tuple[int, Decimal]:
        """How many hours use more than ``r`` GPUs, and their GPU-hours."""
        k = bisect_right(ordered, Decimal(r))
        return n - k, total - prefix[k]

    def cost(r: int) -> Decimal:
        count, over = above(r)
        return Decimal(r) * reserved * n + (over - Decimal(r) * count) * on_demand

    # cost is convex and piecewise linear with its kinks at the u_h: the best whole number
    # of GPUs is 0 or the whole number on either side of some u_h. Scan them all.
    candidates = {0}
    if on_demand > reserved:
        for u in ordered:
            candidates.add(int(u.to_integral_value(ROUND_FLOOR)))
            candidates.add(int(u.to_integral_value(ROUND_CEILING)))
    best = min(sorted(candidates), key=lambda r: (cost(r), r))
    count, over = above(best)
    on_demand_hours = over - Decimal(best) * count
    return Split(
        reserved_gpus=best,
        hours=n,
        gpu_hours=total,
        reserved_gpu_hours=total - on_demand_hours,
        on_demand_gpu_hours=on_demand_hours,
        on_demand_price=on_demand,
        reserved_price=reserved,
        split_cost=quantize(cost(best)),
        on_demand_cost=quantize(total * on_demand),
    )


# -- usage by hour, priced ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuHour:
    """What one instance's GPUs of one model did in one hour (from the hour rollups)."""

    at: datetime
    """The hour's start (UTC)."""
    instance: str
    gpu_name: str
    gpu_seconds: float
    util_seconds: float = 0.0
    """Seconds that reported utilisation."""
    util_weighted: float = 0.0
    """Σ utilisation × seconds over them."""

    def __post_init__(self) -> None:
        # 0 ≤ v < ∞ is "finite and ≥ 0" (NaN fails it), without a generator per row.
        if not (
            0 <= self.gpu_seconds < math.inf
            and 0 <= self.util_seconds < math.inf
            and 0 <= self.util_weighted < math.inf
        ):
            raise InvalidInput("GPU seconds and utilisation sums must be finite and ≥ 0")


@dataclass(frozen=True, slots=True)
class Pool:
    """GPUs bought at one price: a GPU model (or an instance with a price of its own)."""

    name: str
    on_demand_per_hour: Decimal
    reserved_per_hour: Decimal
    reserved_assumed: bool
    blended_per_hour: Decimal
    """What the cost model charges for its GPU-hours today (its declared reserved share)."""


def reserved_price(price: GpuPrice, discount: Decimal) -> tuple[Decimal, bool]:
    """The reserved price of ``price``: its own, else on-demand less ``discount`` (assumed)."""
    if price.reserved_per_hour is not None:
        return price.reserved_per_hour, False
    return quantize(price.on_demand_per_hour * (1 - discount)), True


def pool_for(model: CostModel, instance: str, gpu_name: str, discount: Decimal) -> Pool | None:
    """The pool of ``instance``'s GPUs named ``gpu_name`` (``None``: nothing prices them)."""
    price = model.price_for(instance, gpu_name)
    if price is None:
        return None
    own = instance in model.instance_prices
    name = f"{instance} ({gpu_name or '?'})" if own else (gpu_name or "?")
    reserved, assumed = reserved_price(price, discount)
    return Pool(name, price.on_demand_per_hour, reserved, assumed, price.blended_per_hour)


@dataclass(frozen=True, slots=True)
class PoolSplit:
    pool: Pool
    split: Split
    current_cost: Decimal
    """The same GPU-hours at the cost model's blended price (its declared reserved share)."""


@dataclass(frozen=True, slots=True)
class Cell:
    """One hour of the week (``0`` is Monday 00:00) over every week of the range."""

    hour_of_week: int
    occurrences: int
    gpu_hours: float
    util_hours: float
    busy_gpu_hours: float
    cost: Decimal

    @property
    def utilisation(self) -> float | None:
        return self.busy_gpu_hours / self.util_hours if self.util_hours > 0 else None

    @property
    def idle_gpu_hours(self) -> float:
        util = self.utilisation
        return 0.0 if util is None else self.gpu_hours * (1.0 - util)

    @property
    def idle_cost(self) -> Decimal:
        util = self.utilisation
        if util is None:
            return ZERO
        return quantize(self.cost * Decimal(repr(1.0 - util)))

    @property
    def label(self) -> str:
        return hour_label(self.hour_of_week)


def hour_label(hour_of_week: int) -> str:
    """``Sat 01:00`` for hour 121."""
    day, hour = divmod(hour_of_week % HOURS_PER_WEEK, 24)
    return f"{DAY_NAMES[day]} {hour:02d}:00"


def window_label(first: int, length: int) -> str:
    """``Sat 01:00–07:00``; ``Fri 22:00–Sat 04:00`` across midnight (the end is exclusive)."""
    if length >= HOURS_PER_WEEK:
        return "all week"
    first %= HOURS_PER_WEEK
    end = first + length
    day, end_day, end_hour = first // 24, end // 24, end % 24
    if end_day == day:
        tail = f"{end_hour:02d}:00"
    elif end_day == day + 1 and end_hour == 0:
        tail = "24:00"
    else:
        tail = f"{DAY_NAMES[end_day % 7]} {end_hour:02d}:00"
    return f"{hour_label(first)}–{tail}"


@lru_cache(maxsize=4096)
def hour_of_week(at: datetime, tz: ZoneInfo) -> int:
    """``at``'s hour of the week in ``tz`` (kept for the last 4,096 hours asked: the advice
    asks once per row, for the same hours once per instance)."""
    local = at.astimezone(tz)
    return local.weekday() * 24 + local.hour


@dataclass(frozen=True, slots=True)
class IdleWindow:
    """Adjacent idle cells, merged."""

    first: int
    hours: int
    gpu_hours: float
    busy_gpu_hours: float
    util_hours: float
    idle_gpu_hours: float
    idle_cost: Decimal

    @property
    def label(self) -> str:
        return window_label(self.first, self.hours)

    @property
    def utilisation(self) -> float | None:
        return self.busy_gpu_hours / self.util_hours if self.util_hours > 0 else None


def merge_windows(cells: Sequence[Cell], floor: float) -> list[IdleWindow]:
    """Runs of consecutive hours of week whose utilisation is below ``floor`` (wrapping from
    Sunday 23:00 to Monday 00:00), largest idle cost first."""
    idle = {c.hour_of_week for c in cells if c.utilisation is not None and c.utilisation < floor}
    by_hour = {c.hour_of_week: c for c in cells}
    if not idle:
        return []
    if len(idle) == HOURS_PER_WEEK:
        starts = [0]
    else:
        starts = sorted(h for h in idle if (h - 1) % HOURS_PER_WEEK not in idle)
    out = []
    for first in starts:
        run: list[Cell] = []
        h = first
        while h in idle and len(run) < HOURS_PER_WEEK:
            run.append(by_hour[h])
            h = (h + 1) % HOURS_PER_WEEK
        out.append(
            IdleWindow(
                first=first,
                hours=len(run),
                gpu_hours=sum(c.gpu_hours for c in run),
                busy_gpu_hours=sum(c.busy_gpu_hours for c in run),
                util_hours=sum(c.util_hours for c in run),
                idle_gpu_hours=sum(c.idle_gpu_hours for c in run),
                idle_cost=sum((c.idle_cost for c in run), ZERO),
            )
        )
    return sorted(out, key=lambda w: (-w.idle_cost, -w.idle_gpu_hours, w.first))


@dataclass(frozen=True, slots=True)
class Fill:
    """What lifting the idle windows' utilisation to ``target`` would do to unit cost."""

    floor: float
    target: float
    busy_before: float
    busy_after: float
    utilisation_before: float | None
    utilisation_after: float | None

    @property
    def unit_cost_factor(self) -> float | None:
        """Cost per million tokens after ÷ before (tokens ∝ busy GPU time, same GPU-hours)."""
        return self.busy_before / self.busy_after if self.busy_after > 0 else None

    @property
    def unit_cost_cut(self) -> float | None:
        factor = self.unit_cost_factor
        return None if factor is None or self.busy_before <= 0 else 1.0 - factor


def fill_windows(cells: Sequence[Cell], floor: float, target: float) -> Fill:
    """Lift every cell below ``floor`` to ``target`` utilisation (module docstring)."""
    check_fraction("floor", floor)
    check_fraction("target", target)
    if target < floor:
        raise InvalidInput(
            "the fill target must be at least the idle floor",
            details={"floor": floor, "target": target},
        )
    measured = [c for c in cells if c.utilisation is not None]
    before = sum(c.busy_gpu_hours for c in measured)
    util_hours = sum(c.util_hours for c in measured)
    added = sum(
        (target - c.utilisation) * c.util_hours
        for c in measured
        if c.utilisation is not None and c.utilisation < floor
    )
    after = before + added
    return Fill(
        floor=floor,
        target=target,
        busy_before=before,
        busy_after=after,
        utilisation_before=before / util_hours if util_hours else None,
        utilisation_after=after / util_hours if util_hours else None,
    )


# -- the whole answer -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Advice:
    """The split per pool (and in total), and the idle windows by hour of week."""

    start: datetime
    end: datetime
    """The whole hours read: from the first hour with GPU data to the range's last whole hour."""
    hours: int
    currency: str
    reserved_discount: Decimal
    discount_assumed: bool
    pools: tuple[PoolSplit, ...]
    unpriced: tuple[str, ...]
    cells: tuple[Cell, ...]
    windows: tuple[IdleWindow, ...]
    fill: Fill
    floor: float
    timezone: str
    hours_with_data: int = 0
    rows: int = 0
    example_prices: bool = False

    @property
    def empty(self) -> bool:
        return not self.pools and not self.unpriced

    @property
    def reserved_assumed(self) -> bool:
        return any(p.pool.reserved_assumed for p in self.pools)

    def _sum(self, pick: str) -> Decimal:
        return sum((getattr(p.split, pick) for p in self.pools), ZERO)

    @property
    def split_cost(self) -> Decimal:
        return self._sum("split_cost")

    @property
    def on_demand_cost(self) -> Decimal:
        return self._sum("on_demand_cost")

    @property
    def current_cost(self) -> Decimal:
        return sum((p.current_cost for p in self.pools), ZERO)

    @property
    def saving(self) -> Decimal:
        return self.on_demand_cost - self.split_cost

    @property
    def saving_share(self) -> float | None:
        cost = self.on_demand_cost
        return float(self.saving / cost) if cost else None

    @property
    def gpu_hours(self) -> Decimal:
        return self._sum("gpu_hours")

    @property
    def coverage(self) -> float | None:
        used = self.gpu_hours
        return float(self._sum("reserved_gpu_hours") / used) if used else None

    @property
    def reserved_gpus(self) -> int:
        return sum(p.split.reserved_gpus for p in self.pools)

    @property
    def idle_cells(self) -> tuple[Cell, ...]:
        """The hour-of-week cells below the floor (every idle window's, listed or not)."""
        return tuple(
            c for c in self.cells if c.utilisation is not None and c.utilisation < self.floor
        )

    @property
    def idle_gpu_hours(self) -> float:
        return sum(c.idle_gpu_hours for c in self.idle_cells)

    @property
    def idle_cost(self) -> Decimal:
        return sum((c.idle_cost for c in self.idle_cells), ZERO)


@dataclass(slots=True)
class _CellAcc:
    hours: set[datetime] = field(default_factory=set)
    gpu_hours: float = 0.0
    util_hours: float = 0.0
    busy: float = 0.0
    cost: Decimal = ZERO


def check_span(start: datetime, end: datetime) -> None:
    """Refuse a range longer than ``MAX_HOURS`` whole hours (before anything is read)."""
    if end <= start:
        raise InvalidInput("the range must end after it starts")
    if (end - start) >= _HOUR * (MAX_HOURS + 1):
        raise InvalidInput(
            f"purchasing advice covers at most {MAX_HOURS // 24} days",
            details={"max_days": MAX_HOURS // 24},
        )


def _whole_hours(start: datetime, end: datetime) -> list[datetime]:
    first = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    if first < start:
        first += _HOUR
    out: list[datetime] = []
    at = first
    while at + _HOUR <= end and len(out) <= MAX_HOURS:
        out.append(at)
        at += _HOUR
    if len(out) > MAX_HOURS:
        raise InvalidInput(
            f"purchasing advice covers at most {MAX_HOURS // 24} days",
            details={"max_days": MAX_HOURS // 24},
        )
    return out


def _pools(model: CostModel, discount: Decimal) -> Callable[[str, str], Pool | None]:
    """``pool_for`` that prices each (instance, GPU model) once: the advice's rows come an
    hour × instance × GPU model at a time, so the same few are asked for on every row."""
    done: dict[tuple[str, str], Pool | None] = {}

    def get(instance: str, gpu_name: str) -> Pool | None:
        key = (instance, gpu_name)
        if key not in done:
            done[key] = pool_for(model, instance, gpu_name, discount)
        return done[key]

    return get


def advise(
    rows: Iterable[GpuHour],
    model: CostModel,
    start: datetime,
    end: datetime,
    *,
    tz: ZoneInfo | None = None,
    floor: float = DEFAULT_IDLE_FLOOR,
    target: float = DEFAULT_FILL_TARGET,
    top: int = DEFAULT_TOP_WINDOWS,
) -> Advice:
    """Purchasing advice for the whole hours of ``[start, end)`` from the hourly ``rows``.

    The split reads the hours from the first one with GPU data to the range's last whole hour
    (an hour in between with none uses 0 GPUs), so a store younger than the range is not
    advised on hours it never saw. Rows outside the whole hours are ignored.
    """
    check_fraction("floor", floor)
    check_fraction("target", target)
    if target < floor:
        raise InvalidInput(
            "the fill target must be at least the idle floor",
            details={"floor": floor, "target": target},
        )
    if not isinstance(top, int) or not 1 <= top <= MAX_TOP_WINDOWS:
        raise InvalidInput(f"top must be a whole number in [1, {MAX_TOP_WINDOWS}]")
    if end <= start:
        raise InvalidInput("the range must end after it starts")
    zone = tz or ZoneInfo("UTC")
    discount = model.reserved_discount
    assumed = discount is None
    discount = check_discount(DEFAULT_RESERVED_DISCOUNT if discount is None else discount)
    hours = _whole_hours(start, end)
    wanted = set(hours)
    per_pool: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    pools: dict[str, Pool] = {}
    cells: dict[int, _CellAcc] = defaultdict(_CellAcc)
    unpriced: set[str] = set()
    seen: set[datetime] = set()
    priced = _pools(model, discount)  # ``hour_of_week`` keeps its recent answers too
    count = 0
    for row in rows:
        count += 1
        at = row.at.astimezone(UTC)
        if at not in wanted:
            continue
        seen.add(at)
        pool = priced(row.instance, row.gpu_name)
        gpu_hours = row.gpu_seconds / _SECONDS_PER_HOUR
        cell = cells[hour_of_week(at, zone)]
        cell.hours.add(at)
        cell.gpu_hours += gpu_hours
        cell.util_hours += row.util_seconds / _SECONDS_PER_HOUR
        cell.busy += row.util_weighted / _SECONDS_PER_HOUR
        if pool is None:
            unpriced.add(row.gpu_name or "?")
            continue
        pools.setdefault(pool.name, pool)
        per_pool[pool.name][at] += gpu_hours
        cell.cost += Decimal(repr(gpu_hours)) * pool.blended_per_hour
    first = min(seen, default=None)
    span = [h for h in hours if first is not None and h >= first]
    splits = []
    for name in sorted(pools):
        pool = pools[name]
        usage = [Decimal(repr(per_pool[name].get(h, 0.0))).quantize(QUANTUM) for h in span]
        split = best_split(usage, pool.on_demand_per_hour, pool.reserved_per_hour)
        current = quantize(split.gpu_hours * pool.blended_per_hour)
        splits.append(PoolSplit(pool, split, current))
    cell_list = tuple(
        Cell(
            hour_of_week=h,
            occurrences=len(acc.hours),
            gpu_hours=acc.gpu_hours,
            util_hours=acc.util_hours,
            busy_gpu_hours=acc.busy,
            cost=quantize(acc.cost),
        )
        for h, acc in sorted(cells.items())
    )
    windows = merge_windows(cell_list, floor)
    return Advice(
        start=span[0] if span else (hours[0] if hours else start),
        end=hours[-1] + _HOUR if hours else end,
        hours=len(span),
        currency=model.currency,
        reserved_discount=discount,
        discount_assumed=assumed,
        pools=tuple(splits),
        unpriced=tuple(sorted(unpriced)),
        cells=cell_list,
        windows=tuple(windows[:top]),
        fill=fill_windows(cell_list, floor, target),
        floor=floor,
        timezone=zone.key,
        hours_with_data=len(seen),
        rows=count,
        example_prices=model.example,
    )


def per_million_after(per_million: Decimal | None, fill: Fill) -> Decimal | None:
    """Cost per million tokens once the idle windows are filled (``Fill``'s assumption)."""
    factor = fill.unit_cost_factor
    if per_million is None or factor is None:
        return None
    return quantize(per_million * Decimal(repr(factor)))


def assumption_text(advice: Advice) -> list[str]:
    """What the answer assumed, in words (the API, the report and the pages show these)."""
    out = []
    if advice.reserved_assumed:
        share = 1 - advice.reserved_discount
        out.append(
            f"reserved price assumed at {share:.0%} of on-demand (a 1-year commitment) for "
            "GPUs whose price has no reservedPerHour; set reservedPerHour per GPU, or "
            "reservedDiscount, in the cost model"
        )
    out.append(
        "the split compares GPU prices only (energy and overhead do not depend on how GPUs are "
        "bought), for the recorded hours as if they repeat over the commitment"
    )
    out.append(
        f"filling the idle windows to {advice.fill.target:.0%} utilisation adds no GPU-hours "
        "and tokens grow with busy GPU time at the range's tokens per busy GPU-hour"
    )
    return out
