"""The one error shape: every ``InfersightError`` maps to its code and status in one handler."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import infersight.core.errors as errors_module
from infersight.core.errors import InfersightError


def _all_errors() -> list[type[InfersightError]]:
    found, todo = [], [InfersightError]
    while todo:
        kind = todo.pop()
        found.append(kind)
        todo.extend(kind.__subclasses__())
    return [k for k in found if k.__module__ == errors_module.__name__]


@pytest.mark.parametrize("kind", _all_errors(), ids=lambda k: k.__name__)
def test_every_error_kind_gets_its_status_and_the_shared_shape(api, kind):
    def boom() -> None:
        raise kind("it went wrong", details={"why": kind.__name__})

    api.app.add_api_route("/boom", boom)
    response = api.get("/boom")
    assert response.status_code == kind.http_status
    assert response.json() == {
        "error": {"code": kind.code, "message": "it went wrong", "details": {"why": kind.__name__}}
    }


def test_an_unexpected_exception_is_an_internal_error_without_its_details(api):
    def boom() -> None:
        raise RuntimeError("secret connection string")

    api.app.add_api_route("/boom", boom)

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=api.app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            return await client.get("/boom")

    response = asyncio.run(call())
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal", "message": "internal server error", "details": {}}
    }
    assert "secret" not in response.text


def test_a_wrong_method_keeps_its_status_in_the_shared_shape(api):
    response = api.delete("/api/v1/latency")
    assert response.status_code == 405
    assert response.json()["error"]["code"] == "method_not_allowed"
