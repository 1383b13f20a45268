"""Multi-window, multi-burn-rate alert policy and alert state with hysteresis.

The policy is data (``core/data/burn_rate_policy.yaml``, the SRE workbook's table): each rule
has a severity, a burn-rate threshold and a long and a short window. A rule *fires* when both
windows burn at least at its rate and the long window holds at least ``min_events`` events.

Alert state moves with hysteresis: an alert opens at the most severe firing rule, escalates
when a more severe rule fires, and holds its severity as long as one of that severity's rules
still burns at ``resolve_ratio`` × its rate over both of its windows (the minimum-events guard
is not applied to holding). When nothing holds it steps down to whatever still opens an alert
(below), or resolves. After a recovery the short window clears first, so an outage opens one
alert that resolves within the short window, and a burn rate hovering at a threshold does not
open and close an alert at every evaluation.

The long windows remember a burn long after it stopped: a five-minute outage keeps a 2-hour
and a 6-hour window above the ticket rates for hours (the more so on a young store, whose
"1 day" holds only what it has). So, with ``resolve_after`` set (the shipped policy: 5
minutes), a burn must be *present* to open or escalate an alert (the policy's shortest window
burns at the rule's rate too), and an alert whose symptom has *cleared* (``recovered``: the
shortest window holds events and burns below every rate of its severity) for
``resolve_after`` resolves — or steps down to a severity whose burn is present — whatever its
long windows still hold. infersight keeps one alert per SLO and scope at its highest
severity; the exported Prometheus rules (``alerts.prometheus_rules``) keep one per severity,
each with its own hold, so a ticket there may outlast infersight's page by up to
``resolve_after`` (Alertmanager's inhibit rule keeps it quiet while the page fires).

Incidents are the persisted form of an alert; ``IncidentListener`` is the seam through which
diagnosis and notifications learn of every change.

Everything is pure: counts per window and ``now`` come in, decisions come out.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final, Protocol

from infersight.core.errors import InvalidInput
from infersight.core.slo import EventCounts, burn_rate
from infersight.core.window import format_duration, parse_duration


class Severity(StrEnum):
    TICKET = "ticket"
    PAGE = "page"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK: Final = {Severity.TICKET: 1, Severity.PAGE: 2}


def _rank(severity: Severity | None) -> int:
    return 0 if severity is None else severity.rank


@dataclass(frozen=True, slots=True)
class Rule:
    severity: Severity
    burn_rate: float
    long_window: timedelta
    short_window: timedelta

    def __post_init__(self) -> None:
        if not isinstance(self.severity, Severity):
            object.__setattr__(self, "severity", Severity(str(self.severity)))
        if not math.isfinite(self.burn_rate) or self.burn_rate <= 0:
            raise InvalidInput("a rule's burn rate must be positive")
        if not timedelta(0) < self.short_window < self.long_window:
            raise InvalidInput("a rule's short window must be shorter than its long window")


@dataclass(frozen=True, slots=True)
class Policy:
    windows: tuple[timedelta, ...]
    rules: tuple[Rule, ...]
    min_events: int = 0
    resolve_ratio: float = 1.0
    """An open alert holds while its rule still burns at ``resolve_ratio`` × the rule's rate."""
    resolve_after: timedelta = timedelta(0)
    """An open alert whose symptom has cleared for this long resolves, and only a burn that is
    present now opens one (``timedelta(0)``: an alert resolves only when nothing holds it)."""

    def __post_init__(self) -> None:
        if not self.rules:
            raise InvalidInput("a burn-rate policy needs at least one rule")
        if self.min_events < 0:
            raise InvalidInput("min_events must not be negative")
        if not 0.0 < self.resolve_ratio <= 1.0:
            raise InvalidInput("resolve_ratio must be in (0, 1]")
        if self.resolve_after < timedelta(0):
            raise InvalidInput("resolve_after must not be negative")
        if list(self.windows) != sorted(set(self.windows)):
            raise InvalidInput("policy windows must be distinct and shortest first")
        missing = {w for r in self.rules for w in (r.long_window, r.short_window)} - set(
            self.windows
        )
        if missing:
            raise InvalidInput(
                "every rule window must be one of the policy's windows",
                details={"missing": sorted(format_duration(w) for w in missing)},
            )

    @property
    def longest(self) -> timedelta:
        return self.windows[-1]


