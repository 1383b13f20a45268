"""Profile requests and results (``tables.profiles``) and the sidecar's channel to them.

A request is inserted ``pending``; the instance's sidecar claims it (``running``: one
conditional UPDATE, so two sidecars of one name cannot both run it) and completes it ``done``
with its summary or ``failed`` with the reason there is none. A request left running longer
than its duration plus ``STALE_AFTER`` (the sidecar died mid-profile) is failed by the next
claim or read of that instance, so it never blocks the next request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection, Engine, and_, insert, or_, select, update

from infersight.core.errors import InvalidInput, NotFound
from infersight.core.profile import ProfileRequest, ProfileState
from infersight.storage.tables import profiles

#: A running profile whose sidecar has not answered this long after its duration is failed.
STALE_AFTER: Final = timedelta(minutes=2)
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
        error=row.error or "",
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


def expire_stale(connection: Connection, now: datetime, instance: str | None = None) -> int:
    """Fail running profiles whose sidecar is overdue (module doc); how many."""
    rows = connection.execute(
        select(profiles.c.id, profiles.c.seconds, profiles.c.claimed_at).where(
            profiles.c.state == ProfileState.RUNNING.value,
            *([profiles.c.instance == instance] if instance is not None else []),
        )
    ).all()
    stale = [
        r.id
        for r in rows
        if r.claimed_at is not None
        and now - r.claimed_at > timedelta(seconds=r.seconds) + STALE_AFTER
    ]
    if stale:
        connection.execute(
            update(profiles)
            .where(profiles.c.id.in_(stale), profiles.c.state == ProfileState.RUNNING.value)
            .values(
                state=ProfileState.FAILED.value,
                finished_at=now,
                error="failed: the sidecar did not return the profile",
            )
        )
    return len(stale)


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
        taken = connection.execute(
            update(profiles)
            .where(profiles.c.id == row.id, profiles.c.state == ProfileState.PENDING.value)
            .values(state=ProfileState.RUNNING.value, claimed_at=now)
        )
        if taken.rowcount != 1:
            return None
        return ProfileRequest(row.id, instance, float(row.seconds), int(row.rate))


def complete(
    engine: Engine,
    profile_id: int,
    result: Mapping[str, Any] | None,
    error: str,
    now: datetime,
    instance: str | None = None,
) -> bool:
    """Store a claimed profile's summary or its reason; whether a running (or pending) row
    took it (``instance``: only that instance's row)."""
    if result is None and not error:
        raise InvalidInput("a profile result needs a summary or an error")
    body = None
    if result is not None:
        body = json.dumps(result, separators=(",", ":"), allow_nan=False)
        if len(body) > MAX_RESULT_BYTES:
            raise InvalidInput(f"a profile summary is at most {MAX_RESULT_BYTES} bytes of JSON")
    state = ProfileState.DONE if result is not None else ProfileState.FAILED
    conditions = [
        profiles.c.id == profile_id,
        profiles.c.state.in_([ProfileState.RUNNING.value, ProfileState.PENDING.value]),
    ]
    if instance is not None:
        conditions.append(profiles.c.instance == instance)
    with engine.begin() as connection:
        done = connection.execute(
            update(profiles)
            .where(*conditions)
            .values(state=state.value, finished_at=now, result=body, error=error[:1024])
        )
    return bool(done.rowcount)


def get(bind: Engine | Connection, profile_id: int) -> Profile:
    if isinstance(bind, Engine):
        with bind.connect() as connection:
            return get(connection, profile_id)
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
) -> list[Profile]:
    """Newest first."""
    query = select(profiles).order_by(profiles.c.id.desc()).limit(max(1, min(limit, _MAX_LIST)))
    if instance is not None:
        query = query.where(profiles.c.instance == instance)
    if incident_id is not None:
        query = query.where(profiles.c.incident_id == incident_id)
    with engine.connect() as connection:
        return [_row(r) for r in connection.execute(query)]


def for_incidents(engine: Engine, incident_ids: Iterable[int]) -> dict[int, Profile]:
    """Each incident's newest profile."""
    ids = sorted(set(incident_ids))
    if not ids:
        return {}
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


class StoreChannel:
    """``core.profile.ProfileChannel`` on the store: a sidecar that writes to the database."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] | None = None) -> None:
        self.engine = engine
        self._clock = clock or (lambda: datetime.now(UTC))

    def claim(self, instance: str) -> ProfileRequest | None:
        return claim(self.engine, instance, self._clock())

    def complete(self, request_id: int, result: Mapping[str, Any] | None, error: str) -> None:
        complete(self.engine, request_id, result, error, self._clock())
