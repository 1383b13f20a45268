"""How an incident is diagnosed (``service.diagnosis``) on a real store: the burn's onset found
in the stored requests places the incident and reference windows, and the listener pages from
an incident's own onset and tells an escalation with the diagnosis of the burn that came
back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from infersight.core.burn import AlertState, Incident, IncidentState, Severity, Transition
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.core.window import Window
from infersight.service.diagnosis import DiagnosisListener, burn_onset, windows_for
from infersight.storage import incidents, signals, slo_store
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _incident(opened: datetime) -> Incident:
    return Incident(1, "ttft", "*", Severity.PAGE, IncidentState.FIRING, opened, opened)


def test_a_burn_onset_found_to_the_minute_places_the_windows(store: Store) -> None:
    rng = np.random.default_rng(8)
    healthy = make_records(rng, T0, 1200, span=timedelta(minutes=10), error_rate=0.0)
    burning = make_records(rng, T0 + timedelta(minutes=10), 300, span=timedelta(minutes=3),
                           error_rate=0.0)  # fmt: skip
    slow = [dataclasses.replace(r, ttft_s=2.0) if i % 2 else r for i, r in enumerate(burning)]
    open_writer(store.engine).write_requests(healthy + slow)
    spec = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 1.0), 0.999, timedelta(days=30))
    opened = T0 + timedelta(minutes=12, seconds=30)
    onset = burn_onset(store.sql, spec, opened)
    assert onset == T0 + timedelta(minutes=10)
    current, reference = windows_for(_incident(opened), opened, timedelta(minutes=5), onset=onset)
    assert current == Window(onset, opened)
    # Five minutes ending five minutes before the opening (earlier than a minute before the
    # onset here).
    assert reference == Window(opened - timedelta(minutes=10), opened - timedelta(minutes=5))
    long_ago = T0 + timedelta(minutes=2)
    _, slow_burn = windows_for(_incident(opened), opened, timedelta(minutes=5), onset=long_ago)
    assert slow_burn == Window(long_ago - timedelta(minutes=6), long_ago - timedelta(minutes=1))
    later = opened + timedelta(minutes=10)
    current, again = windows_for(_incident(opened), later, timedelta(minutes=5), onset=onset)
    assert current == Window(later - timedelta(minutes=5), later)
    assert again == reference  # re-diagnoses keep one reference
    # Without an onset: from a minute before the opening, against the five minutes that end
    # five minutes before it.
    current, reference = windows_for(_incident(opened), opened, timedelta(minutes=5))
    assert current == Window(opened - timedelta(minutes=1), opened)
    assert reference == Window(opened - timedelta(minutes=10), opened - timedelta(minutes=5))


def test_no_step_up_in_the_burn_means_no_onset(store: Store) -> None:
    rng = np.random.default_rng(9)
    open_writer(store.engine).write_requests(
        make_records(rng, T0, 600, span=timedelta(minutes=10), error_rate=0.0)
    )
    spec = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 60.0), 0.999, timedelta(days=30))
    assert burn_onset(store.sql, spec, T0 + timedelta(minutes=10)) is None


def test_a_burn_that_begins_late_in_a_minute_is_found_within_it(store: Store) -> None:
    # The demo's surge began 35 s into a minute; an onset floored to the minute put 35 s of
    # healthy traffic into the page's window.
    rng = np.random.default_rng(10)
    onset = T0 + timedelta(minutes=10, seconds=35)
    healthy = make_records(rng, T0, 1270, span=onset - T0, error_rate=0.0)
    burning = make_records(rng, onset, 200, span=timedelta(seconds=60), error_rate=0.0)
    slow = [dataclasses.replace(r, ttft_s=2.0) if i % 2 else r for i, r in enumerate(burning)]
    open_writer(store.engine).write_requests(healthy + slow)
    spec = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 1.0), 0.999, timedelta(days=30))
    found = burn_onset(store.sql, spec, onset + timedelta(seconds=40))
    assert found == T0 + timedelta(minutes=10, seconds=30)  # the 10 s slice that holds it


TTFT_SLO = SloSpec("ttft", Sli(SliKind.LATENCY, "ttft", 1.0), 0.999, timedelta(days=30))


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _traffic(
    rng: np.random.Generator,
    start: float,
    end: float,
    per_minute: int,
    slow: Callable[[int, Any], bool],
    ttft_s: float,
) -> list[Any]:
    """Requests from minute ``start`` to ``end``; those ``slow`` picks take ``ttft_s``."""
    rows = make_records(rng, _at(start), int((end - start) * per_minute),
                        span=_at(end) - _at(start), error_rate=0.0)  # fmt: skip
    return [dataclasses.replace(r, ttft_s=ttft_s) if slow(i, r) else r for i, r in enumerate(rows)]


def test_an_incident_opening_after_another_of_its_slo_resolved_is_paged_from_its_own_onset(
    store: Store,
) -> None:
    # The demo's fourth fault: the 70B SLO burned 25 minutes earlier (another incident, since
    # resolved); a two-level fit over the hour before the new opening found that older step,
    # so the page's window held five diluted minutes and named nothing (`unknown`).
    rng = np.random.default_rng(12)
    minutes = _at
    slo_store.put_slo(store.engine, TTFT_SLO, T0)

    def traffic(start: float, end: float, slow_share: float) -> list[Any]:
        every = round(1 / slow_share) if slow_share else 0
        return _traffic(rng, start, end, 120, lambda i, _: bool(every) and i % every == 0, 2.0)

    open_writer(store.engine).write_requests(
        traffic(0, 10, 0) + traffic(10, 14, 1.0) + traffic(14, 30, 0) + traffic(30, 30.75, 0.5)
    )
    with store.engine.begin() as connection:
        first = incidents.apply_step(connection, "ttft", "*",
                                     AlertState(Severity.PAGE, minutes(10.5)),
                                     Transition.OPENED, {"5m": 500.0}, minutes(10.5))  # fmt: skip
        assert first is not None
        incidents.apply_step(connection, "ttft", "*", AlertState(), Transition.RESOLVED,
                             {"5m": 0.0}, minutes(25), current=first)  # fmt: skip
        second = incidents.apply_step(connection, "ttft", "*",
                                      AlertState(Severity.PAGE, minutes(30.75)),
                                      Transition.OPENED, {"5m": 500.0}, minutes(30.75))  # fmt: skip
    assert second is not None
    DiagnosisListener(store.sql).on_incident(second, Transition.OPENED)
    note = signals.notes(store.engine, [second.id])[second.id]
    assert note.diagnosis is not None
    assert note.diagnosis["window"]["start"] == "2026-01-05T09:30:00Z"


def test_an_escalation_by_a_burn_that_came_back_is_told_with_that_burn_s_diagnosis(
    store: Store,
) -> None:
    # A ticket for slow TTFT on gpu-0 recovers; then gpu-1 burns and escalates it to a page.
    # The page must name what burns now (gpu-1), not the headline's instance.
    rng = np.random.default_rng(13)
    minutes = _at
    slo_store.put_slo(store.engine, TTFT_SLO, T0)

    def traffic(start: float, end: float, slow: str | None) -> list[Any]:
        return _traffic(rng, start, end, 240, lambda _, r: r.instance == slow, 3.0)

    open_writer(store.engine).write_requests(
        traffic(0, 10, None) + traffic(10, 13, "gpu-0") + traffic(13, 22, None)
        + traffic(22, 23.5, "gpu-1")
    )  # fmt: skip
    told: list[tuple[Transition, dict[str, Any]]] = []
    listener = DiagnosisListener(
        store.sql, announce=lambda i, t, s, d, tx=None: told.append((t, d))
    )
    with store.engine.begin() as connection:
        incident = incidents.apply_step(connection, "ttft", "*",
                                        AlertState(Severity.TICKET, minutes(11)),
                                        Transition.OPENED, {"5m": 50.0}, minutes(11))  # fmt: skip
    assert incident is not None
    listener.on_incident(incident, Transition.OPENED)
    with store.engine.begin() as connection:
        incident = incidents.apply_step(connection, "ttft", "*",
                                        AlertState(Severity.TICKET, minutes(11), minutes(18)),
                                        Transition.NONE, {"5m": 0.5}, minutes(18),
                                        current=incident, recovering=True)  # fmt: skip
    assert incident is not None
    listener.refresh(minutes(18))  # the history says recovering
    with store.engine.begin() as connection:
        incident = incidents.apply_step(connection, "ttft", "*",
                                        AlertState(Severity.PAGE, minutes(11)),
                                        Transition.ESCALATED, {"5m": 80.0}, minutes(23.5),
                                        current=incident)  # fmt: skip
    assert incident is not None
    listener.on_incident(incident, Transition.ESCALATED)
    (first, paged), (escalated, now) = told
    assert first is Transition.OPENED
    assert paged["instance"] == "gpu-0"
    assert escalated is Transition.ESCALATED
    assert now["instance"] == "gpu-1"
    assert now["burning_again_at"].startswith("2026-01-05T09:22")
