"""Fixtures of the cost tests: a worked or simulated week written once per module and store
(the tests only read it, or add reports and cost models that do not change its numbers), and
the API over such a store."""

from __future__ import annotations

import pytest

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.storage import cost
from tests.api.conftest import Api
from tests.conftest import BOTH_STORES, Store, empty_store
from tests.cost.scenario import MODEL, WEEK, write_simulated_week, write_worked_week
from tests.doubles import FakeClock


def api_for(store: Store, **settings: object) -> Api:
    clock = FakeClock()
    app = create_app(ApiSettings(**{"run_jobs": False, **settings}), store.engine, clock)
    return Api(app, clock)


@pytest.fixture(scope="module", params=BOTH_STORES)
def worked(request: pytest.FixtureRequest) -> Store:
    """The worked H200 week (``tests.cost.scenario``) with its cost model stored."""
    store = empty_store(request)
    write_worked_week(store.engine)
    cost.put_model(store.engine, MODEL, WEEK.end)
    return store


@pytest.fixture(scope="module", params=BOTH_STORES)
def week(request: pytest.FixtureRequest) -> Store:
    """The simulated week (worked week plus a second model) with the cost model stored."""
    store = empty_store(request)
    write_simulated_week(store.engine)
    cost.put_model(store.engine, MODEL, WEEK.end)
    return store
