"""The diagnosis seam: store signals → ``alerts.diagnose`` → stored diagnosis → outbox.

``diagnose_window`` answers ``POST /api/v1/diagnose`` for any window. ``DiagnosisListener`` is
the ``IncidentListener`` the evaluation job calls on every incident change: it diagnoses the
incident (the last ``window`` before the change against the same length before the incident
opened), stores symptom and diagnosis with the incident, and hands the result to an optional
``announce`` callback (the notification router). ``refresh`` diagnoses firing incidents again
(on the delivery job's tick), so the stored diagnosis follows the incident while it fires;
when the top cause changes, the receivers get an update of the open alert.
A failure is logged, never raised: the evaluation carries on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Engine

from alerts.diagnose import Diagnosis, diagnose
from alerts.rules import RulePack, load_rules
from core.burn import Incident, Transition
from core.errors import InfersightError, InvalidInput
from core.query import Selector
from core.window import Window
from storage import incidents, signals, slo_store

log = logging.getLogger(__name__)
#: The incident window: short, so that an early diagnosis is not diluted by healthy minutes.
DEFAULT_WINDOW: Final = timedelta(minutes=5)
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
    return diagnose(current, before, pack)


def windows_for(incident: Incident, at: datetime, length: timedelta) -> tuple[Window, Window]:
    """(incident window, reference window): the last ``length`` before ``at``, and the same
    length ending ``length`` before the incident opened (so re-diagnoses keep one reference)."""
    current = Window(at - length, at)
    anchor = incident.opened_at - length
    return current, Window(anchor - length, anchor)


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
        every: timedelta = DEFAULT_EVERY,
        announce: Announce | None = None,
    ) -> None:
        self.engine = engine
        self.pack = pack or load_rules()
        self.window = window
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
        current, reference = windows_for(incident, at, self.window)
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


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")
