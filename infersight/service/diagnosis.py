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

The onset is found to the minute, then to ``ONSET_SLICE`` within it (a burn that began late in
a minute would otherwise share its window with up to a minute of healthy traffic). The page's
diagnosis waits for evidence: while the incident window holds less than ``MIN_EVIDENCE`` of
the burn, and for at most ``MAX_PAGE_WAIT`` after the opening, the page is held back and sent
by ``refresh`` (the follow-up job, every few seconds). Requests are stored when they finish,
so the newest seconds of a window lack the requests still in flight — most of all on an
overloaded instance, whose arrival surge then hides behind its slowness (a surge paged as
``instance_degraded`` seconds after its onset, and as ``overload`` half a minute later).

The lifecycle (``alerts.lifecycle``): the page's diagnosis is the incident's headline, with the
symptom at onset; ``refresh`` diagnoses a firing incident again every ``every`` and appends the
result to its history (``storage.incident_history``), where it replaces the headline only when
``alerts.lifecycle.judge`` raises it (the receivers then get an update of the open alert).
Once the symptom has cleared (``core.burn.recovered``: the incident is *recovering*) healthy
minutes are not diagnosed; a resolution is recorded and announced with the headline.
A failure is logged, never raised: the evaluation carries on.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

from sqlalchemy import Connection, Engine

from infersight.alerts.diagnose import Diagnosis, diagnose, step_onset
from infersight.alerts.lifecycle import Verdict, judge
from infersight.alerts.rules import RulePack, load_rules
from infersight.core.budget import is_money_alert
from infersight.core.burn import Incident, Transition
from infersight.core.errors import InfersightError, InvalidInput
from infersight.core.model_names import ModelAliases
from infersight.core.query import Selector
from infersight.core.slo import SloSpec
from infersight.core.window import Resolution, Window
from infersight.storage import incident_history, incidents, signals, slo_store

log = logging.getLogger(__name__)
#: The incident window: short, so that an early diagnosis is not diluted by healthy minutes.
DEFAULT_WINDOW: Final = timedelta(minutes=5)
#: How far before its opening an incident's window reaches: a fast burn pages within a minute
#: or two of its onset, so the minutes before that are healthy and would dilute the first
#: diagnosis (the one in the page). The window grows to ``window`` as the incident goes on.
DEFAULT_LEAD: Final = timedelta(minutes=1)
#: How far back, before an incident opened, the start of its burn is looked for.
ONSET_LOOKBACK: Final = timedelta(hours=1)
#: The shortest incident window (the first diagnosis of a burn found seconds after its onset).
MIN_WINDOW: Final = timedelta(seconds=30)
#: The reference ends this long before the burn's onset (found to the minute).
ONSET_MARGIN: Final = timedelta(minutes=1)
#: How often a firing incident is diagnosed again (``refresh``).
DEFAULT_EVERY: Final = timedelta(minutes=2)
#: The onset is refined within its minute to slices this long.
ONSET_SLICE: Final = timedelta(seconds=10)
#: How much of the burn the incident window must hold before the page's diagnosis is made.
MIN_EVIDENCE: Final = timedelta(seconds=30)
#: The longest a page waits for that evidence after the incident opened.
MAX_PAGE_WAIT: Final = timedelta(seconds=60)
#: A burn that returns after the symptom stayed cleared this long is announced as burning
#: again even when it names the headline's cause (a returning burn that names another cause or
#: instance always is). Shorter than the policy's ``resolve_after`` (5 min), which resolves an
#: incident that stays cleared longer.
REBURN_AFTER: Final = timedelta(minutes=2)
#: The onset of an incident that opens after another of its SLO and scope resolved is looked
#: for from this long before that resolution (the symptom had cleared by then).
CLEARED_BEFORE_RESOLVE: Final = timedelta(minutes=5)
_ONSETS_KEPT: Final = 10_000


