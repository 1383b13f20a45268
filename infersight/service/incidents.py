"""Incident annotation: what the API and the dashboard say about an incident beyond its row.

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

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine

from infersight.alerts.notify import incident_keys
from infersight.core.burn import Incident, IncidentState
from infersight.core.timestamps import iso
from infersight.storage import incident_history, incidents, signals
from infersight.storage.outbox import Message, Outbox


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


def annotate(engine: Engine, found: Sequence[Incident]) -> dict[int, dict[str, Any]]:
    """incident id → ``{"state", "phase", "recovering_since", "symptom", "diagnosis", "onset",
    "acknowledged_at", "acknowledged_by"}``."""
    ids = [i.id for i in found]
    notes = signals.notes(engine, ids)
    onsets = incident_history.onsets(engine, ids)
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


def _brief(entry: incident_history.Entry) -> dict[str, Any]:
    """An entry's time, verdict and cause, with the confidence and instance of its diagnosis."""
    d = entry.diagnosis or {}
    return {
        "at": iso(entry.at),
        "verdict": entry.verdict,
        "cause": entry.cause,
        "confidence": d.get("confidence"),
        "instance": d.get("instance"),
    }


def history_of(engine: Engine, incident_id: int) -> dict[str, Any]:
    """``{"history": [...], "burn_points": [...], "notifications": [...]}`` of one incident,
    oldest first: each entry as ``_brief`` with the stored diagnosis's evidence and missing
    evidence; each notification as ``_notification``."""
    history = []
    for entry in incident_history.entries(engine, incident_id):
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
        {"at": iso(at), "burn_rates": rates}
        for at, rates in incident_history.burn_points(engine, incident_id)
    ]
    incident = incidents.get_incident(engine, incident_id)
    told = Outbox(engine).messages(
        key_like=incident_keys(incident.slo, incident.scope, incident.id)
    )
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
