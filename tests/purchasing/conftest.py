"""The fleet week (``tests.purchasing.scenario``) written once per module and store."""

from __future__ import annotations

import pytest

from infersight.storage import cost
from tests.conftest import BOTH_STORES, Store, empty_store
from tests.purchasing.scenario import MODEL, WEEK, write_fleet_week


@pytest.fixture(scope="module", params=BOTH_STORES)
def fleet(request: pytest.FixtureRequest) -> Store:
    store = empty_store(request)
    write_fleet_week(store.engine)
    cost.put_model(store.engine, MODEL, WEEK.end)
    return store
