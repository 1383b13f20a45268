"""Notifications: incident changes → outbox (routed, silenced) → notifiers, on a job of its own.

``Announcer`` is the ``DiagnosisListener``'s ``announce`` callback: it turns an incident change
with its diagnosis into a ``Notification``, skips it while a silence matches, and enqueues one
outbox message per routed notifier (idempotent per incident, event and severity, so a
re-evaluation never pages twice); resolves wait a hold-down so that a flapping alert pages
once (whether an incident that opens within it is news — another cause or instance than the
last one, or a higher severity — is the lifecycle's rows 16-18, ``alerts.lifecycle``; news is
sent as an update of the receiver's still-open alert). ``Delivery`` is the job that drains
the outbox; it runs apart from the evaluation, so an endpoint that is down only delays its own
messages. Its first pass after a start, and after each time this replica takes the lead of the
scheduled jobs (``on_leadership``: the replica that led before may have died mid-send), settles
the attempts left claimed: sent again to PagerDuty and Alertmanager (they deduplicate), marked
``unknown`` for Slack (at most once). A predecessor that was still sending reports its outcome
to its own claim only (the store's ``outbox``). ``notifiers_from_settings`` builds the
notifiers from their settings (``config.parts.NotifierPart``: environment variables or secret
files); the secrets live only inside the notifier objects and are never logged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from infersight.alerts.dispatch import (
    Backoff,
    DispatchReport,
    deliver_due,
    recover_interrupted,
)
from infersight.alerts.lifecycle import (
    DEFAULTS,
    Cue,
    Facts,
    Lifecycle,
    Notice,
    Phase,
    Reopen,
    Told,
    decide,
)
from infersight.alerts.notifiers.alertmanager import AlertmanagerNotifier
from infersight.alerts.notifiers.pagerduty import EVENTS_URL, PagerDutyNotifier
from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.alerts.notify import Event, Notification, Notifier, incident_keys
from infersight.alerts.routing import Router
from infersight.config.parts import NotifierPart, variable
from infersight.core.burn import Incident, IncidentState, Severity, Transition
from infersight.core.errors import ConfigurationError
from infersight.core.incident_writes import Announcement, Outgoing
from infersight.service.diagnosis import DiagnosisListener
from infersight.storage.seam import Store

log = logging.getLogger(__name__)
#: How long after its resolution a resolve that a crash kept from the outbox is still sent,
#: and how many of the newest resolved incidents are looked at for one (``reconcile``).
RECONCILE_RESOLVED = timedelta(days=1)
RECONCILE_LIMIT = 200
_EVENTS: dict[Told, Event] = {
    Transition.OPENED: Event.TRIGGER,
    Transition.ESCALATED: Event.TRIGGER,
    Transition.DEESCALATED: Event.TRIGGER,
    Transition.RESOLVED: Event.RESOLVE,
    Notice.UPDATE: Event.TRIGGER,
}


def _revision(diagnosis: dict[str, Any]) -> str:
    """An update's part of the outbox key: its cause, and when a burn that came back began (each
    return of the burn is told once, a changed cause once)."""
    revision = f"cause={diagnosis.get('cause')}"
    again = diagnosis.get("burning_again_at")
    return f"{revision}@{again}" if again else revision


def labels_of(incident: Incident) -> dict[str, str]:
    """The labels silences and routes match: slo, severity and the scope's own labels."""
    labels = {"slo": incident.slo, "severity": incident.severity.value}
    if incident.scope not in ("", "*"):
        for part in incident.scope.split(","):
            name, _, value = part.partition("=")
            labels[name] = value
    return labels


