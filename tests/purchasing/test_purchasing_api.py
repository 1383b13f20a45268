"""``GET /api/v1/purchasing`` over the fleet week: the hand-computed split and windows, the
range conventions of the other query routes, and clear 400s for every bad parameter."""

from __future__ import annotations

from datetime import timedelta

import pytest

from infersight.core.timestamps import iso
from tests.conftest import Store
from tests.cost.conftest import api_for
from tests.purchasing import scenario as s

WEEK_QUERY = {"start": iso(s.WEEK.start), "end": iso(s.WEEK.end)}


def _api(store: Store):
    api = api_for(store, cost_model=s.MODEL.name)
    api.clock.now = s.WEEK.end + timedelta(hours=6)
    return api


def test_the_endpoint_answers_the_split_and_the_windows(fleet: Store):
    response = _api(fleet).get("/api/v1/purchasing", params={**WEEK_QUERY, "top": 7})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["currency"] == "USD"
    assert body["cost_model"] == {"name": "fleet", "example_prices": False}
    split = body["split"]
    assert split["reserved_gpus"] == s.RESERVED_GPUS
    assert split["split_cost"] == str(s.SPLIT_COST)
    assert split["on_demand_cost"] == str(s.ON_DEMAND_COST)
    assert split["saving"] == str(s.SAVING)
    assert split["coverage"] == pytest.approx(s.COVERAGE)
    assert split["pools"][0]["quantile"] == pytest.approx(0.3)
    windows = body["idle"]["windows"]
    assert len(windows) == 7
    assert {w["idle_cost"] for w in windows} == {str(s.WINDOW_IDLE_COST)}
    assert body["fill"]["unit_cost_cut"] == pytest.approx(1 - s.FILL_FACTOR, abs=1e-6)
    assert body["empty"] is None


def test_the_default_range_is_the_four_weeks_that_end_now(fleet: Store):
    body = _api(fleet).get("/api/v1/purchasing").json()
    assert body["end"] == iso(s.WEEK.end + timedelta(hours=6))
    assert body["start"] == iso(s.WEEK.start)
    assert body["split"]["reserved_gpus"] == s.RESERVED_GPUS


def test_a_range_with_no_gpu_data_names_the_next_command(fleet: Store):
    api = _api(fleet)
    api.clock.now = s.WEEK.end + timedelta(days=60)
    body = api.get("/api/v1/purchasing", params={"range": "7d"}).json()
    assert "infersight sidecar" in body["empty"]["next_command"]


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        pytest.param({"bogus": "1"}, "unknown query parameter bogus", id="an unknown parameter"),
        pytest.param(
            {"range": "7d", "start": iso(s.WEEK.start)}, "not both", id="range with start"
        ),
        pytest.param({"range": "100d"}, "at most 92 days", id="a range over a quarter"),
        pytest.param({"floor": "1.5"}, "floor", id="a floor above 1"),
        pytest.param(
            {"floor": "0.7", "target": "0.5"},
            "at least the idle floor",
            id="a target under the floor",
        ),
        pytest.param({"top": "0"}, "top", id="no windows"),
        pytest.param({"tz": "Mars/Olympus"}, "unknown time zone", id="an unknown time zone"),
    ],
)
def test_bad_parameters_are_answered_400_with_the_reason(fleet: Store, params, fragment):
    response = _api(fleet).get("/api/v1/purchasing", params=params)
    assert response.status_code == 400
    assert fragment in response.text
