"""Fixtures of the API tests: the app over a real store, called through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from tests.conftest import Store
from tests.doubles import FakeClock

READ_TOKEN = "read-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789"


@dataclass
class Api:
    """A sync face over ``httpx.AsyncClient(transport=ASGITransport(app))``."""

    app: FastAPI
    clock: FakeClock
    headers: dict[str, str] = field(default_factory=dict)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost"
            ) as client:
                headers = {**self.headers, **kwargs.pop("headers", {})}
                return await client.request(method, url, headers=headers, **kwargs)

        return asyncio.run(call())

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)


@pytest.fixture
def make_api(store: Store) -> Callable[..., Api]:
    def make(**settings: Any) -> Api:
        clock = FakeClock()
        values = {"run_jobs": False, **settings}
        app = create_app(ApiSettings(**values), store.engine, clock)
        return Api(app, clock)

    return make


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api()