def policy_from_mapping(data: Mapping[str, Any]) -> Policy:
    """Build a ``Policy`` from the policy file's parsed contents."""
    try:
        if data.get("version") != 1:
            raise InvalidInput("unsupported burn-rate policy version", details={"version": 1})
        rules = tuple(
            Rule(
                severity=Severity(str(r["severity"])),
                burn_rate=float(r["burn_rate"]),
                long_window=parse_duration(str(r["long_window"])),
                short_window=parse_duration(str(r["short_window"])),
            )
            for r in data["rules"]
        )
        windows = tuple(parse_duration(str(w)) for w in data["windows"])
        return Policy(
            windows,
            rules,
            min_events=int(data.get("min_events", 0)),
            resolve_ratio=float(data.get("resolve_ratio", 1.0)),
            resolve_after=parse_duration(str(data["resolve_after"]))
            if "resolve_after" in data
            else timedelta(0),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"invalid burn-rate policy: {exc}") from None


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Burn rates per window and what the policy makes of them at one instant."""

    burn_rates: Mapping[timedelta, float]
    counts: Mapping[timedelta, EventCounts]
    firing: Severity | None
    fired_rules: tuple[Rule, ...] = field(default_factory=tuple)
    holding: frozenset[Severity] = frozenset()
    """Severities with a rule that burns at ``resolve_ratio`` × its rate over both windows."""
    opening: Severity | None = None
    """The severity a closed alert opens at (or an open one escalates to): ``firing``, or with
    the policy's ``resolve_after`` set, the most severe fired rule whose burn is present now
    (the shortest window burns at its rate too)."""
    cleared: frozenset[Severity] = frozenset()
    """Severities whose symptom has cleared: the shortest window holds events and burns below
    all their rates."""
    resolve_after: timedelta = timedelta(0)


def evaluate(
    policy: Policy, objective: float, counts: Mapping[timedelta, EventCounts]
) -> Evaluation:
    """Apply ``policy`` to event counts per window (every policy window must be present)."""
    missing = [format_duration(w) for w in policy.windows if w not in counts]
    if missing:
        raise InvalidInput("counts are missing for some windows", details={"missing": missing})
    rates = {w: burn_rate(counts[w], objective) for w in policy.windows}
    fired = tuple(
        rule
        for rule in policy.rules
        if counts[rule.long_window].total >= policy.min_events
        and rates[rule.long_window] >= rule.burn_rate
        and rates[rule.short_window] >= rule.burn_rate
    )
    hold = policy.resolve_ratio
    holding = frozenset(
        rule.severity
        for rule in policy.rules
        if rates[rule.long_window] >= rule.burn_rate * hold
        and rates[rule.short_window] >= rule.burn_rate * hold
    )
    firing = max((r.severity for r in fired), key=_rank, default=None)
    shortest = rates[policy.windows[0]]
    if policy.resolve_after:
        present = (r.severity for r in fired if shortest >= r.burn_rate)
        opening = max(present, key=_rank, default=None)
    else:
        opening = firing
    # A shortest window without events is no evidence that the symptom cleared (a service
    # whose traffic stopped, or a trickle that fails every time, is not seen to recover).
    heard = counts[policy.windows[0]].total > 0
    cleared = frozenset(
        severity
        for severity in {r.severity for r in policy.rules}
        if heard and all(shortest < r.burn_rate for r in policy.rules if r.severity is severity)
    )
    return Evaluation(
        rates, dict(counts), firing, fired, holding, opening, cleared, policy.resolve_after
    )


class Transition(StrEnum):
    NONE = "none"
    OPENED = "opened"
    ESCALATED = "escalated"
    DEESCALATED = "deescalated"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class AlertState:
    """The alert of one SLO and scope: its severity (``None``: not alerting) and since when."""

    severity: Severity | None = None
    since: datetime | None = None
    recovering_since: datetime | None = None
    """Since when the symptom has cleared while the alert still holds (``recovered``)."""

    def __post_init__(self) -> None:
        if (self.severity is None) != (self.since is None):
            raise InvalidInput("an alert state has a severity and a start time, or neither")
        if self.recovering_since is not None and self.severity is None:
            raise InvalidInput("only an open alert can be recovering")

    @property
    def active(self) -> bool:
        return self.severity is not None


def step(state: AlertState, evaluation: Evaluation, now: datetime) -> tuple[AlertState, Transition]:
    """The next alert state after ``evaluation`` at ``now``, and how it changed.

    An open alert holds its severity while one of its rules holds; with ``resolve_after`` set,
    only until its symptom has stayed cleared that long (``recovering_since``), after which
    only a burn present now keeps it open."""
    held = state.severity if state.severity in evaluation.holding else None
    since = state.recovering_since or now
    settled = bool(evaluation.resolve_after) and now - since >= evaluation.resolve_after
    if settled and state.severity in evaluation.cleared:
        held = None
    new = max((evaluation.opening, held), key=_rank)
    recovering = since if new is not None and new in evaluation.cleared else None
    if new == state.severity:
        return dataclasses.replace(state, recovering_since=recovering), Transition.NONE
    if new is None:
        return AlertState(), Transition.RESOLVED
    if state.severity is None:
        return AlertState(new, now, recovering), Transition.OPENED
    change = Transition.ESCALATED if _rank(new) > _rank(state.severity) else Transition.DEESCALATED
    return AlertState(new, state.since, recovering), change


def recovered(policy: Policy, evaluation: Evaluation, severity: Severity | None) -> bool:
    """Whether the symptom of an alert at ``severity`` has cleared (``Evaluation.cleared``):
    the policy's shortest window holds events and burns below every rate of that severity's
    rules.

    The long windows (and the hysteresis) keep the alert open for a while after the fault
    clears; the shortest window says what is burning now. An incident in that state is
    *recovering*: its healthy minutes are not diagnosed again."""
    return severity is None or severity in evaluation.cleared


class IncidentState(StrEnum):
    FIRING = "firing"
    RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Incident:
    """One alert of one SLO and scope, from its opening to its resolution."""

    id: int
    slo: str
    scope: str
    severity: Severity
    state: IncidentState
    opened_at: datetime
    updated_at: datetime
    resolved_at: datetime | None = None
    peak_burn_rate: float = 0.0
    burn_rates: Mapping[str, float] = field(default_factory=dict)
    """The burn rate per window (``"5m"`` → rate) at the last update."""
    recovering_since: datetime | None = None
    """Since when the symptom has cleared (``recovered``) while the alert still holds."""

    def __post_init__(self) -> None:
        if not isinstance(self.severity, Severity):
            object.__setattr__(self, "severity", Severity(str(self.severity)))
        if not isinstance(self.state, IncidentState):
            object.__setattr__(self, "state", IncidentState(str(self.state)))
        if (self.state is IncidentState.RESOLVED) != (self.resolved_at is not None):
            raise InvalidInput("a resolved incident has a resolution time, a firing one none")
        if self.recovering_since is not None and self.state is not IncidentState.FIRING:
            raise InvalidInput("only a firing incident can be recovering")

    @property
    def phase(self) -> str:
        """``firing``, ``recovering`` (the symptom cleared, the alert still holds) or
        ``resolved``."""
        if self.state is IncidentState.RESOLVED:
            return "resolved"
        return "recovering" if self.recovering_since is not None else "firing"


class IncidentListener(Protocol):
    """Told about every incident change after it is stored (diagnosis, notifications).

    ``transition`` is ``OPENED``, ``ESCALATED``, ``DEESCALATED`` or ``RESOLVED``. A listener
    must not raise for expected failures; the evaluation job logs and carries on if it does.
    """

    def on_incident(self, incident: Incident, transition: Transition) -> None: ...
