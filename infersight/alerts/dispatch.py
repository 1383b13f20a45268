"""Delivering the outbox: one pass over the due messages, with backoff on retryable failures.

Pure of IO of its own: the outbox and the notifiers are injected (``storage.outbox.Outbox`` and
``alerts.notifiers``), and so is ``now``. A retryable failure (429, 5xx, transport error) is
retried after ``Retry-After`` when the endpoint gives one, else after an exponential backoff;
any other refusal is final. A message is one outbox row, so a retry re-sends the same payload
(and PagerDuty's stable ``dedup_key``) and never pages twice.

Each attempt is claimed — committed as ``sending`` — before its request leaves, so a crash
mid-send is known after the restart: ``recover_interrupted`` sends such a message again only
to a receiver that deduplicates (``Notifier.deduplicates``: PagerDuty's ``dedup_key``,
Alertmanager's labels), at least once with a key; to any other (Slack) it is delivered at most
once and the interrupted attempt is marked ``unknown``, logged once. Each outcome names the
claim that made it (its attempt number), so one reported late — by a deliverer that lost the
lead mid-send — never overwrites what was decided since (``Outbox.delivered``).

A notifier that raises (a bug, or an error of the HTTP client other than a transport error:
too many redirects, an undecodable answer, an invalid URL) does not abort the pass or strand
its message as ``sending``: the attempt is retried with backoff like a retryable failure, and
the exception is logged (its type and frames, never its text, which may quote a secret URL),
with the traceback once per message and error. A transport error is a retryable failure
(``notify.post_json``); one raised after the request was written (a read timeout, a dropped
connection) may follow a delivery, so such a retry can reach a receiver twice — at least
once there, as before.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from infersight.alerts.notify import Notifier, SendResult, retry_after_s

log = logging.getLogger(__name__)


class MessageLike(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def notifier(self) -> str: ...
    @property
    def payload(self) -> str: ...
    @property
    def attempts(self) -> int: ...


class OutboxLike(Protocol):
    def due(self, now: datetime, limit: int = 100) -> Sequence[MessageLike]: ...
    def claim(self, message_id: int, now: datetime) -> int | None: ...
    def delivered(self, message_id: int, now: datetime, attempt: int | None = None) -> object: ...
    def retry_at(
        self, message_id: int, at: datetime, error: str, attempt: int | None = None
    ) -> object: ...
    def failed(self, message_id: int, error: str, attempt: int | None = None) -> object: ...


@dataclass(frozen=True, slots=True)
class Backoff:
    base_s: float = 5.0
    max_s: float = 600.0
    max_retry_after_s: float = 3600.0
    max_attempts: int = 200

    def delay(self, attempts: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s)
        return min(self.base_s * 2.0 ** min(attempts, 30), self.max_s)


@dataclass(frozen=True, slots=True)
class DispatchReport:
    delivered: int = 0
    retried: int = 0
    failed: int = 0
    resent: int = 0
    """Interrupted attempts due again (their receiver deduplicates)."""
    abandoned: int = 0
    """Interrupted attempts not sent again (``unknown``: their receiver cannot deduplicate)."""


class RecoverableOutbox(OutboxLike, Protocol):
    def recover(
        self, now: datetime, resend: Callable[[str], bool], *, every: bool = False
    ) -> Sequence[MessageLike]: ...


def deduplicates(notifiers: Mapping[str, Notifier], name: str) -> bool:
    """Whether the receiver of notifier ``name`` absorbs a message sent twice (an unknown
    notifier does not: at most once)."""
    notifier = notifiers.get(name)
    return bool(notifier is not None and notifier.deduplicates)


def recover_interrupted(
    outbox: RecoverableOutbox,
    notifiers: Mapping[str, Notifier],
    now: datetime,
    *,
    every: bool = False,
) -> tuple[int, int]:
    """Settle the attempts a crash (or an expired claim) left without an outcome (``every``:
    all of them, for the first pass after a start); (resent, abandoned)."""
    resent = abandoned = 0
    for message in outbox.recover(now, lambda name: deduplicates(notifiers, name), every=every):
        if deduplicates(notifiers, message.notifier):
            resent += 1
            log.info(
                "notification %s to %s was interrupted mid-send; sending it again "
                "(the receiver deduplicates)",
                message.id,
                message.notifier,
            )
        else:
            abandoned += 1
            log.warning(
                "notification %s to %s was interrupted mid-send and is not sent again "
                "(the receiver cannot deduplicate; it may or may not have arrived)",
                message.id,
                message.notifier,
            )
    return resent, abandoned


def deliver_due(
    outbox: OutboxLike,
    notifiers: Mapping[str, Notifier],
    now: datetime,
    backoff: Backoff = Backoff(),
    limit: int = 100,
) -> DispatchReport:
    """Send every due message once; record each outcome in the outbox."""
    delivered = retried = failed = 0
    for message in outbox.due(now, limit):
        attempt = outbox.claim(message.id, now)
        if attempt is None:
            continue  # cancelled or claimed since it was read
        notifier = notifiers.get(message.notifier)
        if notifier is None:
            outbox.failed(message.id, f"no notifier named {message.notifier!r}", attempt)
            failed += 1
            continue
        try:
            result = notifier.send(json.loads(message.payload))
        except Exception as exc:
            result = _raised(message, exc)
        if result.ok:
            outbox.delivered(message.id, now, attempt)
            delivered += 1
        elif result.retryable and attempt < backoff.max_attempts:
            delay = backoff.delay(message.attempts, retry_after_s(result.retry_after, now))
            outbox.retry_at(message.id, now + timedelta(seconds=delay), result.error, attempt)
            retried += 1
        else:
            outbox.failed(message.id, result.error, attempt)
            log.warning(
                "notification %s to %s refused: %s", message.id, notifier.name, result.error
            )
            failed += 1
    return DispatchReport(delivered, retried, failed)


def _raised(message: MessageLike, exc: Exception) -> SendResult:
    """A notifier's exception as a retryable failure, logged: with its frames (not its text,
    which may quote the secret URL) the first time this message fails with it."""
    error = f"the notifier raised {type(exc).__name__}"
    if getattr(message, "last_error", "") != error:
        frames = "".join(traceback.format_tb(exc.__traceback__))
        log.warning(
            "notification %s to %s: %s; retried later\nTraceback (most recent call last):\n%s",
            message.id,
            message.notifier,
            error,
            frames.rstrip(),
        )
    else:
        log.debug("notification %s to %s: %s again", message.id, message.notifier, error)
    return SendResult(False, retryable=True, error=error)
