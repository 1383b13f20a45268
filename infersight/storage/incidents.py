"""Incidents in the store: one row per alert of an SLO and scope, not one per evaluation.

``apply_step`` writes what ``core.burn.step`` decided: it opens a row, updates the open row's
severity, burn rates and recovering mark (``core.burn.recovered``), or resolves it; the burn
rates it saw go to the incident's timeline (``storage.incident_history.add_burn_point``). At
most one incident per SLO and scope is firing; the evaluation job is the only writer (one
leader), so no database constraint is needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final, Literal

from sqlalchemy import Connection, Engine, Row, insert, select, update

from infersight.core.burn import (
    AlertState,
    Incident,
    IncidentState,
    Severity,
    Transition,
)
from infersight.core.errors import InvalidInput, NotFound
from infersight.storage.incident_history import add_burn_point
from infersight.storage.tables import incidents

STATES: Final = ("firing", "resolved", "all")


def _incident(row: Row[Any]) -> Incident:
    return Incident(
        id=row.id,
        slo=row.slo,
        scope=row.scope,
        severity=Severity(row.severity),
        state=IncidentState(row.state),
        opened_at=row.opened_at,
        updated_at=row.updated_at,
        resolved_at=row.resolved_at,
        peak_burn_rate=row.peak_burn_rate,
        burn_rates=json.loads(row.burn_rates),
        recovering_since=row.recovering_since if row.state == "firing" else None,
    )


def firing(connection: Connection, slo: str, scope: str) -> Incident | None:
    """The open incident of ``slo`` and ``scope``, if any."""
    row = connection.execute(
        select(incidents).where(
            incidents.c.slo == slo,
            incidents.c.scope == scope,
            incidents.c.state == IncidentState.FIRING.value,
        )
    ).first()
    return _incident(row) if row is not None else None


def all_firing(connection: Connection) -> dict[tuple[str, str], Incident]:
    """Every open incident by (SLO, scope): one query for a whole evaluation cycle."""
    query = select(incidents).where(incidents.c.state == IncidentState.FIRING.value)
    return {(i.slo, i.scope): i for i in map(_incident, connection.execute(query))}


def alert_state(incident: Incident | None) -> AlertState:
    """The alert state an open incident stands for."""
    if incident is None:
        return AlertState()
    return AlertState(incident.severity, incident.opened_at, incident.recovering_since)


def apply_step(
    connection: Connection,
    slo: str,
    scope: str,
    state: AlertState,
    transition: Transition,
    burn_rates: Mapping[str, float],
    now: datetime,
    *,
    current: Incident | Literal["lookup"] | None = "lookup",
    recovering: bool = False,
) -> Incident | None:
    """Persist one evaluation's outcome; the incident as it now is (``None``: none open).

    ``current`` is the open incident when the caller already read it (``all_firing``);
    ``recovering``: the symptom has cleared while the alert still holds (kept since when it
    was first seen, cleared when the burn comes back).
    """
    if current == "lookup":
        current = firing(connection, slo, scope)
    peak = max(burn_rates.values(), default=0.0)
    rates = json.dumps(dict(burn_rates), sort_keys=True)
    if current is None:
        if state.severity is None:
            return None
        result = connection.execute(
            insert(incidents)
            .values(
                slo=slo,
                scope=scope,
                severity=state.severity.value,
                state=IncidentState.FIRING.value,
                opened_at=state.since or now,
                updated_at=now,
                peak_burn_rate=peak,
                burn_rates=rates,
            )
            .returning(incidents.c.id)
        )
        opened = result.scalar_one()
        add_burn_point(connection, opened, now, burn_rates, force=True)
        return _reload(connection, opened)
    values: dict[str, Any] = {
        "updated_at": now,
        "burn_rates": rates,
        "peak_burn_rate": max(current.peak_burn_rate, peak),
    }
    resolved = transition is Transition.RESOLVED or state.severity is None
    if resolved or state.severity is None:
        values.update(state=IncidentState.RESOLVED.value, resolved_at=now, recovering_since=None)
    else:
        values["severity"] = state.severity.value
        values["recovering_since"] = (current.recovering_since or now) if recovering else None
    connection.execute(update(incidents).where(incidents.c.id == current.id).values(**values))
    add_burn_point(connection, current.id, now, burn_rates, force=resolved)
    return _reload(connection, current.id)


def resolve(connection: Connection, incident_ids: Iterable[int], now: datetime) -> list[Incident]:
    """Resolve the given open incidents (their SLO was deleted or re-scoped); as they now are."""
    ids = list(incident_ids)
    if not ids:
        return []
    connection.execute(
        update(incidents)
        .where(incidents.c.id.in_(ids), incidents.c.state == IncidentState.FIRING.value)
        .values(
            state=IncidentState.RESOLVED.value,
            resolved_at=now,
            updated_at=now,
            recovering_since=None,
        )
    )
    return [_reload(connection, incident_id) for incident_id in ids]


def resolve_all(connection: Connection, slo: str, now: datetime) -> list[Incident]:
    """Resolve every open incident of ``slo`` (it was deleted); the incidents resolved."""
    open_ids = [i.id for (name, _), i in all_firing(connection).items() if name == slo]
    return resolve(connection, open_ids, now)


def _reload(connection: Connection, incident_id: int) -> Incident:
    row = connection.execute(select(incidents).where(incidents.c.id == incident_id)).one()
    return _incident(row)


def get_incident(engine: Engine, incident_id: int) -> Incident:
    """One incident by id; ``NotFound`` if there is none."""
    if not 0 < incident_id < 2**63:
        raise NotFound(f"no incident {incident_id}", details={"id": incident_id})
    with engine.connect() as connection:
        row = connection.execute(select(incidents).where(incidents.c.id == incident_id)).first()
    if row is None:
        raise NotFound(f"no incident {incident_id}", details={"id": incident_id})
    return _incident(row)


def previous(engine: Engine, incident: Incident) -> Incident | None:
    """The incident of the same SLO and scope opened last before ``incident``, if any."""
    query = (
        select(incidents)
        .where(
            incidents.c.slo == incident.slo,
            incidents.c.scope == incident.scope,
            incidents.c.id < incident.id,
        )
        .order_by(incidents.c.id.desc())
        .limit(1)
    )
    with engine.connect() as connection:
        row = connection.execute(query).first()
    return _incident(row) if row is not None else None


def list_incidents(engine: Engine, state: str = "all", limit: int = 500) -> list[Incident]:
    """Incidents newest first, filtered by ``state`` (``firing``, ``resolved`` or ``all``)."""
    if state not in STATES:
        raise InvalidInput(f"unknown incident state {state!r}", details={"allowed": list(STATES)})
    query = select(incidents).order_by(incidents.c.opened_at.desc(), incidents.c.id.desc())
    if state != "all":
        query = query.where(incidents.c.state == state)
    with engine.connect() as connection:
        return [_incident(row) for row in connection.execute(query.limit(limit))]
