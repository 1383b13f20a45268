"""The notification outbox: messages persist until their notifier accepts them.

A message is enqueued once per (notifier, key) — enqueueing the same key again is a no-op, so
a re-run of the evaluation or a retry never produces a second page. ``enqueue`` and
``cancel_pending`` take the caller's ``connection`` when given, so that an incident's change and
its messages commit in one transaction (a crash between them can neither lose the page nor
leave it half written). ``due`` hands out pending messages whose next attempt has come; the
dispatcher ``claim``s each one — the attempt is committed, as ``sending``, before the request
leaves — and reports the outcome with ``delivered``, ``retry_at`` (backoff, ``Retry-After``) or
``failed`` (a permanent refusal). A claim that never got its outcome (the process died
mid-send, or the claim outlived ``CLAIM_LEASE``) is settled by ``recover``: sent again to a
receiver that deduplicates, else marked ``unknown`` — it may or may not have arrived, and
sending it again could page twice. A message may wait (``not_before``) and be
``cancel_pending``-ed before it goes out: that is how a flapping alert's held-back resolve is
withdrawn. Rows stay after delivery as history.

An outcome names its claim (the attempt number ``claim`` returns) and is recorded only for it:
a deliverer that lost the lead mid-send and reports late cannot overwrite what its successor
decided since (the rules are above ``Outbox.delivered``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from sqlalchemy import Connection, Engine, Row, func, select, update

from infersight.storage.sql import insert_for
from infersight.storage.tables import outbox

#: How long a claimed message may stay ``sending`` before it counts as interrupted (far longer
#: than a notifier's HTTP timeout).
CLAIM_LEASE: Final = timedelta(minutes=10)


class MessageState(StrEnum):
    PENDING = "pending"
    SENDING = "sending"
    DELIVERED = "delivered"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"
    """Interrupted mid-send to a receiver that cannot deduplicate: not sent again."""


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
        *,
        connection: Connection | None = None,
    ) -> bool:
        """Add a message (first sent at ``not_before``, default now), in ``connection``'s
        transaction when given; ``False`` when (notifier, key) was enqueued before."""
        values = {
            "notifier": notifier,
            "key": key,
            "payload": payload,
            "state": MessageState.PENDING.value,
            "attempts": 0,
            "created_at": now,
            "next_attempt_at": not_before or now,
        }
        statement = (
            insert_for(self.engine, outbox)
            .values(**values)
            .on_conflict_do_nothing(index_elements=["notifier", "key"])
            .returning(outbox.c.id)
        )
        if connection is not None:
            return connection.execute(statement).first() is not None
        with self.engine.begin() as own:
            return own.execute(statement).first() is not None

    def cancel_pending(
        self, notifier: str, key_like: str, *, connection: Connection | None = None
    ) -> int:
        """Cancel the pending messages of ``notifier`` whose key matches the SQL LIKE pattern."""
        statement = (
            update(outbox)
            .where(
                outbox.c.notifier == notifier,
                outbox.c.state == MessageState.PENDING.value,
                outbox.c.key.like(key_like),
            )
            .values(state=MessageState.CANCELLED.value)
        )
        if connection is not None:
            return int(connection.execute(statement).rowcount)
        with self.engine.begin() as own:
            return int(own.execute(statement).rowcount)

    def keys_like(self, key_like: str) -> set[tuple[str, str]]:
        """(notifier, key) of every message, in any state, whose key matches ``key_like``."""
        with self.engine.connect() as connection:
            rows = connection.execute(
                select(outbox.c.notifier, outbox.c.key).where(outbox.c.key.like(key_like))
            ).all()
        return {(r.notifier, r.key) for r in rows}

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

    def claim(self, message_id: int, now: datetime) -> int | None:
        """Commit the attempt before it is made: the pending message becomes ``sending`` (its
        attempts counted, its lease until ``now + CLAIM_LEASE``). The attempt's number — the
        claim's token, which its outcome names — or ``None`` if it was no longer pending
        (cancelled meanwhile, or claimed by another deliverer)."""
        with self.engine.begin() as connection:
            row = connection.execute(
                update(outbox)
                .where(outbox.c.id == message_id, outbox.c.state == MessageState.PENDING.value)
                .values(
                    state=MessageState.SENDING.value,
                    attempts=outbox.c.attempts + 1,
                    next_attempt_at=now + CLAIM_LEASE,
                )
                .returning(outbox.c.attempts)
            ).first()
        return None if row is None else int(row.attempts)

    # An outcome is that of one claim (``attempt``, the number ``claim`` gave). A deliverer that
    # lost the lead (or stalled past its lease) may report it after another one settled the
    # claim (``recover``: ``unknown``, or pending to be sent again) or claimed the message anew;
    # the late outcome then must not undo what was decided since. So:
    #
    # - ``delivered`` is recorded while no later attempt was claimed and the claim's row is
    #   ``sending``, ``unknown`` or pending again: the receiver has it, which is better known than
    #   "it may or may not have arrived", and sending it again would be needless (or, for Slack,
    #   a second message). Once a later attempt is claimed, that one's outcome decides.
    # - ``retry_at`` and ``failed`` apply to the claim's row while it is ``sending`` or
    #   ``unknown``: an ``unknown`` was only the want of this outcome, and a message the receiver
    #   refused is then sent again (retryable) or recorded as refused, not left as maybe-arrived.
    #   A message already due again (``recover`` re-queued it for a receiver that deduplicates)
    #   is left to its next attempt.
    #
    # Without ``attempt`` (an older caller) an outcome applies only to a ``sending`` row.

    def delivered(self, message_id: int, now: datetime, attempt: int | None = None) -> bool:
        """Record the attempt delivered; whether it was recorded (see above)."""
        return self._set(
            message_id,
            attempt,
            (MessageState.SENDING, MessageState.UNKNOWN, MessageState.PENDING),
            state=MessageState.DELIVERED.value,
            delivered_at=now,
            last_error="",
        )

    def retry_at(
        self, message_id: int, at: datetime, error: str, attempt: int | None = None
    ) -> bool:
        """Record a retryable failure: due again at ``at``; whether it was recorded."""
        return self._set(
            message_id,
            attempt,
            (MessageState.SENDING, MessageState.UNKNOWN),
            state=MessageState.PENDING.value,
            next_attempt_at=at,
            last_error=error[:1024],
        )

    def failed(self, message_id: int, error: str, attempt: int | None = None) -> bool:
        """Record a final refusal; whether it was recorded."""
        return self._set(
            message_id,
            attempt,
            (MessageState.SENDING, MessageState.UNKNOWN),
            state=MessageState.FAILED.value,
            last_error=error[:1024],
        )

    def recover(
        self, now: datetime, resend: Callable[[str], bool], *, every: bool = False
    ) -> list[Message]:
        """Settle the claims that never got an outcome: those whose lease ran out, or (``every``,
        on a deliverer's first pass after a start) all of them. A message whose notifier
        ``resend`` approves (the receiver deduplicates) is due again now; any other is marked
        ``unknown``. The messages settled, as they now are."""
        stale = outbox.c.state == MessageState.SENDING.value
        if not every:
            stale = stale & (outbox.c.next_attempt_at <= now)
        with self.engine.begin() as connection:
            rows = connection.execute(select(outbox).where(stale).order_by(outbox.c.id)).all()
            for row in rows:
                again = resend(row.notifier)
                values: dict[str, Any] = (
                    {
                        "state": MessageState.PENDING.value,
                        "next_attempt_at": now,
                        "last_error": "interrupted mid-send; sent again (the receiver "
                        "deduplicates)",
                    }
                    if again
                    else {
                        "state": MessageState.UNKNOWN.value,
                        "last_error": "interrupted mid-send; not sent again (the receiver "
                        "cannot deduplicate, it may or may not have arrived)",
                    }
                )
                connection.execute(
                    update(outbox).where(outbox.c.id == row.id, stale).values(**values)
                )
            ids = [row.id for row in rows]
            settled = (
                connection.execute(
                    select(outbox).where(outbox.c.id.in_(ids)).order_by(outbox.c.id)
                ).all()
                if ids
                else []
            )
        return [_message(r) for r in settled]

    def messages(self, notifier: str | None = None, key_like: str | None = None) -> list[Message]:
        """Every message (newest last), for the API and tests; ``key_like`` filters the keys
        by an SQL LIKE pattern."""
        statement = select(outbox).order_by(outbox.c.id)
        if notifier is not None:
            statement = statement.where(outbox.c.notifier == notifier)
        if key_like is not None:
            statement = statement.where(outbox.c.key.like(key_like))
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

    def _set(
        self,
        message_id: int,
        attempt: int | None,
        states: tuple[MessageState, ...],
        **values: object,
    ) -> bool:
        """An attempt's outcome (the attempt was counted by ``claim``), recorded only for the
        claim that made it (``attempt``) in one of ``states``; whether it was recorded."""
        where = [outbox.c.id == message_id]
        if attempt is None:
            where.append(outbox.c.state == MessageState.SENDING.value)
        else:
            where.append(outbox.c.attempts == attempt)
            where.append(outbox.c.state.in_([s.value for s in states]))
        with self.engine.begin() as connection:
            done = connection.execute(update(outbox).where(*where).values(**values))
        return bool(done.rowcount)


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