class Announce(Protocol):
    """The notification router's seam: it enqueues an incident change's notifications, in
    ``connection``'s transaction when given (the one that stores the change's diagnosis)."""

    def __call__(
        self,
        incident: Incident,
        transition: Transition,
        symptom: dict[str, Any],
        diagnosis: dict[str, Any],
        connection: Connection | None = None,
    ) -> None: ...


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
    engine: Engine,
    window: Window,
    selector: Selector,
    pack: RulePack,
    reference: Window | None = None,
    aliases: ModelAliases | None = None,
) -> Diagnosis:
    """Diagnose ``window`` against ``reference`` (default: the same length just before);
    ``aliases`` match client calls' model names to the server's (the client signals)."""
    reference = reference or window.preceding()
    current = signals.window_signals(engine, window, selector, aliases)
    before = signals.window_signals(engine, reference, selector, aliases)
    errors = signals.error_types(engine, window, selector)
    errors_before = signals.error_types(engine, reference, selector) if errors else {}
    return diagnose(current, before, pack, errors, errors_before)


def burn_onset(
    engine: Engine, spec: SloSpec, opened_at: datetime, lookback: timedelta = ONSET_LOOKBACK
) -> datetime | None:
    """When ``spec`` began to burn before ``opened_at``: the minute where its bad-event ratio
    per minute steps up (``alerts.diagnose.step_onset``), or ``None`` if it does not."""
    end = Resolution.MINUTE.floor(opened_at)
    minute = timedelta(minutes=1)
    spans = [
        Window(end - k * minute, end - (k - 1) * minute) for k in range(lookback // minute, 0, -1)
    ]
    if opened_at > end:
        spans.append(Window(end, opened_at))
    starts, ratios = [], []
    with engine.connect() as connection:
        for span in spans:
            counts = slo_store.count_events(connection, spec.sli, span, spec.selector)
            if counts.total:
                starts.append(span.start)
                ratios.append(counts.bad / counts.total)
    k = step_onset(ratios)
    if k is None:
        return None
    return _refined(engine, spec, starts[k], opened_at)


def _refined(engine: Engine, spec: SloSpec, minute: datetime, opened_at: datetime) -> datetime:
    """The onset within its ``minute``: where the bad-event ratio steps up over slices of
    ``ONSET_SLICE`` from a minute before it to the minute's end (or the opening)."""
    end = min(minute + timedelta(minutes=1), opened_at)
    at, starts, ratios = minute - timedelta(minutes=1), [], []
    with engine.connect() as connection:
        while at < end:
            span = Window(at, min(at + ONSET_SLICE, end))
            counts = slo_store.count_events(connection, spec.sli, span, spec.selector, exact=True)
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
    lead: timedelta = DEFAULT_LEAD,
    onset: datetime | None = None,
) -> tuple[Window, Window]:
    """(incident window, reference window). With the burn's ``onset``: the last ``length``
    before ``at`` but not before the onset (and at least ``MIN_WINDOW``), against ``length``
    ending ``ONSET_MARGIN`` before the onset or ``length`` before the opening, whichever is
    earlier (a burn that grows slowly shows its step late). Without: the last ``length`` but
    from no earlier than ``lead`` before the incident opened, against ``length`` ending
    ``length`` before it opened. Either way re-diagnoses keep one reference, clear of the burn."""
    if onset is not None and onset <= at:
        start = max(at - length, min(onset, at - MIN_WINDOW))
        anchor = min(onset - ONSET_MARGIN, incident.opened_at - length)
        return Window(start, at), Window(anchor - length, anchor)
    start = max(at - length, incident.opened_at - lead)
    anchor = incident.opened_at - length
    return Window(start, at), Window(anchor - length, anchor)


