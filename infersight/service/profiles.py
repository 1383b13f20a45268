"""Profiles of serving processes: requested by hand or for an incident, used by its diagnosis.

``request_profile`` is the manual request (``POST /api/v1/profiles``, ``infersight profile``):
bounded (``core.profile.check_bounds``), one open profile per instance at a time (a second is
``Conflict``). The instance's sidecar claims it (``storage.profiles``), samples its serving
process and stores the summary or why there is none.

``ProfileTrigger`` is the automatic side, run by the follow-up job after the re-diagnoses
(``ProfileFollowUp``): for each firing incident whose headline blames one instance's host
(``alerts.diagnose.host_side``: ``host_bound``, ``preprocessing_slow``, a queue that grows while
the GPU idles) it requests one profile of that instance — not while one is open for it, and
not within ``min_interval`` of the last (a flapping incident is not profiled every pass). Once
the profile is back, the headline gains what it says (``alerts.diagnose.with_profile``: the
host-side limit it names, "62 % of samples in the tokenizer", with a confidence from the
share, as evidence) and, when the notifiers are configured, the open alert is updated with it
(the page itself went out before the profile existed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Engine

from infersight.alerts.diagnose import host_side, with_profile
from infersight.core.burn import Transition
from infersight.core.errors import Conflict, InfersightError
from infersight.core.profile import DEFAULT_RATE, DEFAULT_SECONDS, check_bounds
from infersight.service.diagnosis import Announce
from infersight.storage import incidents, signals
from infersight.storage import profiles as store
from infersight.storage.profiles import Profile

log = logging.getLogger(__name__)

#: The least time between two automatic profiles of one instance.
MIN_INTERVAL: Final = timedelta(minutes=10)


def request_profile(
    engine: Engine,
    instance: str,
    at: datetime,
    *,
    seconds: float = DEFAULT_SECONDS,
    rate: int = DEFAULT_RATE,
    requested_by: str = "",
    incident_id: int | None = None,
) -> Profile:
    """A pending manual profile of ``instance``; ``Conflict`` while one is open for it."""
    seconds, rate = check_bounds(seconds, rate)
    with engine.begin() as connection:
        store.expire_stale(connection, at, instance)
    current = store.open_or_recent(engine, instance, at)
    if current is not None and current.open:
        raise Conflict(
            f"a profile of {instance} is already {current.state.value} (id {current.id})",
            details={"id": current.id},
        )
    profile_id = store.insert_request(
        engine, instance, seconds, rate, at, reason="manual",
        incident_id=incident_id, requested_by=requested_by,
    )  # fmt: skip
    return store.get(engine, profile_id)


class ProfileTrigger:
    """Requests profiles for host-side incidents and folds their results into the diagnosis."""

    def __init__(
        self,
        engine: Engine,
        *,
        announce: Announce | None = None,
        seconds: float = DEFAULT_SECONDS,
        rate: int = DEFAULT_RATE,
        min_interval: timedelta = MIN_INTERVAL,
    ) -> None:
        self.engine = engine
        self.announce = announce
        self.seconds, self.rate = check_bounds(seconds, rate)
        self.min_interval = min_interval

    def __call__(self, now: datetime) -> int:
        """One pass; the profiles requested or applied."""
        firing = incidents.list_incidents(self.engine, "firing")
        if not firing:
            return 0
        kept = signals.notes(self.engine, [i.id for i in firing])
        taken = store.for_incidents(self.engine, [i.id for i in firing])
        done = 0
        for incident in firing:
            note = kept.get(incident.id)
            if note is None or note.diagnosis is None or not host_side(note.diagnosis):
                continue
            try:
                profile = taken.get(incident.id)
                if profile is None:
                    done += self._request(incident.id, str(note.diagnosis["instance"]), now)
                elif not profile.open:
                    done += self._apply(incident, note, profile)
            except InfersightError:
                log.exception("profile of incident %s failed", incident.id)
        return done

    def _request(self, incident_id: int, instance: str, now: datetime) -> int:
        recent = store.open_or_recent(self.engine, instance, now - self.min_interval)
        if recent is not None:
            return 0  # one is open for the instance, or one was taken lately
        store.insert_request(
            self.engine, instance, self.seconds, self.rate, now,
            reason="incident", incident_id=incident_id, requested_by="infersight",
        )  # fmt: skip
        log.info("incident %s: profile of %s requested", incident_id, instance)
        return 1

    def _apply(self, incident: Any, note: signals.IncidentNote, profile: Profile) -> int:
        assert note.diagnosis is not None
        assert note.symptom is not None
        shown = note.diagnosis.get("profile") or {}
        if shown.get("id") == profile.id:
            return 0
        diagnosis = with_profile(note.diagnosis, profile.to_dict())
        at = note.diagnosed_at or profile.finished_at or profile.requested_at
        with self.engine.begin() as connection:
            signals.save_diagnosis(connection, incident.id, note.symptom, diagnosis, at)
            if self.announce is not None and profile.result is not None:
                self.announce(incident, Transition.NONE, note.symptom, diagnosis,
                              connection=connection)  # fmt: skip
        log.info("incident %s: profile %s applied", incident.id, profile.id)
        return 1


class ProfileFollowUp:
    """The follow-up job with profiles after it (``api.context`` builds it): ``inner`` (the
    re-diagnoses and deliveries) runs first, then the trigger; a failing trigger is logged
    and never stops the deliveries."""

    def __init__(self, inner: Callable[[datetime], Any], trigger: ProfileTrigger) -> None:
        self.inner = inner
        self.trigger = trigger

    def on_leadership(self) -> None:
        told = getattr(self.inner, "on_leadership", None)
        if callable(told):
            told()

    def __call__(self, now: datetime) -> Any:
        result = self.inner(now)
        try:
            self.trigger(now)
        except Exception:  # a store error included: the deliveries go on
            log.exception("the profile trigger failed")
        return result
