"""A lifecycle decision's writes, as values the service hands the store in one call.

``IncidentWrites`` (``storage.seam.IncidentStore.apply``): the history entries, the headline and
the notification's outbox messages (``Announcement``, also ``OutboxStore.announce`` alone),
written in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from infersight.core.burn import Incident


@dataclass(frozen=True, slots=True)
class HistoryWrite:
    """One history entry to append."""

    at: datetime
    verdict: str
    cause: str
    diagnosis: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One notifier's message; ``withdraw``: the key pattern of a held-back resolve to cancel
    first (an incident that opened within the hold-down of the last one's resolve)."""

    notifier: str
    key: str
    payload: str
    not_before: datetime | None = None
    withdraw: str | None = None


@dataclass(frozen=True, slots=True)
class Announcement:
    """A notification's outbox messages (``OutboxStore.announce``): none while a silence
    matches ``silence`` (labels, at); a message whose ``withdraw`` cancelled a held-back
    resolve is replaced by ``reopen(notifier, last incident, its headline diagnosis)`` — (key,
    payload), or
    ``None``: not sent (the alert flapped)."""

    incident: Incident
    now: datetime
    messages: tuple[Outgoing, ...]
    silence: tuple[Mapping[str, str], datetime] | None
    reopen: Callable[[str, Incident | None, Mapping[str, Any] | None], tuple[str, str] | None]


@dataclass(frozen=True, slots=True)
class IncidentWrites:
    """A lifecycle decision's writes (``IncidentStore.apply``): history entries, the headline
    (symptom, diagnosis, at) and the notification's messages."""

    history: tuple[HistoryWrite, ...] = ()
    headline: tuple[Mapping[str, Any], Mapping[str, Any], datetime] | None = None
    announcement: Announcement | None = None
