"""The diagnosis seam: store signals → ``alerts.diagnose`` → stored diagnosis → outbox.

``diagnose_window`` answers ``POST /api/v1/diagnose`` for any window. ``DiagnosisListener`` is
the ``IncidentListener`` the evaluation job calls on every incident change: it diagnoses the
incident, stores symptom and diagnosis with the incident, and hands the result to an optional
``announce`` callback (the notification router).

Which windows: the burn's onset is found first (``burn_onset``: where the SLO's bad-event
ratio per minute steps up, over the hour before the incident opened). The incident window is
the last ``window`` but not before the onset, so the first diagnosis — the one in the page,
often seconds after the onset at 99.9 % — is not diluted by healthy minutes; the reference is
the same length ending a minute before the onset (or, if earlier, ``window`` before the
opening), so a slow burn that opened a ticket long after its onset is not compared with
itself. Without an onset (no step, a deleted SLO) the window starts ``lead`` before the
opening and the reference ends ``window`` before it.

``refresh`` diagnoses firing incidents again (on the delivery job's tick), so the stored
diagnosis follows the incident while it fires; when the top cause changes, the receivers get
an update of the open alert.
A failure is logged, never raised: the evaluation carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Engine

from alerts.diagnose import Diagnosis, diagnose, step_onset
from alerts.rules import RulePack, load_rules
from core.burn import Incident, Transition
from core.errors import InfersightError, InvalidInput
from core.query import Selector
from core.slo import SloSpec
from core.window import Resolution, Window
from storage import incidents, signals, slo_store

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
Announce = Callable[[Incident, Transition, dict[str, Any], dict[str, Any]], None]


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
) -> Diagnosis:
    """Diagnose ``window`` against ``reference`` (default: the same length just before)."""
    reference = reference or window.preceding()
    current = signals.window_signals(engine, window, selector)
    before = signals.window_signals(engine, reference, selector)
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
    return None if k is None else starts[k]


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
    """Diagnoses every incident change and stores the outcome with the incident."""

    def __init__(
        self,
        engine: Engine,
        *,
        pack: RulePack | None = None,
        window: timedelta = DEFAULT_WINDOW,
        lead: timedelta = DEFAULT_LEAD,
        every: timedelta = DEFAULT_EVERY,
        announce: Announce | None = None,
    ) -> None:
        self.engine = engine
        self.pack = pack or load_rules()
        self.window = window
        self.lead = min(lead, window)
        self.every = every
        self.announce = announce

    def refresh(self, now: datetime) -> int:
        """Diagnose again every firing incident whose diagnosis is older than ``every``."""
        firing = incidents.list_incidents(self.engine, "firing")
        kept = signals.notes(self.engine, [i.id for i in firing])
        done = 0
        for incident in firing:
            note = kept.get(incident.id)
            diagnosed_at = note.diagnosed_at if note is not None else None
            if diagnosed_at is not None and now - diagnosed_at < self.every:
                continue
            try:
                symptom, diagnosis = self._diagnose_at(incident, now)
            except InfersightError:
                log.exception("re-diagnosis of incident %s failed", incident.id)
                continue
            done += 1
            before = note.diagnosis.get("cause") if note and note.diagnosis else None
            cause = diagnosis["cause"]
            if self.announce is not None and cause not in (before, "unknown"):
                # The open alert is updated (same dedup key), not paged again; a diagnosis that
                # fades to ``unknown`` (the signals went quiet) is stored but not announced.
                self.announce(incident, Transition.NONE, symptom, diagnosis)
        return done

    def on_incident(self, incident: Incident, transition: Transition) -> None:
        try:
            symptom, diagnosis = self._diagnose(incident, transition)
        except InfersightError:
            log.exception("diagnosis of incident %s failed", incident.id)
            return
        if self.announce is not None:
            self.announce(incident, transition, symptom, diagnosis)

    def _diagnose(
        self, incident: Incident, transition: Transition
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if transition is Transition.RESOLVED:
            kept = signals.notes(self.engine, [incident.id]).get(incident.id)
            if kept is not None and kept.diagnosis is not None and kept.symptom is not None:
                return kept.symptom, kept.diagnosis
        return self._diagnose_at(incident, incident.resolved_at or incident.updated_at)

    def _diagnose_at(
        self, incident: Incident, at: datetime
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        current, reference = windows_for(
            incident, at, self.window, self.lead, self._onset(incident)
        )
        result = diagnose_window(
            self.engine, current, selector_of(incident.scope), self.pack, reference
        )
        symptom = symptom_of(self.engine, incident, result)
        diagnosis = {
            **result.to_dict(),
            "window": {"start": _iso(current.start), "end": _iso(current.end)},
            "reference": {"start": _iso(reference.start), "end": _iso(reference.end)},
        }
        signals.save_diagnosis(self.engine, incident.id, symptom, diagnosis, at)
        return symptom, diagnosis

    def _onset(self, incident: Incident) -> datetime | None:
        try:
            spec = slo_store.get_slo(self.engine, incident.slo)
        except InfersightError:
            return None  # a deleted SLO: its incidents keep the default windows
        return burn_onset(self.engine, spec, incident.opened_at)


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")
