"""``GET /api/v1/``, the URL the demo prints, answers an index of the API (issue 35, item 9):
every documented operation under ``/api/v1``, grouped by area with links, generated from the
app's routes (so it cannot drift from them), behind the same token as the rest."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from tests.api.conftest import READ_TOKEN, Api
from tests.peers import serving_app


def _operations(document: dict) -> set[str]:
    return {
        f"{method.upper()} {path}"
        for path, item in document["paths"].items()
        for method in item
        if path.startswith("/api/v1/")
    }


def test_the_index_lists_every_documented_operation_by_area(api: Api) -> None:
    response = api.get("/api/v1/")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["version"] == "v1"
    assert body["documentation"]["openapi"] == "/openapi.json"
    assert body["documentation"]["docs"] == "/docs"
    listed = {f"{e['method']} {e['path']}" for group in body["groups"] for e in group["endpoints"]}
    # Generated from the routes: exactly what the OpenAPI document has, nothing hand-written.
    assert listed == _operations(api.get("/openapi.json").json())
    groups = {g["name"]: g for g in body["groups"]}
    assert "GET /api/v1/capacity" in {
        f"{e['method']} {e['path']}" for e in groups["capacity"]["endpoints"]
    }
    for group in body["groups"]:
        assert group["endpoints"], group["name"]
        for endpoint in group["endpoints"]:
            assert endpoint["summary"], endpoint
            assert endpoint["href"].endswith(endpoint["path"])


def test_the_index_links_are_served(api: Api) -> None:
    """Every listed GET without path parameters is routed (no 404 or 405 for its path)."""
    body = api.get("/api/v1/").json()
    followed = 0
    for group in body["groups"]:
        for endpoint in group["endpoints"]:
            if endpoint["method"] != "GET" or "{" in endpoint["path"]:
                continue
            answer = api.get(endpoint["path"])
            assert answer.status_code not in (404, 405), (endpoint, answer.text)
            followed += 1
    assert followed >= 10


def test_the_index_needs_a_read_token_like_the_rest(make_api: Callable[..., Api]) -> None:
    secured = make_api(api_tokens=f"read:{READ_TOKEN}", listen="0.0.0.0:8080")
    assert secured.get("/api/v1/").status_code == 401
    assert (
        secured.get(
            "/api/v1/", headers={"Authorization": "Bearer nope-0123456789abcdef"}
        ).status_code
        == 401
    )
    ok = secured.get("/api/v1/", headers={"Authorization": f"Bearer {READ_TOKEN}"})
    assert ok.status_code == 200
    assert ok.json()["groups"]


def test_the_index_refuses_an_unknown_query_parameter(api: Api) -> None:
    response = api.get("/api/v1/", params={"verbose": "1"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_input"


@pytest.mark.e2e
def test_the_url_the_demo_prints_answers_over_http(make_api: Callable[..., Api]) -> None:
    with serving_app(make_api().app) as url:
        for path in ("/api/v1/", "/api/v1"):
            response = httpx.get(f"{url}{path}", follow_redirects=True)
            assert response.status_code == 200, (path, response.text)
            assert response.headers["content-type"].startswith("application/json")
            hrefs = [e["href"] for g in response.json()["groups"] for e in g["endpoints"]]
            assert f"{url}/api/v1/capacity" in hrefs


def test_a_documented_api_route_that_accepts_unknown_parameters_is_refused(
    store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app factory's check that every documented ``/api/v1`` route refuses unknown query
    parameters sees the routes of included routers (it saw none under FastAPI's included
    router entries, and passed whatever they held)."""
    from fastapi import APIRouter

    from infersight.api import app as app_module
    from infersight.api.settings import ApiSettings

    loose = APIRouter(prefix="/api/v1")

    @loose.get("/loose")
    def _loose() -> dict[str, str]:
        return {}

    monkeypatch.setattr(app_module, "ROUTERS", (*app_module.ROUTERS, loose))
    with pytest.raises(TypeError, match="/api/v1/loose is not a KnownQueryRoute"):
        app_module.create_app(ApiSettings(run_jobs=False), store.engine)
