"""The purchasing advice over a real store (SQLite and PostgreSQL): the hour rollups read in
SQL give the hand-computed split and idle windows of the fleet week."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from infersight.core.window import Window
from infersight.service.purchasing import NEXT_COMMAND, purchasing, purchasing_dict
from infersight.storage import cost as cost_store
from infersight.storage.purchasing import hourly_gpu_usage
from infersight.storage.sql_store import SqlStore
from tests.conftest import Store
from tests.purchasing import scenario as s


def test_the_store_answers_one_row_per_hour_and_instance(fleet: Store):
    rows = hourly_gpu_usage(fleet.engine, s.WEEK.start, s.WEEK.end)
    assert len(rows) == 2 * 168 + 60
    assert {r.gpu_seconds for r in rows} == {3600.0}
    assert all(r.at.tzinfo is not None for r in rows)


def test_the_split_of_the_fleet_week_is_the_hand_computed_one(fleet: Store):
    answer = purchasing(SqlStore(fleet.engine), s.MODEL, s.WEEK)
    a = answer.advice
    assert a.hours == 168
    assert a.reserved_gpus == s.RESERVED_GPUS
    assert a.split_cost == s.SPLIT_COST
    assert a.on_demand_cost == s.ON_DEMAND_COST
    assert a.saving == s.SAVING
    assert a.coverage == pytest.approx(s.COVERAGE)
    assert not a.reserved_assumed


def test_the_idle_windows_of_the_fleet_week_are_the_nights(fleet: Store):
    a = purchasing(SqlStore(fleet.engine), s.MODEL, s.WEEK, top=7).advice
    assert sorted(w.label for w in a.windows) == sorted(
        f"{day} 01:00–07:00" for day in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    )
    for w in a.windows:
        assert w.idle_cost == s.WINDOW_IDLE_COST
        assert w.idle_gpu_hours == pytest.approx(10.8)
        assert w.utilisation == pytest.approx(0.1)
    assert len(a.cells) == 168


def test_filling_the_windows_scales_the_unit_cost_of_the_same_range(fleet: Store):
    answer = purchasing(SqlStore(fleet.engine), s.MODEL, s.WEEK)
    before = cost_store.cost(fleet.engine, s.WEEK, s.MODEL).total.cost_per_million_tokens
    assert before is not None
    assert answer.per_million_before == before.amount
    assert answer.advice.fill.unit_cost_factor == pytest.approx(s.FILL_FACTOR)
    assert float(answer.per_million_after) == pytest.approx(
        float(before.amount) * s.FILL_FACTOR, rel=1e-6
    )


def test_without_a_reserved_price_the_answer_says_what_it_assumed(fleet: Store):
    body = purchasing_dict(purchasing(SqlStore(fleet.engine), s.NO_RESERVED, s.WEEK))
    assert body["currency"] == "EUR"
    assert body["reserved_discount_assumed"] is True
    pool = body["split"]["pools"][0]
    assert pool["reserved_per_gpu_hour"] == "2.400000"
    assert pool["reserved_price_assumed"] is True
    assert any("60% of on-demand" in text for text in body["assumptions"])


def test_a_range_with_no_gpu_data_names_the_next_command(fleet: Store):
    later = Window(s.WEEK.end + timedelta(days=30), s.WEEK.end + timedelta(days=31))
    body = purchasing_dict(purchasing(SqlStore(fleet.engine), s.MODEL, later))
    assert body["empty"]["next_command"] == NEXT_COMMAND
    assert body["split"]["pools"] == []
    assert body["idle"]["windows"] == []


def test_a_range_whose_only_gpu_data_is_the_hour_in_progress_says_when_advice_comes(
    fleet: Store,
):
    """A sidecar that started this hour (the demo's first hour): no whole hour yet, and no
    request to start the sidecar that is already running."""
    first = s.WEEK.start  # the fleet's first hour of data, as if it were in progress now
    body = purchasing_dict(
        purchasing(
            SqlStore(fleet.engine),
            s.MODEL,
            Window(first - timedelta(days=1), first + timedelta(minutes=40)),
        )
    )
    assert body["empty"]["next_command"] is None
    assert f"({first:%H:%M} UTC)" in body["empty"]["text"]
    assert f"complete at {first + timedelta(hours=1):%H:%M} UTC" in body["empty"]["text"]
    aligned = Window(first - timedelta(days=1), first)  # ends on the hour: nothing in progress
    assert (
        purchasing_dict(purchasing(SqlStore(fleet.engine), s.MODEL, aligned))["empty"][
            "next_command"
        ]
        == NEXT_COMMAND
    )


def test_a_partial_range_reads_its_whole_hours_only(fleet: Store):
    window = Window(
        s.WEEK.start + timedelta(minutes=30), s.WEEK.start + timedelta(hours=10, minutes=5)
    )
    a = purchasing(SqlStore(fleet.engine), s.MODEL, window).advice
    assert a.start == s.WEEK.start + timedelta(hours=1)
    assert a.end == s.WEEK.start + timedelta(hours=10)
    assert a.hours == 9
    assert sum(p.split.gpu_hours for p in a.pools) == Decimal(2 * 9 + 2)
