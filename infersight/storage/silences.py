"""Silences: label matchers that mute notifications of matching incidents until an expiry.

A silence matches an incident when every matcher equals the incident's label of that name
(``slo``, ``severity``, and the scope's labels such as ``model``, ``instance``, ``tenant``).
Expired silences stay as history and simply stop matching.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Engine, insert, select, update

from infersight.core.errors import InvalidInput, NotFound
from infersight.storage.tables import silences

MATCHER_NAMES: Final = ("slo", "severity", "model", "instance", "tenant", "priority")


@dataclass(frozen=True, slots=True)
class Silence:
    id: int
    matchers: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime
    created_by: str = ""
    comment: str = ""
    created_at: datetime | None = None

    def active(self, now: datetime) -> bool:
        return self.starts_at <= now < self.ends_at

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(name) == value for name, value in self.matchers.items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "matchers": dict(self.matchers),
            "starts_at": _iso(self.starts_at),
            "ends_at": _iso(self.ends_at),
            "created_by": self.created_by,
            "comment": self.comment,
        }


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class NewSilence:
    matchers: Mapping[str, str]
    starts_at: datetime
    ends_at: datetime
    created_by: str = ""
    comment: str = ""

    def __post_init__(self) -> None:
        if not self.matchers:
            raise InvalidInput("a silence needs at least one matcher")
        unknown = set(self.matchers) - set(MATCHER_NAMES)
        if unknown:
            raise InvalidInput(
                "unknown silence matchers",
                details={"matchers": sorted(unknown), "allowed": list(MATCHER_NAMES)},
            )
        if any(not isinstance(v, str) or not v or len(v) > 256 for v in self.matchers.values()):
            raise InvalidInput("matcher values are non-empty strings of at most 256 characters")
        if self.ends_at <= self.starts_at:
            raise InvalidInput("a silence ends after it starts")
        if len(self.comment) > 1024 or len(self.created_by) > 128:
            raise InvalidInput("comment ≤ 1024 and created_by ≤ 128 characters")


def add(engine: Engine, silence: NewSilence, now: datetime) -> Silence:
    with engine.begin() as connection:
        new_id = connection.execute(
            insert(silences)
            .values(
                matchers=json.dumps(dict(silence.matchers), sort_keys=True),
                starts_at=silence.starts_at,
                ends_at=silence.ends_at,
                created_by=silence.created_by,
                comment=silence.comment,
                created_at=now,
            )
            .returning(silences.c.id)
        ).scalar_one()
    return Silence(
        int(new_id),
        dict(silence.matchers),
        silence.starts_at,
        silence.ends_at,
        silence.created_by,
        silence.comment,
        now,
    )


def expire(engine: Engine, silence_id: int, now: datetime) -> None:
    """End a silence now (it stays as history)."""
    with engine.begin() as connection:
        done = connection.execute(
            update(silences)
            .where(silences.c.id == silence_id)
            .values(ends_at=now)
            .returning(silences.c.id)
        ).first()
    if done is None:
        raise NotFound(f"no silence {silence_id}", details={"id": silence_id})


def active(engine: Engine, now: datetime) -> list[Silence]:
    """Silences in force at ``now``."""
    with engine.connect() as connection:
        rows = connection.execute(
            select(silences)
            .where(silences.c.starts_at <= now, silences.c.ends_at > now)
            .order_by(silences.c.id)
        ).all()
    return [
        Silence(
            r.id,
            json.loads(r.matchers),
            r.starts_at,
            r.ends_at,
            r.created_by,
            r.comment,
            r.created_at,
        )
        for r in rows
    ]


def silenced(engine: Engine, labels: Mapping[str, str], now: datetime) -> bool:
    return any(s.matches(labels) for s in active(engine, now))
