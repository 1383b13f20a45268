"""Fixtures of the cost tests: the API over a real store, with a stored cost model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from api import create_app
from api.settings import ApiSettings
from tests.api.conftest import Api, FakeClock
from tests.conftest import Store


@pytest.fixture
def make_api(store: Store) -> Callable[..., Api]:
    def make(**settings: Any) -> Api:
        clock = FakeClock()
        app = create_app(ApiSettings(**{"run_jobs": False, **settings}), store.engine, clock)
        return Api(app, clock)

    return make
