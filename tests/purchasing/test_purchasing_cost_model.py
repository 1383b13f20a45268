"""The cost model's ``reservedDiscount``: read from a CostModel document, written back, kept by
the store, and refused out of bounds; the purchasing advice says when its reserved price was
assumed and uses the discount when given."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from infersight.core.errors import InvalidInput
from infersight.service.cost_spec import parse_model, to_document
from infersight.storage import cost as cost_store
from tests.conftest import Store


def _document(**spec: object) -> dict:
    return {
        "apiVersion": "infersight/v1",
        "kind": "CostModel",
        "metadata": {"name": "mine"},
        "spec": {"currency": "USD", "gpuPrices": {"H100": {"onDemandPerHour": "3.00"}}, **spec},
    }


def test_a_reserved_discount_is_read_written_back_and_kept(store: Store):
    model = parse_model(_document(reservedDiscount="0.35"))
    assert model.reserved_discount == Decimal("0.35")
    assert parse_model(to_document(model)) == model
    cost_store.put_model(store.engine, model, datetime(2026, 12, 1, tzinfo=UTC))
    assert cost_store.get_model(store.engine, "mine") == model


def test_a_cost_model_without_one_keeps_none(store: Store):
    model = parse_model(_document())
    assert model.reserved_discount is None
    assert "reservedDiscount" not in to_document(model)["spec"]
    cost_store.put_model(store.engine, model, datetime(2026, 12, 1, tzinfo=UTC))
    assert cost_store.get_model(store.engine, "mine").reserved_discount is None


@pytest.mark.parametrize("value", ["1", "1.5", "-0.1", "NaN", "lots"])
def test_a_reserved_discount_out_of_bounds_is_refused(value):
    with pytest.raises(InvalidInput, match="reservedDiscount"):
        parse_model(_document(reservedDiscount=value))
