"""The notification outbox: messages persist until their notifier accepts them.

A message is enqueued once per (notifier, key) — enqueueing the same key again is a no-op, so
a re-run of the evaluation or a retry never produces a second page. ``due`` hands out pending
messages whose next attempt has come; the dispatcher reports each outcome back with
``delivered``, ``retry_at`` (backoff, ``Retry-After``) or ``failed`` (a permanent refusal).
A message may wait (``not_before``) and be ``cancel_pending``-ed before it goes out: that is
how a flapping alert's held-back resolve is withdrawn. Rows stay after delivery as history.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Engine, Row, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from infersight.storage.tables import outbox


class MessageState(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Message:
    id: int
    notifier: str
    key: str
    payload: str
    attempts: int
    state: MessageState = MessageState.PENDING
    created_at: datetime | None = None
    delivered_at: datetime | None = None
    last_error: str = ""


class Outbox:
    """The outbox of one store."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def enqueue(
        self,
        notifier: str,
        key: str,
        payload: str,
        now: datetime,
        not_before: datetime | None = None,
    ) -> bool:
        """Add a message (first sent at ``not_before``, default now); ``False`` when
        (notifier, key) was enqueued before."""
        try:
            with self.engine.begin() as connection:
                exists = connection.execute(
                    select(outbox.c.id).where(outbox.c.notifier == notifier, outbox.c.key == key)
                ).first()
                if exists is not None:
                    return False
                connection.execute(
                    insert(outbox).values(
                        notifier=notifier,
                        key=key,
                        payload=payload,
                        state=MessageState.PENDING.value,
                        attempts=0,
                        created_at=now,
                        next_attempt_at=not_before or now,
                    )
                )
        except IntegrityError:
            return False  # a concurrent enqueue of the same key won
        return True

    def cancel_pending(self, notifier: str, key_like: str) -> int:
        """Cancel the pending messages of ``notifier`` whose key matches the SQL LIKE pattern."""
        with self.engine.begin() as connection:
            done = connection.execute(
                update(outbox)
                .where(
                    outbox.c.notifier == notifier,
                    outbox.c.state == MessageState.PENDING.value,
                    outbox.c.key.like(key_like),
                )
                .values(state=MessageState.CANCELLED.value)
            )
        return int(done.rowcount)

    def due(self, now: datetime, limit: int = 100) -> list[Message]:
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(outbox)
                .where(
                    outbox.c.state == MessageState.PENDING.value,
                    outbox.c.next_attempt_at <= now,
                )
                .order_by(outbox.c.id)
                .limit(limit)
            ).all()
        return [_message(r) for r in rows]

    def delivered(self, message_id: int, now: datetime) -> None:
        self._set(message_id, state=MessageState.DELIVERED.value, delivered_at=now, last_error="")

    def retry_at(self, message_id: int, at: datetime, error: str) -> None:
        self._set(message_id, next_attempt_at=at, last_error=error[:1024])

    def failed(self, message_id: int, error: str) -> None:
        self._set(message_id, state=MessageState.FAILED.value, last_error=error[:1024])

    def messages(self, notifier: str | None = None) -> list[Message]:
        """Every message (newest last), for the API and tests."""
        statement = select(outbox).order_by(outbox.c.id)
        if notifier is not None:
            statement = statement.where(outbox.c.notifier == notifier)
        with self.engine.connect() as connection:
            return [_message(r) for r in connection.execute(statement).all()]

    def pending(self) -> int:
        with self.engine.connect() as connection:
            count = connection.execute(
                select(func.count())
                .select_from(outbox)
                .where(outbox.c.state == MessageState.PENDING.value)
            ).scalar_one()
        return int(count)

    def _set(self, message_id: int, **values: object) -> None:
        with self.engine.begin() as connection:
            connection.execute(
                update(outbox)
                .where(outbox.c.id == message_id)
                .values(attempts=outbox.c.attempts + 1, **values)
            )


def _message(r: Row[Any]) -> Message:
    return Message(
        id=r.id,
        notifier=r.notifier,
        key=r.key,
        payload=r.payload,
        attempts=r.attempts,
        state=MessageState(r.state),
        created_at=r.created_at,
        delivered_at=r.delivered_at,
        last_error=r.last_error,
    )
