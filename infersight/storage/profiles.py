"""Profile requests and results (``tables.profiles``) and the sidecar's channel to them.

A request is inserted ``pending``; the instance's sidecar claims it (``running``: one
conditional UPDATE, so two sidecars of one name cannot both run it) and completes it ``done``
with its summary or ``failed`` with the reason there is none.

A claim hands out a random *nonce* with the request; only its SHA-256 is stored (in the
``error`` column while the row runs: the reason a finished row gives replaces it, and
``Profile`` never shows it). ``complete`` takes a result only for a running row of the same
instance with that nonce, so an ingest token can write no profile but the one its sidecar
claimed, and the summary is validated first (``core.profile.check_summary``).

Nothing blocks an instance for good (``expire_stale``, run by every claim, request, read and
trigger pass): a request no sidecar claims within ``PENDING_AFTER`` fails ("no sidecar took
the request"), and one left running longer than its duration plus ``STALE_AFTER`` (the
sidecar died mid-profile) fails too. ``cancel`` ends an open one by hand; ``prune`` deletes
finished ones past their retention (``storage.maintenance``).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection, Engine, and_, delete, func, insert, or_, select, update

from infersight.core.errors import Conflict, InvalidInput, NotFound
from infersight.core.profile import ProfileRequest, ProfileState, check_summary
from infersight.storage.tables import profiles

#: A running profile whose sidecar has not answered this long after its duration is failed.
STALE_AFTER: Final = timedelta(minutes=2)
#: A pending request no sidecar has claimed this long is failed.
PENDING_AFTER: Final = timedelta(minutes=10)
NOT_CLAIMED: Final = (
    "failed: no sidecar took the request within {minutes:g} min — is the instance's sidecar "
    "running with --profile-target, under this instance name?"
)
NOT_RETURNED: Final = "failed: the sidecar did not return the profile"
#: Where a running row keeps its claim's nonce digest (``error``: module doc).
_NONCE_MARK: Final = "claim:"
#: The instances whose open profiles one ``expire_stale`` looks at, at most.
_MAX_EXPIRE: Final = 10_000
#: The largest summary stored (bytes of JSON).
MAX_RESULT_BYTES: Final = 512 * 1024
_MAX_LIST: Final = 500


@dataclass(frozen=True, slots=True)
class Profile:
    id: int
    instance: str
    incident_id: int | None
    reason: str
    state: ProfileState
    seconds: float
    rate: int
    requested_at: datetime
    requested_by: str = ""
    claimed_at: datetime | None = None
    finished_at: datetime | None = None
    result: dict[str, Any] | None = None
    error: str = ""

    @property
    def open(self) -> bool:
        return self.state in (ProfileState.PENDING, ProfileState.RUNNING)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "instance": self.instance,
            "incident_id": self.incident_id,
            "reason": self.reason,
            "state": self.state.value,
            "seconds": self.seconds,
            "rate": self.rate,
            "requested_at": _iso(self.requested_at),
            "requested_by": self.requested_by,
            "claimed_at": _iso(self.claimed_at),
            "finished_at": _iso(self.finished_at),
            "result": self.result,
            "error": self.error or None,
        }


def _iso(ts: datetime | None) -> str | None:
    return None if ts is None else ts.isoformat().replace("+00:00", "Z")


def _digest(nonce: str) -> str:
    return _NONCE_MARK + hashlib.sha256(nonce.encode("utf-8", "replace")).hexdigest()


def _row(row: Any) -> Profile:
    result = None
    if row.result:
        try:
            loaded = json.loads(row.result)
            result = loaded if isinstance(loaded, dict) else None
        except ValueError:
            result = None
    return Profile(
        id=row.id,
        instance=row.instance,
        incident_id=row.incident_id,
        reason=row.reason,
        state=ProfileState(row.state),
        seconds=row.seconds,
        rate=row.rate,
        requested_at=row.requested_at,
        requested_by=row.requested_by or "",
        claimed_at=row.claimed_at,
        finished_at=row.finished_at,
        result=result,
        error="" if (row.error or "").startswith(_NONCE_MARK) else (row.error or ""),
    )


def insert_request(
    bind: Engine | Connection,
    instance: str,
    seconds: float,
    rate: int,
    at: datetime,
    *,
    reason: str = "manual",
    incident_id: int | None = None,
    requested_by: str = "",
) -> int:
    """A pending request; its id."""
    if not instance or len(instance) > 256:
        raise InvalidInput("a profile needs an instance name of 1 … 256 characters")
    values = {
        "instance": instance, "incident_id": incident_id, "reason": reason[:16],
        "state": ProfileState.PENDING.value, "seconds": seconds, "rate": rate,
        "requested_at": at, "requested_by": requested_by[:128],
    }  # fmt: skip
    if isinstance(bind, Engine):
        with bind.begin() as connection:
            return insert_request(connection, instance, seconds, rate, at, reason=reason,
                                  incident_id=incident_id, requested_by=requested_by)  # fmt: skip
    result = bind.execute(insert(profiles).values(**values).returning(profiles.c.id))
    return int(result.scalar_one())


def expire_stale(
    connection: Connection,
    now: datetime,
    instance: str | None = None,
    *,
    pending_after: timedelta = PENDING_AFTER,
) -> int:
    """Fail the pending requests no sidecar claimed within ``pending_after`` and the running
    profiles whose sidecar is overdue (module doc); how many."""
    where = [profiles.c.instance == instance] if instance is not None else []
    unclaimed = connection.execute(
        update(profiles)
        .where(
            profiles.c.state == ProfileState.PENDING.value,
            profiles.c.requested_at < now - pending_after,
            *where,
        )
        .values(
            state=ProfileState.FAILED.value,
            finished_at=now,
            error=NOT_CLAIMED.format(minutes=pending_after.total_seconds() / 60),
        )
    )
    rows = connection.execute(
        select(profiles.c.id, profiles.c.seconds, profiles.c.claimed_at)
        .where(profiles.c.state == ProfileState.RUNNING.value, *where)
        .limit(_MAX_EXPIRE)
    ).all()
    stale = [
        r.id
        for r in rows
        if r.claimed_at is None or now - r.claimed_at > timedelta(seconds=r.seconds) + STALE_AFTER
    ]
    if stale:
        connection.execute(
            update(profiles)
            .where(profiles.c.id.in_(stale), profiles.c.state == ProfileState.RUNNING.value)
            .values(state=ProfileState.FAILED.value, finished_at=now, error=NOT_RETURNED)
        )
    return max(unclaimed.rowcount, 0) + len(stale)


def expire(engine: Engine, now: datetime, instance: str | None = None) -> int:
    """``expire_stale`` in its own transaction."""
    with engine.begin() as connection:
        return expire_stale(connection, now, instance)


def claim(engine: Engine, instance: str, now: datetime) -> ProfileRequest | None:
    """The oldest pending request of ``instance``, now running; ``None``. At most one runs
    per instance: while one is running nothing is handed out."""
    with engine.begin() as connection:
        expire_stale(connection, now, instance)
        running = connection.execute(
            select(profiles.c.id).where(
                profiles.c.instance == instance, profiles.c.state == ProfileState.RUNNING.value
            )
        ).first()
        if running is not None:
            return None
        row = connection.execute(
            select(profiles.c.id, profiles.c.seconds, profiles.c.rate)
            .where(profiles.c.instance == instance, profiles.c.state == ProfileState.PENDING.value)
            .order_by(profiles.c.id)
            .limit(1)
        ).first()
        if row is None:
            return None
        nonce = secrets.token_urlsafe(24)
        taken = connection.execute(
            update(profiles)
            .where(profiles.c.id == row.id, profiles.c.state == ProfileState.PENDING.value)
            .values(state=ProfileState.RUNNING.value, claimed_at=now, error=_digest(nonce))
        )
        if taken.rowcount != 1:
            return None
        return ProfileRequest(row.id, instance, float(row.seconds), int(row.rate), nonce)


def complete(
    engine: Engine,
    profile_id: int,
    result: Mapping[str, Any] | None,
    error: str,
    now: datetime,
    *,
    instance: str,
    nonce: str,
) -> bool:
    """Store a claimed profile's summary (validated: ``core.profile.check_summary``) or its
    reason; whether it was taken: only a running row of ``instance`` claimed with ``nonce``
    takes it (a second answer, another instance's or a forged one is not)."""
    if result is None and not error:
        raise InvalidInput("a profile result needs a summary or an error")
    if not nonce:
        raise InvalidInput("a profile result needs the nonce its claim handed out")
    body = None
    if result is not None:
        body = json.dumps(check_summary(result), separators=(",", ":"), allow_nan=False)
        if len(body) > MAX_RESULT_BYTES:
            raise InvalidInput(f"a profile summary is at most {MAX_RESULT_BYTES} bytes of JSON")
    state = ProfileState.DONE if result is not None else ProfileState.FAILED
    with engine.begin() as connection:
        done = connection.execute(
            update(profiles)
            .where(
                profiles.c.id == profile_id,
                profiles.c.state == ProfileState.RUNNING.value,
                profiles.c.instance == instance,
                profiles.c.error == _digest(nonce),
            )
            .values(
                state=state.value,
                finished_at=now,
                result=body,
                error=error[:1024] if error else "",
            )
        )
    return bool(done.rowcount)


def cancel(engine: Engine, profile_id: int, now: datetime, by: str = "") -> Profile:
    """End an open profile by hand (``failed``: "cancelled"); ``Conflict`` when it has
    finished, ``NotFound`` when there is none. A sidecar still sampling it finds its answer
    refused."""
    reason = "failed: cancelled" + (f" by {by[:64]}" if by else "")
    with engine.begin() as connection:
        current = get(connection, profile_id)
        if not current.open:
            raise Conflict(
                f"profile {profile_id} has already finished ({current.state.value})",
                details={"id": profile_id, "state": current.state.value},
            )
        connection.execute(
            update(profiles)
            .where(
                profiles.c.id == profile_id,
                profiles.c.state.in_([ProfileState.PENDING.value, ProfileState.RUNNING.value]),
            )
            .values(state=ProfileState.FAILED.value, finished_at=now, error=reason)
        )
        return get(connection, profile_id)


def prune(engine: Engine, before: datetime) -> int:
    """Delete the finished profiles requested before ``before``; how many."""
    with engine.begin() as connection:
        gone = connection.execute(
            delete(profiles).where(
                profiles.c.requested_at < before,
                profiles.c.state.in_([ProfileState.DONE.value, ProfileState.FAILED.value]),
            )
        )
    return max(gone.rowcount, 0)


def open_automatic(engine: Engine) -> int:
    """How many automatic (incident) profiles are open fleet-wide."""
    with engine.connect() as connection:
        found = connection.execute(
            select(func.count())
            .select_from(profiles)
            .where(
                profiles.c.reason == "incident",
                profiles.c.state.in_([ProfileState.PENDING.value, ProfileState.RUNNING.value]),
            )
        ).scalar_one()
    return int(found)


def get(bind: Engine | Connection, profile_id: int, now: datetime | None = None) -> Profile:
    """One profile (``now``: its instance's overdue ones failed first)."""
    if isinstance(bind, Engine):
        if now is not None:
            with bind.begin() as connection:
                return get(connection, profile_id, now)
        with bind.connect() as connection:
            return get(connection, profile_id)
    if now is not None:
        found = bind.execute(
            select(profiles.c.instance).where(profiles.c.id == profile_id)
        ).scalar_one_or_none()
        if found is not None:
            expire_stale(bind, now, found)
    row = bind.execute(select(profiles).where(profiles.c.id == profile_id)).first()
    if row is None:
        raise NotFound(f"no profile {profile_id}")
    return _row(row)


def list_profiles(
    engine: Engine,
    *,
    instance: str | None = None,
    incident_id: int | None = None,
    limit: int = 50,
    now: datetime | None = None,
) -> list[Profile]:
    """Newest first (``now``: the overdue ones failed first)."""
    if now is not None:
        expire(engine, now, instance)
    query = select(profiles).order_by(profiles.c.id.desc()).limit(max(1, min(limit, _MAX_LIST)))
    if instance is not None:
        query = query.where(profiles.c.instance == instance)
    if incident_id is not None:
        query = query.where(profiles.c.incident_id == incident_id)
    with engine.connect() as connection:
        return [_row(r) for r in connection.execute(query)]


def for_incidents(
    engine: Engine, incident_ids: Iterable[int], now: datetime | None = None
) -> dict[int, Profile]:
    """Each incident's newest profile (``now``: the overdue ones failed first)."""
    ids = sorted(set(incident_ids))
    if not ids:
        return {}
    if now is not None:
        expire(engine, now)
    out: dict[int, Profile] = {}
    with engine.connect() as connection:
        rows = connection.execute(
            select(profiles).where(profiles.c.incident_id.in_(ids)).order_by(profiles.c.id)
        )
        for row in rows:
            out[row.incident_id] = _row(row)
    return out


def open_or_recent(engine: Engine, instance: str, since: datetime) -> Profile | None:
    """The newest profile of ``instance`` that is still open or was requested since
    ``since`` (the rate limit of automatic profiles)."""
    with engine.connect() as connection:
        row = connection.execute(
            select(profiles)
            .where(
                profiles.c.instance == instance,
                or_(
                    profiles.c.state.in_([ProfileState.PENDING.value, ProfileState.RUNNING.value]),
                    and_(profiles.c.requested_at >= since),
                ),
            )
            .order_by(profiles.c.id.desc())
            .limit(1)
        ).first()
    return None if row is None else _row(row)
