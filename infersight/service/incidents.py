"""Incidents as the API and the dashboard show them: the list, one incident, what is said about
an incident beyond its row, acknowledgement and silences.

``list_incidents`` is the one incident list ``GET /api/v1/incidents``, the Incidents page and
the overview's firing incidents read: newest first, narrowed by the caller's filters and, for a
caller limited to tenants, to the incidents of SLOs within those tenants, each annotated.
``incident_dict`` is an incident as ``GET /api/v1/incidents`` answers it. ``annotate`` adds the
stored symptom, headline diagnosis, lifecycle phase and acknowledgement (``state`` reads
``recovering`` once the symptom has cleared, ``acknowledged`` for an acknowledged incident that
still burns; ``phase`` is always ``firing``, ``recovering`` or ``resolved``), with ``onset``, the
diagnosis the page named. ``history_of`` adds the diagnosis history, the burn-rate points
(``GET /api/v1/incidents/{id}``, the incident's page) and the incident's notifications: one per
receiver and change, with its delivery state (``delivered``, ``pending``, ``sending``, ``failed``,
``cancelled``, or ``unknown`` for an attempt a crash interrupted that is not sent again) and its
last error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from infersight.alerts.notify import incident_keys
from infersight.core.burn import Incident, IncidentState
from infersight.core.query import within_tenants
from infersight.core.timestamps import iso
from infersight.storage.seam import STATES as _STATES
from infersight.storage.seam import IncidentNote, NewSilence, Silence

if TYPE_CHECKING:
    from infersight.storage.seam import Entry, Message, Store

#: What ``list_incidents`` takes as its state: ``firing``, ``resolved`` or ``all``.
STATES: Final = _STATES


def incident_dict(incident: Incident) -> dict[str, Any]:
    return {
        "id": incident.id,
        "slo": incident.slo,
        "scope": incident.scope,
        "severity": incident.severity.value,
        "state": incident.state.value,
        "opened_at": incident.opened_at.isoformat().replace("+00:00", "Z"),
        "updated_at": incident.updated_at.isoformat().replace("+00:00", "Z"),
        "resolved_at": (
            incident.resolved_at.isoformat().replace("+00:00", "Z")
            if incident.resolved_at
            else None
        ),
        "peak_burn_rate": incident.peak_burn_rate,
        "burn_rates": dict(incident.burn_rates),
    }


def annotate(store: Store, found: Sequence[Incident]) -> dict[int, dict[str, Any]]:
    """incident id → ``{"state", "phase", "recovering_since", "symptom", "diagnosis", "onset",
    "acknowledged_at", "acknowledged_by"}``."""
    ids = [i.id for i in found]
    notes = store.incidents.notes(ids)
    onsets = store.history.onsets(ids)
    out = {}
    for incident in found:
        note = notes.get(incident.id)
        acked = note is not None and note.acknowledged_at is not None
        state = incident.phase
        if acked and state == IncidentState.FIRING.value:
            state = "acknowledged"
        onset = onsets.get(incident.id)
        out[incident.id] = {
            "state": state,
            "phase": incident.phase,
            "recovering_since": iso(incident.recovering_since)
            if incident.recovering_since
            else None,
            "symptom": note.symptom if note else None,
            "diagnosis": note.diagnosis if note else None,
            "onset": _brief(onset) if onset is not None else None,
            "acknowledged_at": iso(note.acknowledged_at) if note and note.acknowledged_at else None,
            "acknowledged_by": note.acknowledged_by if acked and note else None,
        }
    return out


def _brief(entry: Entry) -> dict[str, Any]:
    """An entry's time, verdict and cause, with the confidence and instance of its diagnosis."""
    d = entry.diagnosis or {}
    return {
        "at": iso(entry.at),
        "verdict": entry.verdict,
        "cause": entry.cause,
        "confidence": d.get("confidence"),
        "instance": d.get("instance"),
    }