def symptom_of(engine: Engine, incident: Incident, diagnosis: Diagnosis) -> dict[str, Any]:
    """What hurts: the SLO, its SLI, the burn rates and the worst instance's latency ratios."""
    sli: dict[str, Any] = {}
    try:
        spec = slo_store.get_slo(engine, incident.slo)
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
    """Diagnoses incidents and keeps their lifecycle: headline, history, recovering, resolved."""

    def __init__(
        self,
        engine: Engine,
        *,
        pack: RulePack | None = None,
        window: timedelta = DEFAULT_WINDOW,
        lead: timedelta = DEFAULT_LEAD,
        every: timedelta = DEFAULT_EVERY,
        announce: Announce | None = None,
        min_evidence: timedelta = MIN_EVIDENCE,
        max_page_wait: timedelta = MAX_PAGE_WAIT,
        reburn_after: timedelta = REBURN_AFTER,
        aliases: ModelAliases | None = None,
    ) -> None:
        self.engine = engine
        self.aliases = aliases
        self.pack = pack or load_rules()
        self.window = window
        self.lead = min(lead, window)
        self.every = every
        self.announce = announce
        self.min_evidence = min_evidence
        self.max_page_wait = max_page_wait
        self.reburn_after = reburn_after
        #: Onsets of incidents already paged (an onset does not move once the page is out).
        self._onsets: dict[int, datetime | None] = {}

    def on_incident(self, incident: Incident, transition: Transition) -> None:
        try:
            self._on_incident(incident, transition)
        except InfersightError:
            log.exception("diagnosis of incident %s failed", incident.id)

    def refresh(self, now: datetime) -> int:
        """The follow-up of every firing incident: its held-back page, its recovering mark, or
        a new diagnosis when the last is older than ``every``; the incidents diagnosed."""
        # Money alerts (``service.budgets``) carry their own evidence: not diagnosed here.
        firing = [
            i for i in incidents.list_incidents(self.engine, "firing") if not is_money_alert(i.slo)
        ]
        kept = signals.notes(self.engine, [i.id for i in firing])
        last = incident_history.latest(self.engine, [i.id for i in firing])
        done = 0
        for incident in firing:
            try:
                done += self._follow_up(incident, kept.get(incident.id), last.get(incident.id), now)
            except InfersightError:
                log.exception("re-diagnosis of incident %s failed", incident.id)
        return done

    # -- steps -------------------------------------------------------------------------------

    def _on_incident(self, incident: Incident, transition: Transition) -> None:
        note = signals.notes(self.engine, [incident.id]).get(incident.id)
        headline = note.diagnosis if note is not None else None
        if transition is Transition.RESOLVED:
            self._resolved(incident, note)
        elif headline is None or note is None or note.symptom is None:
            self._page(incident, incident.updated_at)  # opened (or escalated before its page)
        else:
            # The new diagnosis and the change's notifications commit together.
            with self.engine.begin() as connection:
                shown: dict[str, Any] | None = headline
                if incident.recovering_since is None:  # a recovering one has nothing new to show
                    last = incident_history.latest(self.engine, [incident.id]).get(incident.id)
                    if last is not None and last.verdict == "recovering":
                        # Escalated by a burn that came back: told with that burn's diagnosis.
                        shown = self._burning_again(incident, note, last.at, incident.updated_at,
                                                    wait=False, announce=False,
                                                    bind=connection)  # fmt: skip
                    else:
                        _, shown = self._evaluate(
                            incident, headline, note.symptom, incident.updated_at, connection
                        )
                if self.announce is not None:
                    shown = shown or headline
                    self.announce(incident, transition, note.symptom, shown, connection=connection)

    def _follow_up(
        self,
        incident: Incident,
        note: signals.IncidentNote | None,
        last: incident_history.Entry | None,
        now: datetime,
    ) -> int:
        if note is None or note.diagnosis is None or note.symptom is None:
            return int(self._page(incident, now))
        cause = str(note.diagnosis.get("cause") or "unknown")
        if incident.recovering_since is not None:
            if last is None or last.verdict != "recovering":
                since = max(incident.recovering_since, last.at if last else now)
                self._step(incident, since, "recovering", cause)
            return 0  # the symptom cleared: healthy minutes are not diagnosed
        if last is not None and last.verdict == "recovering":
            with self.engine.begin() as connection:
                again = self._burning_again(incident, note, last.at, now, bind=connection)
            return int(again is not None)
        if note.diagnosed_at is not None and now - note.diagnosed_at < self.every:
            return 0
        with self.engine.begin() as connection:
            verdict, diagnosis = self._evaluate(
                incident, note.diagnosis, note.symptom, now, connection
            )
            if verdict is Verdict.RAISED and self.announce is not None:
                # The open alert is updated (same dedup key), not paged again.
                self.announce(
                    incident, Transition.NONE, note.symptom, diagnosis, connection=connection
                )
        return 1

    def _page(self, incident: Incident, at: datetime) -> bool:
        """The onset diagnosis (the headline) and the page, unless the incident window holds
        too little of the burn yet and the page may still wait; whether it was made."""
        onset = self._onset(incident)
        current, reference = windows_for(incident, at, self.window, self.lead, onset)
        young = at - (onset or current.start) < self.min_evidence
        if young and at - incident.opened_at < self.max_page_wait:
            log.info("incident %s: the page waits for evidence", incident.id)
            return False
        symptom, diagnosis = self._run(incident, current, reference)
        fresh = incidents.get_incident(self.engine, incident.id)
        # The onset and the page commit together: a crash before the commit leaves the incident
        # undiagnosed, and the follow-up job pages it again (one transaction, never half).
        with self.engine.begin() as connection:
            signals.save_diagnosis(connection, incident.id, symptom, diagnosis, at)
            incident_history.append(
                connection, incident.id, at, "onset", diagnosis["cause"], diagnosis
            )
            if self.announce is not None:
                self.announce(fresh, Transition.OPENED, symptom, diagnosis, connection=connection)
        if len(self._onsets) >= _ONSETS_KEPT:
            self._onsets.clear()
        self._onsets[incident.id] = onset
        return True

    def _evaluate(
        self,
        incident: Incident,
        headline: dict[str, Any],
        symptom: dict[str, Any],
        at: datetime,
        bind: Engine | Connection,
    ) -> tuple[Verdict, dict[str, Any]]:
        """Diagnose again, append to the history (through ``bind``); the headline changes only
        when raised."""
        current, reference = self._windows(incident, at)
        _, diagnosis = self._run(incident, current, reference)
        return self._judged(incident, headline, symptom, diagnosis, at, bind)

    def _judged(
        self,
        incident: Incident,
        headline: dict[str, Any],
        symptom: dict[str, Any],
        diagnosis: dict[str, Any],
        at: datetime,
        bind: Engine | Connection,
    ) -> tuple[Verdict, dict[str, Any]]:
        previous = self._last_diagnosis(incident.id)
        verdict = judge(headline, diagnosis, previous)
        incident_history.append(bind, incident.id, at, verdict.value, diagnosis["cause"], diagnosis)
        kept = diagnosis if verdict is Verdict.RAISED else headline
        signals.save_diagnosis(bind, incident.id, symptom, kept, at)
        return verdict, kept

    def _burning_again(
        self,
        incident: Incident,
        note: signals.IncidentNote,
        cleared_at: datetime,
        now: datetime,
        *,
        wait: bool = True,
        announce: bool = True,
        bind: Connection,
    ) -> dict[str, Any] | None:
        """The symptom came back: diagnose the new burn from its own onset (found since the
        symptom cleared) against the incident's reference and append it to the history. It is
        news — an update of the open alert for the receivers, not a new page — when it names
        another cause or instance than the headline, or began after the symptom had stayed
        cleared for ``reburn_after``; the same fault flapping is not. The new burn's diagnosis,
        or ``None`` while (``wait``) the window holds less than ``min_evidence`` of it."""
        assert note.diagnosis is not None
        assert note.symptom is not None
        onset = None
        try:
            spec = slo_store.get_slo(self.engine, incident.slo)
            # Since the symptom cleared (and a minute before, for the two levels' first).
            lookback = now - cleared_at + timedelta(minutes=1)
            onset = burn_onset(self.engine, spec, now, lookback=lookback)
        except InfersightError:
            pass  # a deleted SLO: the last window
        if wait and onset is not None and now - onset < self.min_evidence:
            return None  # as a page does, wait until the window holds some of the new burn
        _, reference = self._windows(incident, now)
        start = max(now - self.window, min(onset or now - self.window, now - MIN_WINDOW))
        _, diagnosis = self._run(incident, Window(start, now), reference)
        diagnosis["burning_again_at"] = _iso(onset or start)
        # Written after the reads, so that SQLite's write lock is held only for the writes.
        self._step(incident, now, "burning", str(note.diagnosis.get("cause") or "unknown"), bind)
        self._judged(incident, note.diagnosis, note.symptom, diagnosis, now, bind)
        elsewhere = any(diagnosis.get(k) != note.diagnosis.get(k) for k in ("cause", "instance"))
        quiet = (onset or now) - cleared_at >= self.reburn_after
        log.info("incident %s is burning again: %s", incident.id, diagnosis["cause"])
        if announce and (elsewhere or quiet) and self.announce is not None:
            self.announce(incident, Transition.NONE, note.symptom, diagnosis, connection=bind)
        return diagnosis

    def _resolved(self, incident: Incident, note: signals.IncidentNote | None) -> None:
        at = incident.resolved_at or incident.updated_at
        if note is None or note.diagnosis is None or note.symptom is None:
            # Resolved before its page went out: diagnose the burn it had, page nobody.
            current, reference = self._windows(incident, at)
            symptom, diagnosis = self._run(incident, current, reference)
            signals.save_diagnosis(self.engine, incident.id, symptom, diagnosis, at)
            incident_history.append(
                self.engine, incident.id, at, "onset", diagnosis["cause"], diagnosis
            )
            self._step(incident, at, "resolved", diagnosis["cause"])
            return
        with self.engine.begin() as connection:  # the resolution and its notifications
            cause = str(note.diagnosis.get("cause") or "unknown")
            self._step(incident, at, "resolved", cause, connection)
            if self.announce is not None:
                self.announce(
                    incident, Transition.RESOLVED, note.symptom, note.diagnosis,
                    connection=connection,
                )  # fmt: skip

    # -- helpers -----------------------------------------------------------------------------

    def _step(
        self,
        incident: Incident,
        at: datetime,
        verdict: str,
        cause: str,
        bind: Engine | Connection | None = None,
    ) -> None:
        incident_history.append(bind or self.engine, incident.id, at, verdict, cause)

    def _last_diagnosis(self, incident_id: int) -> dict[str, Any] | None:
        entry = incident_history.last_diagnosis(self.engine, incident_id)
        return entry.diagnosis if entry is not None else None

    def _windows(self, incident: Incident, at: datetime) -> tuple[Window, Window]:
        return windows_for(incident, at, self.window, self.lead, self._onset(incident))

    def _run(
        self, incident: Incident, current: Window, reference: Window
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        result = diagnose_window(
            self.engine, current, selector_of(incident.scope), self.pack, reference, self.aliases
        )
        symptom = symptom_of(self.engine, incident, result)
        diagnosis = {
            **result.to_dict(),
            "window": {"start": _iso(current.start), "end": _iso(current.end)},
            "reference": {"start": _iso(reference.start), "end": _iso(reference.end)},
        }
        return symptom, diagnosis

    def _onset(self, incident: Incident) -> datetime | None:
        if incident.id in self._onsets:
            return self._onsets[incident.id]
        try:
            spec = slo_store.get_slo(self.engine, incident.slo)
        except InfersightError:
            return None  # a deleted SLO: its incidents keep the default windows
        # Not before the last incident of this SLO and scope cleared: the burn before that was
        # its burn (a two-level fit over both would find the older step).
        lookback = ONSET_LOOKBACK
        before = incidents.previous(self.engine, incident)
        if before is not None and before.resolved_at is not None:
            since = incident.opened_at - before.resolved_at + CLEARED_BEFORE_RESOLVE
            lookback = min(lookback, since)
        return burn_onset(self.engine, spec, incident.opened_at, lookback)


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")
