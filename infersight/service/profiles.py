"""Profiles of serving processes: requested by hand or for an incident, used by its diagnosis.

``request_profile`` is the manual request (``POST /api/v1/profiles``, ``infersight profile``):
bounded (``core.profile.check_bounds``), one open profile per instance at a time (a second is
``Conflict``); one made for an incident must be of the instance its diagnosis names
(``InvalidInput`` / ``Conflict`` otherwise). ``cancel_profile`` ends an open one. The
instance's sidecar claims it (the store's ``profiles``), samples its serving process and stores the
summary or why there is none.

``ProfileTrigger`` is the automatic side, run by the follow-up job after the re-diagnoses
(``ProfileFollowUp``): for each firing incident whose headline blames one instance's host
(``alerts.diagnose.host_side``: ``host_bound``, ``preprocessing_slow``, a queue that grows while
the GPU idles) it requests one profile of that instance — not while one is open for it, and
not within ``min_interval`` of the last (a flapping incident is not profiled every pass), and
not while ``max_open`` automatic profiles are open fleet-wide (an incident that spans the fleet
does not attach a profiler to every serving process at once). Each pass first fails the
overdue requests (``store.profiles.expire_stale``); an incident whose step fails is logged and
the pass goes on with the next. Once
the profile is back, the headline gains what it says (``alerts.diagnose.with_profile``: the
host-side limit it names, "62 % of samples in the tokenizer", with a confidence from the
share, as evidence) and, when the notifiers are configured, the open alert is updated with it
(the page itself went out before the profile existed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from infersight.alerts.diagnose import host_side, with_profile
from infersight.alerts.lifecycle import Notice
from infersight.core.errors import Conflict, InvalidInput, NotFound
from infersight.core.profile import DEFAULT_RATE, DEFAULT_SECONDS, ProfileRequest, check_bounds
from infersight.service.diagnosis import Announce
from infersight.storage import seam
from infersight.storage.seam import IncidentNote, Profile, Store

log = logging.getLogger(__name__)

#: The least time between two automatic profiles of one instance.
MIN_INTERVAL: Final = timedelta(minutes=10)
#: The most automatic profiles open (pending or running) fleet-wide at once.
MAX_OPEN: Final = 2
#: How long a request waits for a sidecar to claim it before it fails (the store's rule).
PENDING_AFTER: Final[timedelta] = seam.PENDING_AFTER


def _instance_of(store: Store, incident_id: int) -> str:
    """The instance the incident's diagnosis names; ``InvalidInput`` without the incident,
    ``Conflict`` when its diagnosis names none."""
    try:
        store.incidents.get(incident_id)
    except NotFound:
        raise InvalidInput(f"there is no incident {incident_id}") from None
    note = store.incidents.notes([incident_id]).get(incident_id)
    instance = (note.diagnosis or {}).get("instance") if note is not None else None
    if not instance:
        raise Conflict(
            f"incident {incident_id} has no diagnosis that names an instance: a profile for it "
            "cannot be told apart from any other",
            details={"incident_id": incident_id},
        )
    return str(instance)


def request_profile(
    store: Store,
    instance: str,
    at: datetime,
    *,
    seconds: float = DEFAULT_SECONDS,
    rate: int = DEFAULT_RATE,
    requested_by: str = "",
    incident_id: int | None = None,
) -> Profile:
    """A pending manual profile of ``instance``; ``Conflict`` while one is open for it, or
    when ``incident_id``'s diagnosis names another instance (``InvalidInput``: no such
    incident)."""
    seconds, rate = check_bounds(seconds, rate)
    if incident_id is not None:
        named = _instance_of(store, incident_id)
        if named != instance:
            raise Conflict(
                f"incident {incident_id} is about instance {named}, not {instance}: a profile "
                f"of {instance} cannot explain it",
                details={"incident_id": incident_id, "instance": named},
            )
    store.profiles.expire_stale(at, instance)
    current = store.profiles.open_or_recent(instance, at)
    if current is not None and current.open:
        raise Conflict(
            f"a profile of {instance} is already {current.state.value} (id {current.id})",
            details={"id": current.id},
        )
    profile_id = store.profiles.insert_request(
        instance, seconds, rate, at, reason="manual",
        incident_id=incident_id, requested_by=requested_by,
    )  # fmt: skip
    return store.profiles.get(profile_id)


def cancel_profile(store: Store, profile_id: int, at: datetime, by: str = "") -> Profile:
    """End an open profile (the store's ``profiles.cancel``)."""
    profile = store.profiles.cancel(profile_id, at, by)
    log.info("profile %s of %s cancelled", profile_id, profile.instance)
    return profile


def list_profiles(
    store: Store,
    now: datetime,
    *,
    instance: str | None = None,
    incident_id: int | None = None,
    limit: int = 50,
) -> list[Profile]:
    """Profiles newest first (of ``instance``, of ``incident_id``), at most ``limit``; the
    overdue open ones are failed first."""
    return store.profiles.all(instance=instance, incident_id=incident_id, limit=limit, now=now)


def get_profile(store: Store, profile_id: int, now: datetime) -> Profile:
    """Profile ``profile_id`` (failed first if overdue; ``NotFound`` when there is none)."""
    return store.profiles.get(profile_id, now)


def incident_profiles(store: Store, incident_ids: Iterable[int]) -> dict[int, Profile]:
    """Each incident's newest profile (incidents without one are left out)."""
    return store.profiles.for_incidents(incident_ids)


def claim_profile(store: Store, instance: str, now: datetime) -> ProfileRequest | None:
    """A sidecar claims ``instance``'s oldest pending request (with a nonce); ``None``: none."""
    return store.profiles.claim(instance, now)


class StoreChannel:
    """``core.profile.ProfileChannel`` on the store: the sidecar that writes to the store claims
    its instance's requests and hands their summaries back through ``claim_profile`` and
    ``complete_profile`` (a remote one does so through the API's routes)."""

    def __init__(self, store: Store, clock: Callable[[], datetime] | None = None) -> None:
        self.store = store
        self._clock = clock or (lambda: datetime.now(UTC))

    def claim(self, instance: str) -> ProfileRequest | None:
        return claim_profile(self.store, instance, self._clock())

    def complete(
        self, request: ProfileRequest, result: Mapping[str, Any] | None, error: str
    ) -> None:
        complete_profile(self.store, request.id, result, error, self._clock(),
                         instance=request.instance, nonce=request.nonce)  # fmt: skip


def complete_profile(
    store: Store,
    profile_id: int,
    result: Mapping[str, Any] | None,
    error: str,
    now: datetime,
    *,
    instance: str,
    nonce: str,
) -> bool:
    """A sidecar hands back ``profile_id``'s summary (validated strictly) or why there is none,
    under its claim (``instance`` and ``nonce``); ``False`` when no such claim is running."""
    return store.profiles.complete(profile_id, result, error, now, instance=instance, nonce=nonce)


class ProfileTrigger:
    """Requests profiles for host-side incidents and folds their results into the diagnosis."""

    def __init__(
        self,
        store: Store,
        *,
        announce: Announce | None = None,
        seconds: float = DEFAULT_SECONDS,
        rate: int = DEFAULT_RATE,
        min_interval: timedelta = MIN_INTERVAL,
        max_open: int = MAX_OPEN,
    ) -> None:
        self.store = store
        self.announce = announce
        self.seconds, self.rate = check_bounds(seconds, rate)
        self.min_interval = min_interval
        if max_open < 0:
            raise ValueError("max_open must be 0 or more")
        self.max_open = max_open

    def __call__(self, now: datetime) -> int:
        """One pass; the profiles requested or applied."""
        self.store.profiles.expire(now)
        firing = self.store.incidents.all("firing")
        if not firing:
            return 0
        kept = self.store.incidents.notes([i.id for i in firing])
        taken = self.store.profiles.for_incidents([i.id for i in firing])
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
            except Exception:  # one malformed incident or profile must not stop the others
                log.exception("the profile step of incident %s failed", incident.id)
        return done

    def _request(self, incident_id: int, instance: str, now: datetime) -> int:
        recent = self.store.profiles.open_or_recent(instance, now - self.min_interval)
        if recent is not None:
            return 0  # one is open for the instance, or one was taken lately
        if self.store.profiles.open_automatic() >= self.max_open:
            log.info("incident %s: profile of %s deferred (%d automatic profiles open)",
                     incident_id, instance, self.max_open)  # fmt: skip
            return 0
        self.store.profiles.insert_request(
            instance, self.seconds, self.rate, now,
            reason="incident", incident_id=incident_id, requested_by="infersight",
        )  # fmt: skip
        log.info("incident %s: profile of %s requested", incident_id, instance)
        return 1

    def _apply(self, incident: Any, note: IncidentNote, profile: Profile) -> int:
        assert note.diagnosis is not None
        assert note.symptom is not None
        shown = note.diagnosis.get("profile") or {}
        if shown.get("id") == profile.id:
            return 0
        if profile.instance != note.diagnosis.get("instance"):
            log.warning("incident %s is about %s: profile %s of %s not applied", incident.id,
                        note.diagnosis.get("instance"), profile.id, profile.instance)  # fmt: skip
            return 0
        diagnosis = with_profile(note.diagnosis, profile.to_dict())
        at = note.diagnosed_at or profile.finished_at or profile.requested_at
        with self.store.transaction() as tx:
            tx.incidents.save_diagnosis(incident.id, note.symptom, diagnosis, at)
            if self.announce is not None and profile.result is not None:
                self.announce(incident, Notice.UPDATE, note.symptom, diagnosis, tx=tx)
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