def history_of(store: Store, incident_id: int) -> dict[str, Any]:
    """``{"history": [...], "burn_points": [...], "notifications": [...]}`` of one incident,
    oldest first: each entry as ``_brief`` with the stored diagnosis's evidence and missing
    evidence; each notification as ``_notification``."""
    history = []
    for entry in store.history.entries(incident_id):
        d = entry.diagnosis or {}
        history.append(
            {
                **_brief(entry),
                "evidence": d.get("evidence", []) if entry.diagnosis else None,
                "missing_evidence": d.get("missing_evidence", []) if entry.diagnosis else None,
                "window": d.get("window"),
                "diagnosis": entry.diagnosis,
            }
        )
    points = [
        {"at": iso(at), "burn_rates": rates} for at, rates in store.history.burn_points(incident_id)
    ]
    incident = store.incidents.get(incident_id)
    told = store.outbox.messages(key_like=incident_keys(incident.slo, incident.scope, incident.id))
    return {
        "history": history,
        "burn_points": points,
        "notifications": [_notification(m) for m in told],
    }


def _notification(message: Message) -> dict[str, Any]:
    """An outbox message as the incident shows it (never its payload)."""
    parts = message.key.split(":")
    return {
        "notifier": message.notifier,
        "event": parts[2] if len(parts) > 2 else None,
        "severity": parts[3] if len(parts) > 3 else None,
        "update": len(parts) > 4,
        "state": message.state.value,
        "attempts": message.attempts,
        "created_at": iso(message.created_at) if message.created_at else None,
        "delivered_at": iso(message.delivered_at) if message.delivered_at else None,
        "last_error": message.last_error or None,
    }


# -- the incident list, one incident, acknowledgement ---------------------------------------


@dataclass(frozen=True, slots=True)
class Listed:
    """An incident of the list with its annotation (``annotate``)."""

    incident: Incident
    notes: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The incident as ``GET /api/v1/incidents`` answers it."""
        return {**incident_dict(self.incident), **self.notes}


def scoped_slos(store: Store, tenants: frozenset[str]) -> set[str]:
    """The SLOs whose selector lies within ``tenants`` (``core.query.within_tenants``): a caller
    limited to those tenants sees these SLOs' incidents and no others."""
    return {s.name for s in store.slos.all() if within_tenants(tenants, dict(s.selector.items()))}


def list_incidents(
    store: Store,
    state: str = "firing",
    limit: int = 200,
    *,
    tenants: frozenset[str] | None = None,
    keep: Callable[[Incident], bool] | None = None,
) -> list[Listed]:
    """The newest ``limit`` incidents in ``state`` (``STATES``), newest first, each annotated:
    those ``keep`` keeps (a page's range and filters), and for a caller limited to ``tenants``
    (``None``: not limited) those of the SLOs within them (``scoped_slos``)."""
    found = store.incidents.all(state, limit)
    if keep is not None:
        found = [i for i in found if keep(i)]
    if tenants is not None:
        mine = scoped_slos(store, tenants)
        found = [i for i in found if i.slo in mine]
    notes = annotate(store, found)
    return [Listed(i, notes[i.id]) for i in found]


def get_incident(store: Store, incident_id: int) -> Incident:
    """Incident ``incident_id`` (``NotFound`` when there is none)."""
    return store.incidents.get(incident_id)


def within(store: Store, incident: Incident, tenants: frozenset[str] | None) -> bool:
    """Whether a caller limited to ``tenants`` (``None``: not limited) may see ``incident``:
    its SLO lies within them."""
    return tenants is None or incident.slo in scoped_slos(store, tenants)


def open_incident(store: Store, slo: str, scope: str) -> Incident | None:
    """The open incident of ``slo`` and ``scope``, if any (a budget's or a cost step's alert)."""
    return store.incidents.firing(slo, scope)


def acknowledge(store: Store, incident_id: int, by: str, at: datetime) -> IncidentNote:
    """Acknowledge incident ``incident_id`` (``NotFound`` when there is none)."""
    return store.incidents.acknowledge(incident_id, by, at)


# -- silences --------------------------------------------------------------------------------


def add_silence(
    store: Store,
    matchers: Mapping[str, str],
    starts: datetime,
    ends: datetime,
    now: datetime,
    *,
    created_by: str = "",
    comment: str = "",
) -> Silence:
    """Silence the notifications of the incidents ``matchers`` match from ``starts`` to
    ``ends`` (``InvalidInput`` for no or an unknown matcher, or an end before the start)."""
    new = NewSilence(matchers, starts, ends, created_by, comment)
    return store.silences.add(new, now)


def active_silences(store: Store, now: datetime) -> list[Silence]:
    """The silences in force at ``now``."""
    return store.silences.active(now)


def end_silence(store: Store, silence_id: int, now: datetime) -> None:
    """End silence ``silence_id`` at ``now`` (``NotFound`` when there is none)."""
    store.silences.expire(silence_id, now)
