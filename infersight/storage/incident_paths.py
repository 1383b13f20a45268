"""An incident's evidence in one read and a lifecycle decision's writes in one transaction.

``evidence`` reads, in one store call, all that ``alerts.lifecycle.decide`` may ask the
listener (``service.diagnosis``) about an incident: the incident as stored now, its note, its
newest history entry and newest diagnosis, the last incident of its SLO and scope, and its SLO.
``apply`` writes a decision: history entries, headline and the outbox messages of its
notification, in one transaction. ``announce`` enqueues a notification's messages: nothing
while a silence matches (a trigger), and a held-back resolve withdrawn by an incident that
opened within the hold-down first, the message then chosen by the announcement's ``reopen``
from the last incident and its note (read only then).
"""

from __future__ import annotations

import logging

from infersight.core.errors import InfersightError
from infersight.core.incident_writes import Announcement, IncidentWrites
from infersight.storage.seam import Evidence, Store

log = logging.getLogger(__name__)


def evidence(store: Store, incident_id: int) -> Evidence:
    """The incident's evidence in one store call (``IncidentStore.evidence``); each of these
    reads takes a connection of its own, one after another (none holds a second)."""
    incident = store.incidents.get(incident_id)
    note = store.incidents.notes([incident_id]).get(incident_id)
    last = store.history.latest([incident_id]).get(incident_id)
    prior = store.history.last_diagnosis(incident_id)
    before = store.incidents.previous(incident)
    try:
        spec = store.slos.get(incident.slo)
    except InfersightError:
        spec = None  # a deleted SLO still has incidents to follow
    return Evidence(incident, note, last, prior, before, spec)


def apply(store: Store, incident_id: int, writes: IncidentWrites) -> int:
    """``writes`` in one transaction (the caller's, when bound to one); the messages
    enqueued."""
    with store.transaction() as tx:
        for entry in writes.history:
            tx.history.append(incident_id, entry.at, entry.verdict, entry.cause, entry.diagnosis)
        if writes.headline is not None:
            symptom, diagnosis, at = writes.headline
            tx.incidents.save_diagnosis(incident_id, symptom, diagnosis, at)
        if writes.announcement is not None:
            return announce(tx, writes.announcement)
    return 0


def announce(store: Store, announcement: Announcement) -> int:
    """Enqueue ``announcement``'s messages through ``store`` (``OutboxStore.announce``); the
    messages enqueued."""
    incident = announcement.incident
    if announcement.silence is not None:
        labels, at = announcement.silence
        if store.silences.silenced(labels, at):
            log.info("incident %s is silenced; not notified", incident.id)
            return 0
    read = False
    before = headline = None
    enqueued = 0
    for message in announcement.messages:
        key, payload = message.key, message.payload
        withdraw = message.withdraw
        if withdraw is not None and store.outbox.cancel_pending(message.notifier, withdraw):
            if not read:
                before = store.incidents.previous(incident)
                note = store.incidents.notes([before.id]).get(before.id) if before else None
                headline = note.diagnosis if note is not None else None
                read = True
            instead = announcement.reopen(message.notifier, before, headline)
            if instead is None:
                continue
            key, payload = instead
        enqueued += store.outbox.enqueue(
            message.notifier, key, payload, announcement.now, message.not_before
        )
    return enqueued
