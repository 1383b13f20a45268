"""SLO specs, SLIs, error budgets and burn rates: table tests and properties."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.slo import (
    EventCounts,
    Sli,
    SliKind,
    SloSpec,
    budget_remaining,
    burn_rate,
    count_events,
    scope_of,
    sli_value,
)
from tests.factories import make_records

AVAILABILITY = Sli(SliKind.AVAILABILITY)
TTFT_2S = Sli(SliKind.LATENCY, "ttft", 2.0)

objectives = st.floats(min_value=0.5, max_value=0.99999, allow_nan=False)


@st.composite
def counts(draw: st.DrawFn) -> EventCounts:
    total = draw(st.integers(0, 10**9))
    return EventCounts(total, draw(st.integers(0, total)))


@given(counts(), objectives)
def test_the_budget_remaining_is_always_between_0_and_1(events, objective):
    assert 0.0 <= budget_remaining(events, objective) <= 1.0


@given(st.integers(1, 10**9), st.data(), objectives)
def test_the_burn_rate_grows_with_the_number_of_errors(total, data, objective):
    fewer = data.draw(st.integers(0, total))
    more = data.draw(st.integers(fewer, total))
    assert burn_rate(EventCounts(total, fewer), objective) <= burn_rate(
        EventCounts(total, more), objective
    )


@given(counts(), objectives)
def test_burn_rate_and_budget_agree(events, objective):
    rate = burn_rate(events, objective)
    assert rate >= 0.0
    if rate <= 1.0:
        assert budget_remaining(events, objective) == pytest.approx(1.0 - rate)
    else:
        assert budget_remaining(events, objective) == 0.0


@given(st.integers(0, 2**32 - 1), st.floats(0.01, 1.0), st.floats(0.0, 0.5))
def test_the_sli_equals_an_exact_count_over_the_records(seed, threshold, error_rate):
    rng = np.random.default_rng(seed)
    records = make_records(
        rng, datetime(2026, 11, 1, tzinfo=UTC), 60, span=timedelta(hours=1), error_rate=error_rate
    )
    ok = sum(1 for r in records if not r.is_error)
    fast = sum(1 for r in records if r.ttft_s is not None and r.ttft_s <= threshold)
    availability = count_events(records, AVAILABILITY)
    latency = count_events(records, Sli(SliKind.LATENCY, "ttft", threshold))
    assert (availability.total, availability.good) == (60, ok)
    assert (latency.total, latency.good) == (60, fast)
    assert sli_value(availability) == pytest.approx(ok / 60)


@pytest.mark.parametrize(
    ("events", "objective", "sli", "burn", "budget"),
    [
        (EventCounts(1000, 0), 0.999, 1.0, 0.0, 1.0),
        (EventCounts(1000, 1), 0.999, 0.999, 1.0, 0.0),
        (EventCounts(10_000, 5), 0.999, 0.9995, 0.5, 0.5),
        (EventCounts(100, 100), 0.99, 0.0, 100.0, 0.0),
        (EventCounts(0, 0), 0.999, None, 0.0, 1.0),
    ],
)
def test_sli_burn_rate_and_budget_for_known_counts(events, objective, sli, burn, budget):
    assert sli_value(events) == (pytest.approx(sli) if sli is not None else None)
    assert burn_rate(events, objective) == pytest.approx(burn)
    assert budget_remaining(events, objective) == pytest.approx(budget)


def test_requests_without_the_metric_do_not_count_for_a_latency_sli():
    records = make_records(
        np.random.default_rng(1), datetime(2026, 11, 1, tzinfo=UTC), 10, span=timedelta(hours=1)
    )
    mixed = [replace(r, ttft_s=None) if i % 2 else r for i, r in enumerate(records)]
    assert count_events(mixed, TTFT_2S).total == 5


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "Bad Name"}, "SLO name"),
        ({"objective": 1.0}, "objective"),
        ({"objective": 0.0}, "objective"),
        ({"window": timedelta(minutes=5)}, "window"),
        ({"window": timedelta(days=365)}, "window"),
    ],
)
def test_an_invalid_slo_is_rejected_with_a_reason(kwargs, message):
    spec = {"name": "chat-ttft", "sli": TTFT_2S, "objective": 0.99, "window": timedelta(days=28)}
    with pytest.raises(InvalidInput, match=message):
        SloSpec(**{**spec, **kwargs})


@pytest.mark.parametrize(
    ("sli", "message"),
    [
        ({"kind": "availability", "metric": "ttft"}, "no metric"),
        ({"kind": "latency", "metric": "speed", "threshold_s": 1.0}, "metric"),
        ({"kind": "latency", "metric": "ttft", "threshold_s": -1.0}, "threshold"),
        ({"kind": "latency", "metric": "ttft"}, "threshold"),
        ({"kind": "throughput"}, "unknown SLI kind"),
    ],
)
def test_an_invalid_sli_is_rejected_with_a_reason(sli, message):
    with pytest.raises(InvalidInput, match=message):
        Sli(**sli)


def test_the_scope_names_the_pinned_labels_in_a_stable_order():
    assert scope_of(Selector()) == "*"
    assert scope_of(Selector(tenant="acme", model="m")) == "model=m,tenant=acme"
    spec = SloSpec("a", AVAILABILITY, 0.999, timedelta(days=30), Selector(model="m"))
    assert spec.scope == "model=m"
    assert spec.error_budget == pytest.approx(0.001)
