"""A time the API cannot compute a window with is a 400, not a 500 (#32): RFC 3339 times lie in
1970 to 2199, as Unix seconds do (a window near year 1 or 9999 overflowed when it was shifted
to a time zone or walked hour by hour), on both stores; the edges of that range answer."""

from __future__ import annotations

import pytest

from tests.api.conftest import Api

_FAR = [
    ("/api/v1/breakdown", "0001-01-01T00:00:00Z", "0001-01-02T00:00:00Z"),
    ("/api/v1/latency/gap", "0001-01-01T00:00:00Z", "0001-01-02T00:00:00Z"),
    ("/api/v1/purchasing", "9999-12-30T00:00:00Z", "9999-12-31T23:00:00Z"),
    ("/api/v1/latency", "1969-12-31T00:00:00Z", "1970-01-01T12:00:00Z"),
    ("/api/v1/cost", "2200-01-01T00:00:00Z", "2200-01-02T00:00:00Z"),
]
_EDGES = [
    ("1970-01-01T00:00:00+14:00", "1970-01-02T00:00:00+14:00"),
    ("2199-12-30T00:00:00-14:00", "2199-12-31T23:59:59-14:00"),
]
_WINDOWED = ["/api/v1/breakdown", "/api/v1/latency/gap", "/api/v1/purchasing", "/api/v1/cost"]


@pytest.mark.parametrize(("path", "start", "end"), _FAR)
def test_a_time_outside_1970_to_2199_is_refused(api: Api, path: str, start: str, end: str):
    response = api.get(path, params={"start": start, "end": end})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert "1970 to 2199" in str(error)


def test_a_far_time_on_a_dashboard_page_gets_the_error_page(api: Api):
    response = api.get(
        "/ui/latency", params={"start": "0001-01-01T00:00:00Z", "end": "0001-01-02T00:00:00Z"}
    )
    assert response.status_code == 400
    assert "1970 to 2199" in response.text


@pytest.mark.parametrize(("start", "end"), _EDGES)
def test_the_edges_of_the_range_answer_in_any_time_zone(api: Api, start: str, end: str):
    for path in _WINDOWED:
        assert api.get(path, params={"start": start, "end": end}).status_code == 200, path
    for tz in ("Pacific/Kiritimati", "Etc/GMT+12"):
        params = {"start": start, "end": end, "tz": tz}
        assert api.get("/api/v1/purchasing", params=params).status_code == 200, tz
