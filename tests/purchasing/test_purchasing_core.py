"""``core.purchasing``: the newsvendor split as table tests named by sentences and as
properties against a brute-force scan, the hour-of-week windows, and the fill what-if."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infersight.core.cost import CostModel, GpuPrice
from infersight.core.errors import InvalidInput
from infersight.core.purchasing import (
    DEFAULT_RESERVED_DISCOUNT,
    Cell,
    GpuHour,
    advise,
    best_split,
    fill_windows,
    merge_windows,
    split_cost,
    window_label,
)

D = Decimal


def hours(*values: float) -> list[Decimal]:
    return [D(str(v)) for v in values]


SPLITS = [
    pytest.param(hours(2, 2, 2, 2), "4", "2.4", 2, id="a flat demand is reserved in full"),
    pytest.param(hours(0, 0, 0, 0), "4", "2.4", 0, id="no demand reserves nothing"),
    pytest.param(
        hours(5, 5, 1, 1), "4", "4", 0, id="a reserved price equal to on-demand reserves nothing"
    ),
    pytest.param(
        hours(5, 5, 5, 5), "4", "5", 0, id="a reserved price above on-demand reserves nothing"
    ),
    pytest.param(
        hours(1, 1, 1, 1, 1, 1, 1, 9, 9, 9),
        "1",
        "0.5",
        1,
        id="a peak in 30 % of hours is left on demand when reserved costs half",
    ),
    pytest.param(
        hours(1, 1, 1, 1, 1, 9, 9, 9, 9, 9, 9),
        "1",
        "0.5",
        9,
        id="a peak in more than half the hours is reserved when reserved costs half",
    ),
    pytest.param(
        hours(1.7, 1.7, 1.7, 1.7),
        "4",
        "2.4",
        2,
        id="a fractional GPU rounds up when its used share beats the price ratio",
    ),
    pytest.param(
        hours(1.2, 1.2, 1.2, 1.2),
        "4",
        "3.5",
        1,
        id="a fractional demand rounds down when the extra GPU would idle most of its hours",
    ),
    pytest.param([], "4", "2.4", 0, id="an empty range reserves nothing"),
]


@pytest.mark.parametrize(("usage", "on_demand", "reserved", "expected"), SPLITS)
def test_the_split_reserves_the_cheapest_number_of_gpus(usage, on_demand, reserved, expected):
    split = best_split(usage, D(on_demand), D(reserved))
    assert split.reserved_gpus == expected
    brute = min(range(12), key=lambda r: (split_cost(usage, r, D(on_demand), D(reserved)), r))
    assert split.reserved_gpus == brute
    assert split.split_cost == split_cost(usage, expected, D(on_demand), D(reserved))


def test_the_split_states_its_costs_coverage_and_saving():
    usage = hours(2, 2, 2, 3, 3, 5, 8, 8, 1, 0)
    split = best_split(usage, D("4"), D("2.4"))
    # 2 reserved: 2 × 2.4 × 10 = 48, plus (1 + 1 + 3 + 6 + 6) × 4 = 68 on demand.
    assert split.reserved_gpus == 2
    assert split.split_cost == D("116")
    assert split.on_demand_cost == D("136")
    assert split.saving == D("20")
    assert split.saving_share == pytest.approx(20 / 136)
    assert split.coverage == pytest.approx(17 / 34)
    assert split.reservation_use == pytest.approx(17 / 20)
    assert split.quantile == pytest.approx(0.4)


@pytest.mark.parametrize(
    ("usage", "on_demand", "reserved", "message"),
    [
        pytest.param(hours(-1), "4", "2", "≥ 0", id="a negative hour is refused"),
        pytest.param([D("NaN")], "4", "2", "finite", id="a NaN hour is refused"),
        pytest.param(hours(1), "-4", "2", "on_demand", id="a negative on-demand price is refused"),
        pytest.param(hours(1), "4", "-2", "reserved", id="a negative reserved price is refused"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(usage, on_demand, reserved, message):
    with pytest.raises(InvalidInput, match=message):
        best_split(usage, D(on_demand), D(reserved))


usage_st = st.lists(
    st.decimals(min_value=0, max_value=40, places=2, allow_nan=False), min_size=1, max_size=60
)
price_st = st.decimals(min_value=D("0.01"), max_value=10, places=2)


@settings(max_examples=150, deadline=None)
@given(usage_st, price_st, price_st)
def test_no_whole_number_of_gpus_costs_less_than_the_split(usage, on_demand, reserved):
    split = best_split(usage, on_demand, reserved)
    top = int(max(usage)) + 2
    for r in range(top):
        assert split.split_cost <= split_cost(usage, r, on_demand, reserved)


@settings(max_examples=150, deadline=None)
@given(usage_st, price_st, price_st)
def test_the_saving_is_never_negative(usage, on_demand, reserved):
    split = best_split(usage, on_demand, reserved)
    assert split.saving >= 0
    assert split.split_cost <= split.on_demand_cost


@settings(max_examples=100, deadline=None)
@given(usage_st, price_st, price_st, price_st)
def test_more_expensive_reservations_never_reserve_more(usage, on_demand, a, b):
    cheap, dear = sorted((a, b))
    assert (
        best_split(usage, on_demand, dear).reserved_gpus
        <= best_split(usage, on_demand, cheap).reserved_gpus
    )


@settings(max_examples=100, deadline=None)
@given(usage_st, price_st, st.decimals(min_value=0, max_value=5, places=2))
def test_a_reservation_no_cheaper_than_on_demand_reserves_nothing(usage, on_demand, extra):
    assert best_split(usage, on_demand, on_demand + extra).reserved_gpus == 0


def cell(hour: int, util: float | None, gpu_hours: float = 2.0, cost: str = "6.2") -> Cell:
    util_hours = 0.0 if util is None else gpu_hours
    busy = 0.0 if util is None else util * gpu_hours
    return Cell(hour, 1, gpu_hours, util_hours, busy, D(cost))


@pytest.mark.parametrize(
    ("first", "length", "label"),
    [
        pytest.param(121, 6, "Sat 01:00–07:00", id="a window within a day names its day once"),
        pytest.param(118, 10, "Fri 22:00–Sat 08:00", id="a window across midnight names both days"),
        pytest.param(22, 2, "Mon 22:00–24:00", id="a window up to midnight ends at 24:00"),
        pytest.param(
            166, 4, "Sun 22:00–Mon 02:00", id="a window across the week's end wraps to Monday"
        ),
        pytest.param(0, 168, "all week", id="a window of the whole week says so"),
    ],
)
def test_windows_read_as_ranges_of_the_week(first, length, label):
    assert window_label(first, length) == label


def test_adjacent_idle_hours_merge_and_rank_by_idle_cost():
    cells = [
        cell(121, 0.1),
        cell(122, 0.1),
        cell(123, 0.5),
        cell(124, 0.2, cost="20"),
        cell(167, 0.0),
        cell(0, 0.05),
        cell(50, None),
    ]
    windows = merge_windows(cells, 0.3)
    assert [w.label for w in windows] == [
        "Sat 04:00–05:00",
        "Sun 23:00–Mon 01:00",
        "Sat 01:00–03:00",
    ]
    assert windows[0].idle_cost == D("16.000000")
    assert windows[2].idle_gpu_hours == pytest.approx(3.6)


def test_filling_the_idle_windows_cuts_unit_cost_as_the_essay_says():
    # The essay: lifting utilisation from 35 % to 60 % cut unit cost by about 40 %.
    cells = [cell(h, 0.35) for h in range(168)]
    fill = fill_windows(cells, 0.4, 0.6)
    assert fill.utilisation_before == pytest.approx(0.35)
    assert fill.utilisation_after == pytest.approx(0.6)
    assert fill.unit_cost_cut == pytest.approx(1 - 0.35 / 0.6)


def test_a_fill_target_below_the_floor_is_refused():
    with pytest.raises(InvalidInput, match="at least the idle floor"):
        fill_windows([cell(0, 0.1)], 0.5, 0.4)


START = datetime(2026, 11, 23, tzinfo=UTC)
PRICED = CostModel(name="m", currency="USD", gpu_prices={"H100": GpuPrice(D("3.00"))})


def row(hour: int, instance: str = "a", seconds: float = 3600.0, util: float = 0.5) -> GpuHour:
    return GpuHour(
        START + timedelta(hours=hour),
        instance,
        "NVIDIA H100 80GB HBM3",
        seconds,
        seconds,
        util * seconds,
    )


def test_a_missing_reserved_price_is_assumed_at_the_default_discount_and_said():
    advice = advise([row(h) for h in range(24)], PRICED, START, START + timedelta(days=1))
    (pool,) = advice.pools
    assert pool.pool.reserved_assumed
    assert pool.pool.reserved_per_hour == D("3.00") * (1 - DEFAULT_RESERVED_DISCOUNT)
    assert advice.discount_assumed
    assert advice.reserved_gpus == 1
    assert advice.coverage == pytest.approx(1.0)


def test_the_cost_models_reserved_discount_wins_over_the_default():
    model = CostModel(
        name="m",
        currency="USD",
        gpu_prices={"H100": GpuPrice(D("3.00"))},
        reserved_discount=D("0.25"),
    )
    advice = advise([row(h) for h in range(24)], model, START, START + timedelta(days=1))
    assert advice.pools[0].pool.reserved_per_hour == D("2.250000")
    assert not advice.discount_assumed


def test_hours_before_the_first_data_are_not_counted_as_zero_demand():
    rows = [row(h) for h in range(20, 24)]
    advice = advise(rows, PRICED, START, START + timedelta(days=1))
    assert advice.hours == 4
    assert advice.start == START + timedelta(hours=20)
    assert advice.reserved_gpus == 1


def test_a_gap_after_the_first_data_counts_as_no_demand():
    rows = [row(0), *(row(h, seconds=7200.0) for h in range(1, 4))]
    advice = advise(rows, PRICED, START, START + timedelta(hours=24))
    assert advice.hours == 24
    # 2 GPUs in 3 hours of 24 are worth reserving only if that is at least 40 % of the hours.
    assert advice.reserved_gpus == 0


def test_hours_of_week_follow_the_time_zone():
    rows = [row(0, util=0.1)]
    advice = advise(
        rows, PRICED, START, START + timedelta(hours=1), tz=ZoneInfo("America/New_York")
    )
    assert advice.windows[0].label == "Sun 19:00–20:00"


def test_a_gpu_no_price_matches_is_named_and_left_out():
    rows = [GpuHour(START, "x", "Mystery GPU", 3600.0)]
    advice = advise(rows, PRICED, START, START + timedelta(hours=1))
    assert advice.unpriced == ("Mystery GPU",)
    assert advice.pools == ()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"floor": 1.5}, "floor", id="a floor above 1 is refused"),
        pytest.param({"target": -0.1}, "target", id="a negative target is refused"),
        pytest.param(
            {"floor": 0.7, "target": 0.6},
            "at least the idle floor",
            id="a target below the floor is refused",
        ),
        pytest.param({"top": 0}, "top", id="listing no windows is refused"),
    ],
)
def test_bad_advice_parameters_are_refused(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        advise([], PRICED, START, START + timedelta(hours=1), **kwargs)


def test_a_range_longer_than_a_quarter_is_refused():
    with pytest.raises(InvalidInput, match="at most 92 days"):
        advise([], PRICED, START, START + timedelta(days=100))


def test_a_reserved_discount_of_one_is_refused_by_the_cost_model():
    with pytest.raises(InvalidInput, match="reservedDiscount"):
        CostModel(name="m", currency="USD", reserved_discount=D("1"))
