"""An evaluation's committed step with no listener told: what a store holds when the process
died between the evaluation's commit and its notifications (the outbox recovery tests)."""

from __future__ import annotations

from datetime import UTC, datetime

from infersight.core.burn import AlertState, Incident, Severity, Transition
from infersight.storage import incidents
from tests.conftest import Store

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)


def committed_step(
    store: Store, severity: Severity | None, transition: Transition, at: datetime
) -> Incident:
    """What an evaluation commits for SLO ``chat`` (scope ``*``); its listeners never ran."""
    with store.engine.begin() as connection:
        current = incidents.firing(connection, "chat", "*")
        state = AlertState(severity, T0 if severity else None)
        incident = incidents.apply_step(
            connection, "chat", "*", state, transition, {"5m": 20.0}, at, current=current
        )
    assert incident is not None
    return incident
