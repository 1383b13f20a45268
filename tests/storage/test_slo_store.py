"""SLO definitions, SLI event counts and incidents in a real store (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infersight.core.burn import AlertState, IncidentState, Severity, Transition
from infersight.core.errors import NotFound
from infersight.core.query import Selector
from infersight.core.slo import Sli, SliKind, SloSpec, count_events
from infersight.core.window import Window
from infersight.storage import incidents, slo_store
from infersight.storage.tables import metadata
from infersight.storage.writer import open_writer
from tests.factories import make_records

NOW = datetime(2026, 11, 20, 12, 0, 17, tzinfo=UTC)
TTFT = Sli(SliKind.LATENCY, "ttft", 0.1)
AVAILABILITY = Sli(SliKind.AVAILABILITY)


def spec(name: str = "chat-ttft", **kwargs) -> SloSpec:
    values = {"sli": TTFT, "objective": 0.99, "window": timedelta(days=28)}
    return SloSpec(name, **{**values, **kwargs})


def _clear(engine) -> None:
    with engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            connection.execute(table.delete())


def test_slo_definitions_round_trip_and_replace(store):
    first = spec(selector=Selector(model="llama-8b", tenant="acme"), description="chat")
    assert slo_store.put_slo(store.engine, first, NOW) is True
    assert slo_store.get_slo(store.engine, "chat-ttft") == first
    second = spec(objective=0.995)
    assert slo_store.put_slo(store.engine, second, NOW + timedelta(minutes=1)) is False
    slo_store.put_slo(store.engine, spec("avail", sli=AVAILABILITY), NOW)
    assert slo_store.list_slos(store.engine) == [spec("avail", sli=AVAILABILITY), second]
    slo_store.delete_slo(store.engine, "avail")
    with pytest.raises(NotFound):
        slo_store.get_slo(store.engine, "avail")
    with pytest.raises(NotFound):
        slo_store.delete_slo(store.engine, "avail")


def test_event_counts_from_rollups_equal_the_exact_counts_of_the_records(store):
    records = make_records(
        np.random.default_rng(7), NOW - timedelta(hours=5), 3000, span=timedelta(hours=5),
        error_rate=0.05,
    )  # fmt: skip
    open_writer(store.engine).write_requests(records)
    window = Window(NOW - timedelta(hours=4, seconds=13), NOW)
    selector = Selector(model="llama-70b")
    picked = [r for r in records if r.start in window and r.model == "llama-70b"]
    expected_availability = count_events(picked, AVAILABILITY)
    expected_latency = count_events(picked, TTFT)
    with store.engine.connect() as connection:
        availability = slo_store.count_events(connection, AVAILABILITY, window, selector)
        exact = slo_store.count_events(connection, TTFT, window, selector, exact=True)
        sketched = slo_store.count_events(connection, TTFT, window, selector)
    assert availability == expected_availability
    assert exact == expected_latency
    assert sketched.total == expected_latency.total
    # Only requests within 2 % of the threshold can be miscounted by the sketch.
    near = sum(1 for r in picked if abs(r.ttft_s - TTFT.threshold_s) <= 0.02 * TTFT.threshold_s)
    assert abs(sketched.bad - expected_latency.bad) <= near


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**32 - 1),
    threshold=st.floats(0.01, 1.0),
    error_rate=st.floats(0.0, 0.5),
    minutes=st.integers(1, 240),
)
def test_the_sli_equals_an_exact_count_on_the_raw_records(
    store, seed, threshold, error_rate, minutes
):
    _clear(store.engine)
    records = make_records(
        np.random.default_rng(seed), NOW - timedelta(hours=4), 200, span=timedelta(hours=4),
        error_rate=error_rate,
    )  # fmt: skip
    open_writer(store.engine).write_requests(records)
    window = Window.last(timedelta(minutes=minutes), NOW)
    picked = [r for r in records if r.start in window]
    sli = Sli(SliKind.LATENCY, "ttft", threshold)
    with store.engine.connect() as connection:
        assert slo_store.count_events(connection, sli, window, exact=True) == count_events(
            picked, sli
        )
        assert slo_store.count_events(connection, AVAILABILITY, window) == count_events(
            picked, AVAILABILITY
        )


def test_one_cycle_counter_shared_by_many_slos_equals_counting_each_window_alone(store):
    records = make_records(
        np.random.default_rng(3), NOW - timedelta(days=2), 3000, span=timedelta(days=2),
        error_rate=0.05,
    )  # fmt: skip
    open_writer(store.engine).write_requests(records)
    lengths = (timedelta(minutes=5), timedelta(hours=1), timedelta(days=1), timedelta(days=28))
    specs = [
        spec("a", sli=AVAILABILITY),
        spec("b", sli=AVAILABILITY, selector=Selector(model="llama-8b", instance="gpu-1")),
        spec("c", selector=Selector(tenant="acme")),
        spec("d", sli=Sli(SliKind.LATENCY, "tpot", 0.012)),
    ]
    with store.engine.connect() as connection:
        counter = slo_store.CycleCounter(connection, NOW)
        for one in specs:
            got = counter.count(one, lengths)
            for length in lengths:
                window = Window.last(length, NOW)
                alone = slo_store.count_events(connection, one.sli, window, one.selector)
                assert got[length] == alone, (one.name, length)
                if one.sli.kind is SliKind.AVAILABILITY:
                    picked = [
                        r for r in records if r.start in window and one.selector.matches(
                            {"model": r.model, "instance": r.instance, "tenant": r.tenant,
                             "priority": r.priority})
                    ]  # fmt: skip
                    assert got[length] == count_events(picked, AVAILABILITY)
        assert slo_store.count_windows(connection, specs[0], lengths, NOW) == counter.count(
            specs[0], lengths
        )


def test_an_alert_is_one_incident_from_opening_to_resolution(store):
    steps = [
        (AlertState(Severity.PAGE, NOW), Transition.OPENED, {"5m": 200.0, "1h": 16.0}),
        (AlertState(Severity.PAGE, NOW), Transition.NONE, {"5m": 300.0, "1h": 20.0}),
        (AlertState(Severity.TICKET, NOW), Transition.DEESCALATED, {"5m": 0.0, "1h": 18.0}),
        (AlertState(), Transition.RESOLVED, {"5m": 0.0, "1h": 1.0}),
    ]
    seen = []
    with store.engine.begin() as connection:
        for i, (state, change, rates) in enumerate(steps):
            at = NOW + timedelta(seconds=30 * i)
            seen.append(incidents.apply_step(connection, "a", "*", state, change, rates, at))
        # Another scope of the same SLO is its own incident.
        incidents.apply_step(
            connection, "a", "model=x", AlertState(Severity.TICKET, NOW), Transition.OPENED,
            {"5m": 4.0}, NOW,
        )  # fmt: skip
    assert len({i.id for i in seen}) == 1
    assert [i.severity for i in seen if i is not None] == [
        Severity.PAGE, Severity.PAGE, Severity.TICKET, Severity.TICKET,
    ]  # fmt: skip
    last = seen[-1]
    assert last.state is IncidentState.RESOLVED
    assert last.resolved_at == NOW + timedelta(seconds=90)
    assert last.opened_at == NOW
    assert last.peak_burn_rate == pytest.approx(300.0)
    assert last.burn_rates == {"5m": 0.0, "1h": 1.0}
    firing = incidents.list_incidents(store.engine, "firing")
    assert [(i.scope, i.severity) for i in firing] == [("model=x", Severity.TICKET)]
    assert len(incidents.list_incidents(store.engine, "all")) == 2
    with store.engine.begin() as connection:
        [resolved] = incidents.resolve_all(connection, "a", NOW)
        assert (resolved.scope, resolved.state) == ("model=x", IncidentState.RESOLVED)
    assert incidents.list_incidents(store.engine, "firing") == []
