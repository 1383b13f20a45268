"""``storage.incident_history``: a bounded history per incident, burn points a minute apart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from infersight.core.burn import AlertState, Severity, Transition
from infersight.core.errors import InvalidInput, NotFound
from infersight.storage import incident_history, incidents
from tests.conftest import Store

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def _open(store: Store) -> int:
    with store.engine.begin() as connection:
        opened = incidents.apply_step(
            connection, "slo", "*", AlertState(Severity.PAGE, T0), Transition.OPENED,
            {"5m": 20.0, "1h": 15.0}, T0,
        )  # fmt: skip
    assert opened is not None
    return opened.id


def test_the_history_keeps_the_onset_and_the_newest_entries(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(incident_history, "MAX_ENTRIES", 5)
    incident = _open(store)
    incident_history.append(store.engine, incident, T0, "onset", "overload", {"cause": "overload"})
    for k in range(1, 9):
        at = T0 + timedelta(minutes=2 * k)
        incident_history.append(store.engine, incident, at, "kept", f"c{k}", {"cause": f"c{k}"})
    kept = incident_history.entries(store.engine, incident)
    assert [e.cause for e in kept] == ["overload", "c5", "c6", "c7", "c8"]
    assert incident_history.last_diagnosis(store.engine, incident + 1) is None
    assert incident_history.onsets(store.engine, [incident])[incident].cause == "overload"
    assert incident_history.latest(store.engine, [incident])[incident].cause == "c8"
    incident_history.append(store.engine, incident, T0 + timedelta(hours=1), "recovering", "c8")
    assert incident_history.latest(store.engine, [incident])[incident].verdict == "recovering"
    last = incident_history.last_diagnosis(store.engine, incident)
    assert last is not None
    assert last.diagnosis == {"cause": "c8"}
    with pytest.raises(InvalidInput):
        incident_history.append(store.engine, incident, T0, "guessed", "overload")


def test_burn_points_are_a_minute_apart_and_the_resolution_is_kept(store: Store) -> None:
    incident = _open(store)
    with store.engine.begin() as connection:
        current = incidents.firing(connection, "slo", "*")
        for seconds in range(30, 181, 30):
            now = T0 + timedelta(seconds=seconds)
            current = incidents.apply_step(
                connection, "slo", "*", AlertState(Severity.PAGE, T0), Transition.NONE,
                {"5m": 1.0 * seconds, "1h": float("inf")}, now, current=current,
                recovering=seconds >= 120,
            )  # fmt: skip
            assert current is not None
        assert current.recovering_since == T0 + timedelta(seconds=120)  # kept from its start
        resolved = incidents.apply_step(
            connection, "slo", "*", AlertState(), Transition.RESOLVED, {"5m": 0.0},
            T0 + timedelta(seconds=190), current=current,
        )  # fmt: skip
    assert resolved is not None
    assert resolved.phase == "resolved"
    assert resolved.recovering_since is None
    points = incident_history.burn_points(store.engine, incident)
    assert [(at - T0).total_seconds() for at, _ in points] == [0, 60, 120, 180, 190]
    assert points[1][1] == {"5m": 60.0}  # an infinite rate is left out, not stored as JSON ∞
    with pytest.raises(NotFound):
        incidents.get_incident(store.engine, 2**63)
