"""What a notification says, the one interface every notifier implements, and HTTP delivery.

A ``Notification`` is built once per incident change. Each notifier ``render``s it into its
wire payload — without secrets, because the payload is stored in the outbox — and ``send``s a
stored payload, adding its secret (webhook URL, routing key) at the last moment. ``send``
returns a ``SendResult``: delivered, retryable (429, 5xx, transport errors; with the raw
``Retry-After``) or refused for good (any other 4xx). Errors never carry URLs or keys.
``deduplicates`` says whether a message sent twice reaches the receiver's people once.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any, Protocol

import httpx

from infersight.core.budget import BUDGET_PREFIX, COST_STEP_PREFIX
from infersight.core.errors import InvalidInput


class Event(StrEnum):
    TRIGGER = "trigger"
    RESOLVE = "resolve"


@dataclass(frozen=True, slots=True)
class Notification:
    """One incident change, with its symptom and diagnosis (the contract's JSON shapes)."""

    incident_id: int
    slo: str
    scope: str
    severity: str
    event: Event
    at: datetime
    opened_at: datetime
    labels: Mapping[str, str] = field(default_factory=dict)
    symptom: Mapping[str, Any] = field(default_factory=dict)
    diagnosis: Mapping[str, Any] = field(default_factory=dict)
    dashboard_url: str = ""
    revision: str = ""
    """Non-empty for an update of an open alert (a changed diagnosis): same dedup key, new
    outbox key."""

    def __post_init__(self) -> None:
        if self.severity not in ("page", "ticket"):
            raise InvalidInput("severity is page or ticket")
        if not isinstance(self.event, Event):
            object.__setattr__(self, "event", Event(str(self.event)))

    @property
    def dedup_key(self) -> str:
        """Stable per SLO and scope: trigger and resolve meet at the receiver, and an incident
        that flaps back open within the hold-down continues the receiver's open alert."""
        return f"infersight/{self.slo}/{self.scope}"[:255]

    @property
    def group(self) -> str:
        """A short, fixed-length name of the SLO and scope (outbox keys start with it)."""
        return group_of(self.slo, self.scope)

    @property
    def key(self) -> str:
        """The outbox idempotency key: one message per incident, event and severity."""
        key = f"{self.group}:{self.incident_id}:{self.event.value}:{self.severity}"
        return f"{key}:{self.revision}"[:256] if self.revision else key

    @property
    def subject(self) -> str:
        """What is alerting, in words: ``SLO chat-ttft``, ``budget acme-monthly`` or ``cost
        step fleet`` (money alerts, ``core.budget``)."""
        if self.slo.startswith(BUDGET_PREFIX):
            return f"budget {self.slo.removeprefix(BUDGET_PREFIX)}"
        if self.slo.startswith(COST_STEP_PREFIX):
            return f"cost step {self.slo.removeprefix(COST_STEP_PREFIX)}"
        return f"SLO {self.slo}"

    @property
    def cause(self) -> str:
        return str(self.diagnosis.get("cause") or "unknown")

    def summary(self) -> str:
        """One line: SLO, scope, severity and the top cause."""
        state = "RESOLVED" if self.event is Event.RESOLVE else self.severity.upper()
        if self.revision and self.event is Event.TRIGGER:
            state += " UPDATE"
        again = self.revision and self.diagnosis.get("burning_again_at")
        burning = "burning again" if again and self.event is Event.TRIGGER else "burning"
        confidence = self.diagnosis.get("confidence")
        why = f"likely {self.cause}"
        if isinstance(confidence, int | float):
            why += f" ({confidence:.0%})"
        where = self.diagnosis.get("instance")
        if where:
            why += f" on {where}"
        source = self.diagnosis.get("kv_source")
        if source:
            sender = "every prefill instance" if source == "*" else source
            why += f" (KV cache from {sender})"
        return f"[{state}] {self.subject} ({self.scope}) {burning}: {why}"

    def evidence_lines(self, limit: int = 5) -> list[str]:
        out = []
        for e in list(self.diagnosis.get("evidence") or [])[:limit]:
            profile = self.diagnosis.get("profile")
            if str(e.get("signal", "")).startswith("profile:") and isinstance(profile, dict):
                # A profile's share (``alerts.diagnose.with_profile``): its sentence.
                out.append(f"profile: {profile.get('sentence') or e.get('signal')}")
                continue
            ratio = e.get("ratio")
            shown = f"×{ratio:.2f}" if isinstance(ratio, int | float) else "new"
            now, before = _num(e.get("current")), _num(e.get("baseline"))
            out.append(f"{e.get('signal')}: {now} vs {before} ({shown})")
        return out

    def missing_lines(self, limit: int = 5) -> list[str]:
        """What the diagnosis could not check for want of telemetry (``missing_evidence``)."""
        items = self.diagnosis.get("missing_evidence") or []
        if not isinstance(items, list | tuple):
            return []
        return [str(item) for item in items[:limit]]


def group_of(slo: str, scope: str) -> str:
    """``Notification.group`` of an SLO and scope."""
    return hashlib.sha256(f"{slo}\0{scope}".encode()).hexdigest()[:16]


def incident_keys(slo: str, scope: str, incident_id: int) -> str:
    """The SQL LIKE pattern of the outbox keys of one incident's notifications."""
    return f"{group_of(slo, scope)}:{incident_id}:%"


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, int | float) else "n/a"


@dataclass(frozen=True, slots=True)
class SendResult:
    ok: bool
    retryable: bool = False
    retry_after: str | None = None
    error: str = ""


class Notifier(Protocol):
    name: str
    deduplicates: bool
    """Whether the receiver absorbs the same message sent twice (PagerDuty's ``dedup_key``,
    Alertmanager's labels): an attempt a crash interrupted is then sent again (at least once);
    otherwise (Slack, a plain webhook) it is not (at most once)."""

    def render(self, notification: Notification) -> dict[str, Any]: ...

    def send(self, payload: Mapping[str, Any]) -> SendResult: ...


def post_json(
    client: httpx.Client, url: str, body: Any, headers: Mapping[str, str] | None = None
) -> SendResult:
    """POST ``body`` as JSON and classify the answer (the URL never appears in errors).

    A transport error is retryable. One raised before the request left (no connection) lost
    nothing; one raised after it was written (a read timeout, a dropped connection) may follow
    a delivery the answer of which never came, so its retry may reach the receiver twice: at
    least once, which a receiver that deduplicates absorbs and a Slack channel shows twice.
    Any other exception (the client's or a bug's) propagates; the dispatcher retries it too
    (``alerts.dispatch.deliver_due``)."""
    try:
        response = client.post(url, json=body, headers=dict(headers or {}))
    except httpx.TransportError as exc:
        return SendResult(False, retryable=True, error=f"transport error: {type(exc).__name__}")
    status = response.status_code
    if 200 <= status < 300:
        return SendResult(True)
    retryable = status == 429 or status >= 500
    return SendResult(
        False,
        retryable=retryable,
        retry_after=response.headers.get("retry-after") if retryable else None,
        error=f"HTTP {status}",
    )


def retry_after_s(value: str | None, now: datetime) -> float | None:
    """``Retry-After`` as seconds from ``now`` (delta-seconds or an HTTP date); ``None`` if absent
    or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now).total_seconds())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