class Announcer:
    def __init__(
        self,
        store: Store,
        notifiers: Mapping[str, Notifier],
        clock: Callable[[], datetime],
        router: Router | None = None,
        dashboard_url: str = "",
        flap_hold: timedelta = DEFAULTS.flap_hold,
    ) -> None:
        self.flap_hold = flap_hold
        self.store = store
        self.notifiers = dict(notifiers)
        self.clock = clock
        self.router = router or Router()
        self.dashboard_url = dashboard_url

    def incident_url(self, incident_id: int) -> str:
        """The incident's own dashboard page (its diagnosis, evidence and profile), which a
        notification links to; empty without a dashboard address."""
        if not self.dashboard_url:
            return ""
        return f"{self.dashboard_url.rstrip('/')}/ui/incidents/{incident_id}"

    def __call__(
        self,
        incident: Incident,
        told: Told,
        symptom: dict[str, Any],
        diagnosis: dict[str, Any],
        tx: Store | None = None,
    ) -> None:
        """Enqueue the notifications of what is ``told`` — an incident change, or
        ``Notice.UPDATE`` (news of its open alert) — in ``tx``'s transaction when given
        (``store.transaction()``, the one that stores the change's diagnosis: both commit, or
        neither)."""
        (tx or self.store).outbox.announce(self.plan(incident, told, symptom, diagnosis))

    def plan(
        self,
        incident: Incident,
        told: Told,
        symptom: dict[str, Any],
        diagnosis: dict[str, Any],
    ) -> Announcement:
        """The outbox messages of what is ``told``, one per routed notifier, for the store to
        enqueue (``OutboxStore.announce``, or with a decision's writes: ``IncidentStore.apply``):
        none while a silence matches a trigger."""
        event = _EVENTS.get(told)
        if event is None:
            raise ValueError(
                f"{told!r} is no notification (news of an open alert is {Notice.UPDATE!r})"
            )
        update = told is Notice.UPDATE
        labels = labels_of(incident)
        at = incident.resolved_at or incident.updated_at
        notification = Notification(
            incident_id=incident.id,
            slo=incident.slo,
            scope=incident.scope,
            severity=incident.severity.value,
            event=event,
            at=at,
            opened_at=incident.opened_at,
            labels=labels,
            symptom=symptom,
            diagnosis=diagnosis,
            dashboard_url=self.incident_url(incident.id),
            revision=_revision(diagnosis) if update else "",
        )
        # Flapping: a resolve waits ``flap_hold``; an incident of the same SLO and scope that
        # opens meanwhile withdraws it and is not announced (the receiver's alert is still open
        # under the same dedup key), so trigger/resolve/trigger within the hold is one page.
        not_before = at + self.flap_hold if event is Event.RESOLVE else None
        held_back = f"{notification.group}:%:{Event.RESOLVE.value}:%"
        withdraw = held_back if told is Transition.OPENED else None
        messages = tuple(
            Outgoing(name, notification.key, self._payload(name, notification), not_before,
                     withdraw)
            for name in self.router.targets(labels, sorted(self.notifiers))
        )  # fmt: skip
        reopened: list[Notification] = []

        def reopen(
            name: str, before: Incident | None, headline: Mapping[str, Any] | None
        ) -> tuple[str, str] | None:
            if not reopened:
                reopened.append(self._reopened(incident, notification, before, headline))
            if reopened[0] is notification:
                log.info("incident %s flapped back open; %s not paged again", incident.id, name)
                return None
            return reopened[0].key, self._payload(name, reopened[0])  # news: an update

        silence = (labels, at) if event is Event.TRIGGER else None
        return Announcement(incident, self.clock(), messages, silence, reopen)

    def _payload(self, name: str, notification: Notification) -> str:
        return json.dumps(self.notifiers[name].render(notification), sort_keys=True)

    def reconcile(self, now: datetime) -> int:
        """Enqueue the notifications a crash kept from the outbox; the incidents told.

        The evaluation commits an incident's escalation or resolution before the listener
        stores its diagnosis and notifications (together): a process killed in between leaves
        an incident that was paged at another severity, or resolved, without its message. A
        firing incident already told at some severity but not at its own is told now (as an
        escalation or de-escalation); an incident resolved within ``RECONCILE_RESOLVED`` that was
        paged but has no resolve message is resolved now, unless a later incident of its SLO and
        scope has taken over the receiver's alert. An incident never told (silenced, a flap of
        the last one, or not paged yet: the follow-up pages it) owes nothing here."""
        firing = self.store.incidents.all("firing")
        since = now - RECONCILE_RESOLVED
        resolved = [
            i
            for i in self.store.incidents.all("resolved", limit=RECONCILE_LIMIT)
            if i.resolved_at is not None and i.resolved_at >= since
        ]
        found = [*firing, *resolved]
        newest: dict[tuple[str, str], int] = {}
        for i in found:
            newest[(i.slo, i.scope)] = max(newest.get((i.slo, i.scope), 0), i.id)
        notes = self.store.incidents.notes([i.id for i in found])
        told = 0
        for incident in found:
            note = notes.get(incident.id)
            if note is None or note.diagnosis is None or note.symptom is None:
                continue
            keys = self.store.outbox.keys_like(
                incident_keys(incident.slo, incident.scope, incident.id)
            )
            sent = {tuple(key.split(":", 4)[2:4]) for _, key in keys}
            if not sent:
                continue
            if incident.state is IncidentState.FIRING:
                if (Event.TRIGGER.value, incident.severity.value) in sent:
                    continue
                ranks = [Severity(s).rank for e, s in sent if e == Event.TRIGGER.value]
                higher = incident.severity.rank > max(ranks, default=0)
                transition = Transition.ESCALATED if higher else Transition.DEESCALATED
            else:
                if any(e == Event.RESOLVE.value for e, _ in sent):
                    continue
                if newest[(incident.slo, incident.scope)] != incident.id:
                    continue
                transition = Transition.RESOLVED
            log.warning(
                "incident %s: its %s notification was never enqueued (the process stopped "
                "first); enqueued now",
                incident.id,
                transition.value,
            )
            with self.store.transaction() as tx:
                self(incident, transition, note.symptom, note.diagnosis, tx=tx)
            told += 1
        return told

    def _reopened(
        self,
        incident: Incident,
        notification: Notification,
        before: Incident | None,
        headline: Mapping[str, Any] | None,
    ) -> Notification:
        """An incident that opened within the hold-down of ``before``'s resolve (the
        lifecycle's ``Cue.REOPENED`` of that one, ``headline`` its diagnosis): the same
        ``notification`` when it is no news (the alert flapped; the receiver's alert is still
        open), else an update of the receiver's open alert."""
        state = Lifecycle(
            Phase.RESOLVED,
            headline=headline,
            severity=before.severity if before is not None else None,
        )
        facts = Facts(
            notification.at, incident.opened_at, severity=incident.severity,
            latest=notification.diagnosis,
        )  # fmt: skip
        decision = decide(state, Cue.REOPENED, facts)
        if decision.tell is None:
            return notification
        if decision.reopened is Reopen.SEVERITY:  # a ticket's resolve, then a page
            return dataclasses.replace(notification, revision=f"reopened:{incident.severity}")
        revision = f"reopened:{_revision(dict(notification.diagnosis))}"
        return dataclasses.replace(notification, revision=revision)


