"""The diagnosis seam: store signals → ``alerts.diagnose`` → stored diagnosis → outbox.

``diagnose_window`` answers ``POST /api/v1/diagnose`` for any window. ``DiagnosisListener`` is
the ``IncidentListener`` the evaluation job calls on every incident change: it diagnoses the
incident, stores symptom and diagnosis with the incident, and hands the result to an optional
``announce`` callback (the notification router) in the same transaction: a diagnosis is never
stored without the notifications it owes, so a crash cannot lose a page (an incident left
undiagnosed is paged by the next follow-up).

Which windows: the burn's onset is found first (``burn_onset``: where the SLO's bad-event
ratio per minute steps up, over the hour before the incident opened). The incident window is
the last ``window`` but not before the onset, so the first diagnosis — the one in the page,
often seconds after the onset at 99.9 % — is not diluted by healthy minutes; the reference is
the same length ending a minute before the onset (or, if earlier, ``window`` before the
opening), so a slow burn that opened a ticket long after its onset is not compared with
itself. Without an onset (no step, a deleted SLO) the window starts ``lead`` before the
opening and the reference ends ``window`` before it.

The onset is found to the minute, then to ``onset_slice`` within it (a burn that began late in
a minute would otherwise share its window with up to a minute of healthy traffic). The page's
diagnosis waits for evidence: while the incident window holds less than ``min_evidence`` of
the burn, and for at most ``max_page_wait`` after the opening, the page is held back and sent
by ``refresh`` (the follow-up job, every few seconds). Requests are stored when they finish,
so the newest seconds of a window lack the requests still in flight — most of all on an
overloaded instance, whose arrival surge then hides behind its slowness (a surge paged as
``instance_degraded`` seconds after its onset, and as ``overload`` half a minute later).

When to page, update, hold back or resolve is ``alerts.lifecycle.decide``, one table (its
docstring shows it; the constants are its ``Tuning``): the page's diagnosis is the incident's
headline, with the symptom at onset; ``refresh`` diagnoses a firing incident again every
``every`` and appends the result to its history (the store's ``history``), where it
replaces the headline only when ``alerts.lifecycle.judge`` raises it. The listener reads the
incident's evidence in one store call (``IncidentStore.evidence``: the incident as it is now,
its note, newest history entry and newest diagnosis, the last incident of its SLO and scope,
the SLO), computes what the deciding row asks for (the onset, a returning burn's onset, a
diagnosis: a recovering incident is never diagnosed), and applies the decision in one store
call (``IncidentStore.apply``: history, headline and, from an ``announce`` that ``Plans``, the
notification's outbox messages, in one transaction; another ``announce`` is called in it).
A follow-up pass first reads every firing incident's note and newest history entry at once
(one statement each), and reads an incident's evidence only where the lifecycle then has
something to gather or do: an incident diagnosed lately, or still recovering, costs no read
of its own. A failure is logged, never raised: the evaluation carries on.
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from infersight.alerts.diagnose import Diagnosis, diagnose, step_onset
from infersight.alerts.lifecycle import (
    DEFAULTS,
    Cue,
    Decision,
    Facts,
    Lifecycle,
    Need,
    Phase,
    Told,
    decide,
    incident_windows,
)
from infersight.alerts.rules import RulePack, load_rules
from infersight.core.budget import is_money_alert
from infersight.core.burn import Incident, Transition
from infersight.core.errors import InfersightError, InvalidInput
from infersight.core.incident_writes import Announcement, IncidentWrites
from infersight.core.model_names import ModelAliases
from infersight.core.query import Selector
from infersight.core.slo import SloSpec
from infersight.core.window import Resolution, Window
from infersight.storage.seam import Evidence, Store

if TYPE_CHECKING:
    from infersight.storage.seam import Entry, IncidentNote

log = logging.getLogger(__name__)
_ONSETS_KEPT: Final = 10_000


class Announce(Protocol):
    """The notification router's seam: it enqueues the notifications of what is ``told`` (an
    incident's change, or ``Notice.UPDATE``: news of its open alert), in ``tx``'s transaction
    when given (``store.transaction()``: the one that stores the change's diagnosis)."""

    def __call__(
        self,
        incident: Incident,
        told: Told,
        symptom: dict[str, Any],
        diagnosis: dict[str, Any],
        tx: Store | None = None,
    ) -> None: ...


@runtime_checkable
class Plans(Protocol):
    """An ``Announce`` that also plans its messages without writing them (``Announcer``): the
    listener hands the plan to the store with the decision's writes (``IncidentStore.apply``),
    one call."""

    def plan(
        self, incident: Incident, told: Told, symptom: dict[str, Any], diagnosis: dict[str, Any]
    ) -> Announcement: ...


def selector_of(scope: str) -> Selector:
    """The inverse of ``core.slo.scope_of``: ``model=a,tenant=b`` (or ``*``) → ``Selector``."""
    if scope in ("", "*"):
        return Selector()
    values: dict[str, str] = {}
    for part in scope.split(","):
        name, sep, value = part.partition("=")
        if not sep or name not in ("model", "instance", "tenant", "priority"):
            raise InvalidInput(f"cannot read scope {scope!r}")
        values[name] = value
    return Selector(**values)


def diagnose_window(
    store: Store,
    window: Window,
    selector: Selector,
    pack: RulePack,
    reference: Window | None = None,
    aliases: ModelAliases | None = None,
) -> Diagnosis:
    """Diagnose ``window`` against ``reference`` (default: the same length just before);
    ``aliases`` match client calls' model names to the server's (the client signals)."""
    reference = reference or window.preceding()
    current = store.requests.window_signals(window, selector, aliases)
    before = store.requests.window_signals(reference, selector, aliases)
    errors = store.requests.error_types(window, selector)
    errors_before = store.requests.error_types(reference, selector) if errors else {}
    return diagnose(current, before, pack, errors, errors_before)


def burn_onset(
    store: Store,
    spec: SloSpec,
    opened_at: datetime,
    lookback: timedelta = DEFAULTS.onset_lookback,
    slice_length: timedelta = DEFAULTS.onset_slice,
) -> datetime | None:
    """When ``spec`` began to burn before ``opened_at``: the minute where its bad-event ratio
    per minute steps up (``alerts.diagnose.step_onset``), refined to ``slice_length`` within it,
    or ``None`` if it does not."""
    end = Resolution.MINUTE.floor(opened_at)
    minute = timedelta(minutes=1)
    spans = [
        Window(end - k * minute, end - (k - 1) * minute) for k in range(lookback // minute, 0, -1)
    ]
    if opened_at > end:
        spans.append(Window(end, opened_at))
    starts, ratios = [], []
    with store.reading() as reader:
        for span in spans:
            counts = reader.events.count(spec.sli, span, spec.selector)
            if counts.total:
                starts.append(span.start)
                ratios.append(counts.bad / counts.total)
    k = step_onset(ratios)
    if k is None:
        return None
    return _refined(store, spec, starts[k], opened_at, slice_length)


def _refined(
    store: Store, spec: SloSpec, minute: datetime, opened_at: datetime, length: timedelta
) -> datetime:
    """The onset within its ``minute``: where the bad-event ratio steps up over slices of
    ``length`` from a minute before it to the minute's end (or the opening)."""
    end = min(minute + timedelta(minutes=1), opened_at)
    at, starts, ratios = minute - timedelta(minutes=1), [], []
    with store.reading() as reader:
        while at < end:
            span = Window(at, min(at + length, end))
            counts = reader.events.count(spec.sli, span, spec.selector, exact=True)
            if counts.total:
                starts.append(span.start)
                ratios.append(counts.bad / counts.total)
            at = span.end
    k = step_onset(ratios)
    return minute if k is None else starts[k]


def windows_for(
    incident: Incident,
    at: datetime,
    length: timedelta,
    lead: timedelta = DEFAULTS.lead,
    onset: datetime | None = None,
) -> tuple[Window, Window]:
    """(incident window, reference window) of ``incident`` at ``at``, ``length`` long
    (``alerts.lifecycle.incident_windows``)."""
    tuning = dataclasses.replace(DEFAULTS, window=length, lead=lead)
    return incident_windows(incident.opened_at, at, onset, tuning)


def symptom_of(store: Store, incident: Incident, diagnosis: Diagnosis) -> dict[str, Any]:
    """What hurts: the SLO, its SLI, the burn rates and the worst instance's latency ratios."""
    sli: dict[str, Any] = {}
    try:
        spec = store.slos.get(incident.slo)
        sli = {"kind": spec.sli.kind.value, "metric": spec.sli.metric}
        sli["threshold_s"] = spec.sli.threshold_s
        if spec.sli.targets:  # goodput: the targets that hold together, and what an event is
            sli["targets"] = dict(spec.sli.targets)
            sli["per"] = spec.sli.per.value if spec.sli.per else None
    except InfersightError:
        pass  # a deleted SLO still has incidents to describe
    return {
        "slo": incident.slo,
        "scope": incident.scope,
        "severity": incident.severity.value,
        "sli": sli or None,
        "burn_rates": dict(incident.burn_rates),
        "peak_burn_rate": incident.peak_burn_rate,
        "signals": [e.to_dict() for e in diagnosis.symptoms],
    }


class DiagnosisListener:
    """Gathers what ``alerts.lifecycle.decide`` asks about an incident and applies what it
    decides: history, headline and notification, in one transaction."""

    def __init__(
        self,
        store: Store,
        *,
        pack: RulePack | None = None,
        window: timedelta = DEFAULTS.window,
        lead: timedelta = DEFAULTS.lead,
        every: timedelta = DEFAULTS.every,
        announce: Announce | None = None,
        min_evidence: timedelta = DEFAULTS.min_evidence,
        max_page_wait: timedelta = DEFAULTS.max_page_wait,
        reburn_after: timedelta = DEFAULTS.reburn_after,
        aliases: ModelAliases | None = None,
    ) -> None:
        self.store = store
        self.aliases = aliases
        self.pack = pack or load_rules()
        self.tuning = dataclasses.replace(
            DEFAULTS, window=window, lead=min(lead, window), every=every,
            min_evidence=min_evidence, max_page_wait=max_page_wait, reburn_after=reburn_after,
        )  # fmt: skip
        self.announce = announce
        #: Onsets of incidents already paged (an onset does not move once the page is out).
        self._onsets: dict[int, datetime | None] = {}

    def on_incident(self, incident: Incident, transition: Transition) -> None:
        try:
            evidence = self.store.incidents.evidence(incident.id)
            at = incident.resolved_at or incident.updated_at
            self._follow(incident, Cue.of(transition), evidence, at)
        except InfersightError:
            log.exception("diagnosis of incident %s failed", incident.id)

    def refresh(self, now: datetime) -> int:
        """The follow-up of every firing incident (``Cue.PASS``): its held-back page, its
        recovering mark, or a new diagnosis when the last is older than ``every``; the
        incidents diagnosed."""
        # Money alerts (``service.budgets``) carry their own evidence: not diagnosed here.
        firing = [i for i in self.store.incidents.all("firing") if not is_money_alert(i.slo)]
        if not firing:
            return 0
        # Most passes find most incidents diagnosed lately (or still recovering): their notes
        # and newest entries, read for all of them at once, say so without an evidence read.
        ids = [i.id for i in firing]
        try:
            notes, lasts = self.store.incidents.notes(ids), self.store.history.latest(ids)
        except InfersightError:
            log.exception("re-diagnosis of the firing incidents failed")
            return 0
        done = 0
        for incident in firing:
            state = _lifecycle(notes.get(incident.id), lasts.get(incident.id))
            if not self._busy(incident, state, now):
                continue
            try:
                evidence = self.store.incidents.evidence(incident.id)
                done += self._follow(incident, Cue.PASS, evidence, now)
            except InfersightError:
                log.exception("re-diagnosis of incident %s failed", incident.id)
        return done

    def _follow(
        self,
        incident: Incident,
        cue: Cue,
        evidence: Evidence,
        at: datetime,
    ) -> int:
        """Decide (gathering what the deciding row asks for from ``evidence``, and diagnosing
        when it asks for a diagnosis) and apply; 1 if it diagnosed."""
        note = evidence.note
        state = _lifecycle(note, evidence.last)
        facts = _facts(incident, at)
        decision, facts, symptom = self._decide(incident, evidence, state, cue, facts)
        if state.phase is Phase.UNPAGED and decision.phase is Phase.UNPAGED:
            log.info("incident %s: the page waits for evidence", incident.id)
        if decision.acts:
            stored = symptom if decision.renewed or note is None else note.symptom
            self._apply(incident, evidence, decision, stored or {})
        if state.phase is Phase.UNPAGED and decision.phase is Phase.FIRING:
            if len(self._onsets) >= _ONSETS_KEPT:
                self._onsets.clear()
            self._onsets[incident.id] = facts.onset
        return int(Need.DIAGNOSIS in facts.found)

    def _busy(self, incident: Incident, state: Lifecycle, at: datetime) -> bool:
        """Whether a pass at ``at`` has anything to gather or do for ``incident`` in ``state``
        (else its evidence is not read: the lifecycle's answer would be to do nothing)."""
        decision = decide(state, Cue.PASS, _facts(incident, at), self.tuning)
        return decision.need is not None or decision.acts

    def _decide(
        self, incident: Incident, evidence: Evidence, state: Lifecycle, cue: Cue, facts: Facts
    ) -> tuple[Decision, Facts, dict[str, Any]]:
        """Ask the lifecycle, gathering each fact its deciding row asks for; the decision, the
        facts gathered and the symptom of the diagnosis made (empty without one)."""
        symptom: dict[str, Any] = {}
        for _ in range(len(Need) + 1):
            decision = decide(state, cue, facts, self.tuning)
            if decision.need is None:
                return decision, facts, symptom
            if decision.need is Need.ONSET:
                facts = facts.given(Need.ONSET, onset=self._onset(incident, evidence))
            elif decision.need is Need.RETURN:
                facts = facts.given(
                    Need.RETURN,
                    returned_at=self._returned(evidence, state, at=facts.at),
                )
            else:
                assert decision.windows is not None
                symptom, diagnosis = self._run(incident, *decision.windows)
                previous = evidence.prior
                facts = facts.given(
                    Need.DIAGNOSIS,
                    latest=diagnosis,
                    previous=previous.diagnosis if previous is not None else None,
                )
        raise AssertionError(f"the lifecycle kept asking ({decision})")

    def _apply(
        self, incident: Incident, evidence: Evidence, decision: Decision, symptom: dict[str, Any]
    ) -> None:
        """The decision's history, headline and notification commit together (one store call,
        ``IncidentStore.apply``, with an ``Announce`` that ``Plans``): a crash before the commit
        leaves the incident as it was, and the next pass decides again."""
        told = incident
        if decision.tell is Transition.OPENED:  # the page: the incident as it is now
            told = evidence.incident
        if any(entry.verdict == "burning" for entry in decision.history):
            log.info("incident %s is burning again: %s", incident.id,
                     (decision.history[-1].diagnosis or {}).get("cause"))  # fmt: skip
        headline = None
        if decision.headline is not None:
            assert decision.at is not None
            headline = (symptom, decision.headline, decision.at)
        about = dict(decision.about or {})
        tell, announce = decision.tell, self.announce
        announcement = None
        if tell is not None and isinstance(announce, Plans):
            announcement, announce = announce.plan(told, tell, symptom, about), None
        with self.store.transaction() as tx:
            tx.incidents.apply(
                incident.id, IncidentWrites(decision.history, headline, announcement)
            )
            if tell is not None and announce is not None:
                announce(told, tell, symptom, about, tx=tx)

    # -- evidence ----------------------------------------------------------------------------

    def _run(
        self, incident: Incident, current: Window, reference: Window
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        result = diagnose_window(
            self.store, current, selector_of(incident.scope), self.pack, reference, self.aliases
        )
        symptom = symptom_of(self.store, incident, result)
        diagnosis = {
            **result.to_dict(),
            "window": {"start": _iso(current.start), "end": _iso(current.end)},
            "reference": {"start": _iso(reference.start), "end": _iso(reference.end)},
        }
        return symptom, diagnosis

    def _onset(self, incident: Incident, evidence: Evidence) -> datetime | None:
        if incident.id in self._onsets:
            return self._onsets[incident.id]
        spec = evidence.spec
        if spec is None:
            return None  # a deleted SLO: its incidents keep the default windows
        # Not before the last incident of this SLO and scope cleared: the burn before that was
        # its burn (a two-level fit over both would find the older step).
        lookback = self.tuning.onset_lookback
        before = evidence.before
        if before is not None and before.resolved_at is not None:
            since = incident.opened_at - before.resolved_at + self.tuning.cleared_before_resolve
            lookback = min(lookback, since)
        return burn_onset(self.store, spec, incident.opened_at, lookback, self.tuning.onset_slice)

    def _returned(self, evidence: Evidence, state: Lifecycle, at: datetime) -> datetime | None:
        """The onset of the burn that came back: looked for since the symptom cleared (and a
        minute before, for the two levels' first)."""
        lookback = at - (state.last_at or at) + timedelta(minutes=1)
        if evidence.spec is None:
            return None  # a deleted SLO: the last window
        try:
            return burn_onset(self.store, evidence.spec, at, lookback, self.tuning.onset_slice)
        except InfersightError:
            return None


def _lifecycle(note: IncidentNote | None, last: Entry | None) -> Lifecycle:
    """An incident's lifecycle from its stored note and newest history entry."""
    return Lifecycle.of(
        note.diagnosis if note is not None else None,
        note.symptom if note is not None else None,
        note.diagnosed_at if note is not None else None,
        (last.verdict, last.at) if last is not None else None,
    )


def _facts(incident: Incident, at: datetime) -> Facts:
    return Facts(at, incident.opened_at, incident.recovering_since, incident.severity)


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")
