"""An incident's history: every diagnosis after its onset, its lifecycle steps, its burn rates.

The headline diagnosis (the one made at the onset, the page's cause, unless a later one was
raised over it) stays in ``incident_diagnoses`` (``storage.signals``); this module keeps what
happened since, oldest first:

* ``incident_history``: one entry per diagnosis (verdict ``onset``, ``kept`` or ``raised``,
  with the diagnosis as stored) and per lifecycle step (``recovering``, ``burning``,
  ``resolved``, with the headline's cause and no diagnosis). At most ``MAX_ENTRIES`` per
  incident: past that, the oldest entries after the onset make room.
* ``incident_burn_points``: the burn rates each evaluation saw, at most one point per
  ``POINT_EVERY`` (the opening and the resolution are always kept) and ``MAX_POINTS`` per
  incident, for the timeline on the incident's page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection, Engine, delete, func, insert, select

from infersight.core.errors import InvalidInput
from infersight.storage.sql import begin
from infersight.storage.tables import incident_burn_points, incident_history

VERDICTS: Final = ("onset", "kept", "raised", "recovering", "burning", "resolved")
#: Diagnoses are the entries with a diagnosis; the others are lifecycle steps.
DIAGNOSES: Final = ("onset", "kept", "raised")
MAX_ENTRIES: Final = 500
POINT_EVERY: Final = timedelta(seconds=60)
MAX_POINTS: Final = 5000


@dataclass(frozen=True, slots=True)
class Entry:
    """One step of an incident's history."""

    id: int
    incident_id: int
    at: datetime
    verdict: str
    cause: str
    diagnosis: dict[str, Any] | None


def _entry(row: Any) -> Entry:
    diagnosis = json.loads(row.diagnosis) if row.diagnosis is not None else None
    return Entry(row.id, row.incident_id, row.at, row.verdict, row.cause, diagnosis)


def append(
    engine: Engine | Connection,
    incident_id: int,
    at: datetime,
    verdict: str,
    cause: str,
    diagnosis: Mapping[str, Any] | None = None,
) -> None:
    """Add one entry to the incident's history (the oldest after the onset make room); in the
    caller's transaction when given a connection."""
    if verdict not in VERDICTS:
        raise InvalidInput(f"unknown history verdict {verdict!r}", details={"allowed": VERDICTS})
    text = json.dumps(diagnosis, sort_keys=True) if diagnosis is not None else None
    with begin(engine) as connection:
        connection.execute(
            insert(incident_history).values(
                incident_id=incident_id, at=at, verdict=verdict, cause=cause[:64], diagnosis=text
            )
        )
        _trim(connection, incident_id)


def _trim(connection: Connection, incident_id: int) -> None:
    mine = incident_history.c.incident_id == incident_id
    count = connection.execute(select(func.count()).where(mine)).scalar_one()
    if count <= MAX_ENTRIES:
        return
    onset = connection.execute(
        select(func.min(incident_history.c.id)).where(mine, incident_history.c.verdict == "onset")
    ).scalar_one()
    oldest = (
        select(incident_history.c.id)
        .where(mine, incident_history.c.id != (onset if onset is not None else -1))
        .order_by(incident_history.c.id)
        .limit(int(count) - MAX_ENTRIES)
    )
    doomed = [row.id for row in connection.execute(oldest)]
    connection.execute(delete(incident_history).where(incident_history.c.id.in_(doomed)))


def entries(engine: Engine, incident_id: int) -> list[Entry]:
    """The incident's history, oldest first."""
    query = (
        select(incident_history)
        .where(incident_history.c.incident_id == incident_id)
        .order_by(incident_history.c.id)
    )
    with engine.connect() as connection:
        return [_entry(row) for row in connection.execute(query)]


def last_diagnosis(engine: Engine, incident_id: int) -> Entry | None:
    """The incident's newest entry that holds a diagnosis (not a lifecycle step)."""
    query = (
        select(incident_history)
        .where(
            incident_history.c.incident_id == incident_id,
            incident_history.c.verdict.in_(DIAGNOSES),
        )
        .order_by(incident_history.c.id.desc())
        .limit(1)
    )
    with engine.connect() as connection:
        row = connection.execute(query).first()
    return _entry(row) if row is not None else None


def latest(engine: Engine, incident_ids: Iterable[int]) -> dict[int, Entry]:
    """The newest entry of each given incident (absent ids have none)."""
    ids = list(incident_ids)
    if not ids:
        return {}
    newest = (
        select(func.max(incident_history.c.id))
        .where(incident_history.c.incident_id.in_(ids))
        .group_by(incident_history.c.incident_id)
    )
    with engine.connect() as connection:
        rows = connection.execute(
            select(incident_history).where(incident_history.c.id.in_(newest))
        ).all()
    return {row.incident_id: _entry(row) for row in rows}


def onsets(engine: Engine, incident_ids: Iterable[int]) -> dict[int, Entry]:
    """The onset entry (the page's diagnosis) of each given incident that has one."""
    ids = list(incident_ids)
    if not ids:
        return {}
    with engine.connect() as connection:
        rows = connection.execute(
            select(incident_history).where(
                incident_history.c.incident_id.in_(ids), incident_history.c.verdict == "onset"
            )
        ).all()
    return {row.incident_id: _entry(row) for row in rows}


# -- burn rates --------------------------------------------------------------------------------


def add_burn_point(
    connection: Connection,
    incident_id: int,
    at: datetime,
    burn_rates: Mapping[str, float],
    *,
    force: bool = False,
) -> bool:
    """Keep the burn rates an evaluation saw, unless the incident's last point is younger than
    ``POINT_EVERY`` or it holds ``MAX_POINTS`` (``force``: the opening and the resolution)."""
    mine = incident_burn_points.c.incident_id == incident_id
    last, count = connection.execute(
        select(func.max(incident_burn_points.c.at), func.count()).where(mine)
    ).one()
    if last is not None and at <= last:
        return False
    if not force and last is not None and (at - last < POINT_EVERY or count >= MAX_POINTS):
        return False
    rates = {k: v for k, v in burn_rates.items() if math.isfinite(v)}  # JSON has no ∞
    connection.execute(
        insert(incident_burn_points).values(
            incident_id=incident_id, at=at, burn_rates=json.dumps(rates, sort_keys=True)
        )
    )
    return True


def burn_points(engine: Engine, incident_id: int) -> list[tuple[datetime, dict[str, float]]]:
    """(time, burn rate per window) of every kept point, oldest first."""
    query = (
        select(incident_burn_points.c.at, incident_burn_points.c.burn_rates)
        .where(incident_burn_points.c.incident_id == incident_id)
        .order_by(incident_burn_points.c.at)
    )
    with engine.connect() as connection:
        return [(row.at, json.loads(row.burn_rates)) for row in connection.execute(query)]