class Delivery:
    """The outbox-draining job."""

    def __init__(
        self, store: Store, notifiers: Mapping[str, Notifier], backoff: Backoff | None = None
    ) -> None:
        self.outbox = store.outbox
        self.notifiers = dict(notifiers)
        self.backoff = backoff or Backoff()
        # Each start or gain of the lead is a term; the first pass of a term settles every claim.
        self._term = 1
        self._settled = 0

    def on_leadership(self) -> None:
        """This replica took the lead: the next pass settles every claim left without an
        outcome (whoever led before may have died mid-send)."""
        self._term += 1

    def __call__(self, now: datetime) -> DispatchReport:
        # The first pass of a term settles every attempt left claimed (this replica has none in
        # flight: its jobs ran only while it led); later passes, those whose claim outlived its
        # lease.
        term = self._term
        resent, abandoned = recover_interrupted(
            self.outbox, self.notifiers, now, every=term != self._settled
        )
        self._settled = term
        report = deliver_due(self.outbox, self.notifiers, now, self.backoff)
        return dataclasses.replace(report, resent=resent, abandoned=abandoned)


class FollowUp:
    """The job that runs apart from the evaluation: re-diagnose firing incidents, then drain
    the outbox (when notifiers are configured); its first pass after a start, and after each
    time this replica takes the lead (``on_leadership``), first enqueues what a crash kept from
    the outbox (``Announcer.reconcile``): the leader that died may have committed an escalation
    or a resolution without its notification."""

    def __init__(self, diagnosis: DiagnosisListener, delivery: Delivery | None) -> None:
        self.diagnosis = diagnosis
        self.delivery = delivery
        self._term = 1
        self._reconciled = 0

    def on_leadership(self) -> None:
        """This replica took the lead: reconcile and settle the claims on the next pass."""
        self._term += 1
        if self.delivery is not None:
            self.delivery.on_leadership()

    def __call__(self, now: datetime) -> DispatchReport | None:
        term = self._term
        if term != self._reconciled:  # a new term: what a crash kept back
            if isinstance(self.diagnosis.announce, Announcer):
                self.diagnosis.announce.reconcile(now)
            self._reconciled = term
        self.diagnosis.refresh(now)
        return self.delivery(now) if self.delivery is not None else None


def _secret(settings: NotifierPart, name: str) -> str | None:
    """The setting ``name``, or the contents of the file its ``name_file`` setting names."""
    secret: SecretStr = getattr(settings, name)
    if value := secret.get_secret_value():
        return value.strip()
    file = f"{name}_file"
    path: str = getattr(settings, file)
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the secret file named by {variable(file)}",
            details={"error": exc.strerror},
        ) from None


def notifiers_from_settings(client: httpx.Client, settings: NotifierPart) -> dict[str, Notifier]:
    """Slack (``INFERSIGHT_SLACK_WEBHOOK_URL``), PagerDuty (``INFERSIGHT_PAGERDUTY_ROUTING_KEY``,
    ``INFERSIGHT_PAGERDUTY_URL``) and Alertmanager (``INFERSIGHT_ALERTMANAGER_URL``); each secret
    may instead come from the file named by the same variable with ``_FILE`` appended."""
    out: dict[str, Notifier] = {}
    if slack := _secret(settings, "slack_webhook_url"):
        out["slack"] = SlackNotifier(slack, client)
    if key := _secret(settings, "pagerduty_routing_key"):
        url = settings.pagerduty_url or EVENTS_URL
        out["pagerduty"] = PagerDutyNotifier(key, client, url=url)
    if am := _secret(settings, "alertmanager_url"):
        out["alertmanager"] = AlertmanagerNotifier(am, client)
    return out
