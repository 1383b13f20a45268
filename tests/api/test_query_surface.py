"""What the query endpoints accept (#16): the dashboard's ``range=``, unknown parameters refused
with the allowed ones listed, Unix seconds as JSON numbers in ``POST /api/v1/diagnose``, and one
name for incidents (``/api/v1/incidents``; the old ``/api/v1/alerts`` paths redirect)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.conftest import Api
from tests.doubles import NOW

#: Every endpoint that takes a window; its path and the parameters it needs besides.
WINDOWED = [
    "/api/v1/latency",
    "/api/v1/throughput",
    "/api/v1/breakdown",
    "/api/v1/cost",
]
_SAMPLE_PATH = {
    "incident_id": "1",
    "report_id": "1",
    "profile_id": "1",
    "bill_id": "1",
    "name": "main",
}


def _iso(ts) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def _get_operations(api: Api) -> list[tuple[str, list[str]]]:
    """Every GET operation under /api/v1 in the OpenAPI document: its path, filled in, and
    its query parameters."""
    document = api.get("/openapi.json").json()
    found = []
    for path, item in document["paths"].items():
        if path.startswith("/api/v1/") and "get" in item:
            query = sorted(
                p["name"] for p in item["get"].get("parameters", []) if p["in"] == "query"
            )
            filled = path
            for name, value in _SAMPLE_PATH.items():
                filled = filled.replace(f"{{{name}}}", value)
            found.append((filled, query))
    return found


def test_every_get_endpoint_refuses_an_unknown_parameter_and_lists_the_allowed_ones(api: Api):
    operations = _get_operations(api)
    assert len(operations) >= 15
    for path, declared in operations:
        response = api.get(path, params={"colour": "blue", "zzz": "1"})
        assert response.status_code == 400, path
        error = response.json()["error"]
        assert error["code"] == "invalid_input", path
        assert error["details"]["unknown"] == ["colour", "zzz"], path
        assert error["details"]["allowed"] == declared, path
        assert "colour" in error["message"], path


def test_a_misspelt_parameter_is_named_not_ignored(api: Api):
    response = api.get("/api/v1/latency", params={"metrc": "tpot"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["details"]["unknown"] == ["metrc"]
    assert "metric" in error["details"]["allowed"]


@pytest.mark.parametrize("path", WINDOWED)
@pytest.mark.parametrize(
    ("given", "span"), [("15m", timedelta(minutes=15)), ("7d", timedelta(days=7))]
)
def test_range_sets_the_window_on_every_windowed_endpoint(api: Api, path, given, span):
    response = api.get(path, params={"range": given})
    assert response.status_code == 200, response.text
    body = response.json()
    window = (
        (body["start"], body["end"])
        if "start" in body
        else (body["window"]["start"], body["window"]["end"])
    )
    assert window == (_iso(NOW - span), _iso(NOW))


def test_range_is_a_window_to_the_baseline_comparison(api: Api):
    response = api.get("/api/v1/baselines/main/compare", params={"range": "15m", "against": "b"})
    assert response.status_code == 400  # against= takes no window, and range is one
    assert "against" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "params",
    [
        {"range": "15m", "start": "2026-01-01T00:00:00Z"},
        {"range": "15m", "end": "2026-01-01T00:00:00Z"},
        {"range": "15m", "start": "0", "end": "60"},
    ],
)
def test_range_with_start_or_end_is_ambiguous(api: Api, params):
    response = api.get("/api/v1/latency", params=params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert "ambiguous" in error["message"]


@pytest.mark.parametrize("bad", ["15", "m", "0m", "1y", "15 m", "9999999d"])
def test_a_malformed_or_too_long_range_is_refused(api: Api, bad):
    response = api.get("/api/v1/latency", params={"range": bad})
    assert response.status_code == 400
    assert "range" in response.json()["error"]["message"]


def test_diagnose_takes_unix_seconds_as_json_numbers_or_strings(api: Api):
    start, end = NOW - timedelta(minutes=10), NOW
    as_numbers = api.request(
        "POST", "/api/v1/diagnose", json={"start": start.timestamp(), "end": int(end.timestamp())}
    )
    assert as_numbers.status_code == 200, as_numbers.text
    as_strings = api.request(
        "POST", "/api/v1/diagnose", json={"start": _iso(start), "end": str(end.timestamp())}
    )
    assert as_strings.status_code == 200, as_strings.text
    assert (
        as_numbers.json()["window"]
        == as_strings.json()["window"]
        == {
            "start": _iso(start),
            "end": _iso(end),
        }
    )


def test_incidents_live_at_api_v1_incidents(api: Api):
    response = api.get("/api/v1/incidents", params={"state": "all"})
    assert response.status_code == 200
    assert response.json() == {"incidents": []}
    assert api.get("/api/v1/incidents/1").json()["error"]["code"] == "not_found"
    document = api.get("/openapi.json").json()
    assert "/api/v1/incidents" in document["paths"]
    assert not [p for p in document["paths"] if p.startswith("/api/v1/alerts")]


@pytest.mark.parametrize(
    ("method", "old", "new"),
    [
        ("GET", "/api/v1/alerts?state=all&limit=5", "/api/v1/incidents?state=all&limit=5"),
        ("GET", "/api/v1/alerts", "/api/v1/incidents"),
        ("GET", "/api/v1/alerts/7", "/api/v1/incidents/7"),
        ("POST", "/api/v1/alerts/7/acknowledge", "/api/v1/incidents/7/acknowledge"),
    ],
)
def test_the_old_alerts_paths_redirect_permanently_to_incidents(api: Api, method, old, new):
    response = api.request(method, old)
    assert response.status_code == 308
    assert response.headers["location"] == new
    assert response.headers["deprecation"].startswith("@")  # RFC 9745: the date it was
    assert response.headers["link"] == f'<{new.split("?")[0]}>; rel="successor-version"'
