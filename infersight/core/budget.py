"""Budgets and money alerts: the pure math (issue 34).

A ``Budget`` is an amount of money for a calendar period (a UTC month or an ISO week), for the
fleet or one tenant or model. Its alerts are judged as SLO burn-rate alerts are
(``core.burn``): the *burn rate* of a window is the money spent in it over what the budget
allows for a window that long (``amount × window / period``), so a burn rate of 1 spends the
budget exactly by the period's end, and a rule fires when its long and its short window both
burn at its rate. Besides the rules, a budget alerts when the period's spend crosses one of its
``thresholds`` (fractions of the amount: below 1 a ticket, 1 or more a page); spend never falls
within a period, so such an alert holds until the period ends or a new version of the budget
raises the amount.

The cost-step judgement (``judge_step``) compares the cost per million tokens of a recent
window with a baseline (the same hours of the previous days) and splits the ratio exactly into
three factors whose product it is::

    cost/Mtok = (cost / GPU-hour) × (GPU-hours / busy GPU-hours) × (busy GPU-hours / Mtok)
                 price              idle GPUs                      throughput

The largest factor is the likely cause: ``price_change`` (the cost model changed: its version
differs), ``price_mix`` (same prices, dearer GPUs in the mix), ``idle_gpus`` or
``lower_throughput`` (``fewer_tokens_per_request`` when tokens per request fell too).

Nothing here reads a clock, the store or the environment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

from infersight.core.burn import Evaluation, Rule, Severity
from infersight.core.errors import InvalidInput
from infersight.core.slo import NAME_PATTERN, EventCounts
from infersight.core.window import format_duration

#: The names of the incidents money alerts open (``incidents.slo``): never an SLO's name.
BUDGET_PREFIX: Final = "budget:"
COST_STEP_PREFIX: Final = "cost-step:"
#: The dimensions a budget may be scoped to (none: the fleet).
BUDGET_DIMENSIONS: Final = ("tenant", "team", "model")
#: Default burn rules: spending 6× the budget's rate over 6 h and 1 h pages; 1.5× over 3 d and
#: 6 h opens a ticket.
DEFAULT_RULES: Final = (
    Rule(Severity.PAGE, 6.0, timedelta(hours=6), timedelta(hours=1)),
    Rule(Severity.TICKET, 1.5, timedelta(days=3), timedelta(hours=6)),
)
DEFAULT_THRESHOLDS: Final = (Decimal("0.8"), Decimal("1"))
#: An open burn alert holds while its rule burns at this share of its rate (hysteresis).
RESOLVE_RATIO: Final = 0.9


def is_money_alert(slo: str) -> bool:
    """Whether an incident's ``slo`` names a budget or cost-step alert, not an SLO."""
    return slo.startswith((BUDGET_PREFIX, COST_STEP_PREFIX))


class Period(StrEnum):
    MONTHLY = "monthly"
    WEEKLY = "weekly"


def period_bounds(period: Period, at: datetime) -> tuple[datetime, datetime]:
    """The calendar period (UTC) holding ``at``: a month, or an ISO week from Monday 00:00."""
    at = at.astimezone(UTC)
    if period is Period.WEEKLY:
        start = datetime(at.year, at.month, at.day, tzinfo=UTC) - timedelta(days=at.weekday())
        return start, start + timedelta(days=7)
    start = datetime(at.year, at.month, 1, tzinfo=UTC)
    end = datetime(at.year + (at.month == 12), at.month % 12 + 1, 1, tzinfo=UTC)
    return start, end


@dataclass(frozen=True, slots=True)
class Budget:
    """One version of a budget document."""

    name: str
    amount: Decimal
    currency: str
    period: Period = Period.MONTHLY
    scope: Mapping[str, str] = field(default_factory=dict)
    """``{"tenant": "acme"}``, ``{"model": "llama-70b"}`` or ``{}`` (the fleet)."""
    thresholds: tuple[Decimal, ...] = DEFAULT_THRESHOLDS
    rules: tuple[Rule, ...] = DEFAULT_RULES
    description: str = ""
    version: int = 0
    """The stored version (1, 2, …); 0 before it is stored."""

    def __post_init__(self) -> None:
        if len(self.name) > 100 or not NAME_PATTERN.fullmatch(self.name):
            raise InvalidInput(
                "a budget's name is 1 to 100 lower-case letters, digits, '.', '_' or '-', "
                "starting and ending with a letter or digit",
                details={"name": self.name[:128]},
            )
        if not self.amount.is_finite() or self.amount <= 0:
            raise InvalidInput("a budget's amount must be positive")
        unknown = set(self.scope) - set(BUDGET_DIMENSIONS)
        if unknown:
            raise InvalidInput(
                "a budget is scoped to a tenant, a team, a model or the fleet",
                details={"unknown": sorted(unknown), "allowed": list(BUDGET_DIMENSIONS)},
            )
        if len(self.scope) > 1:
            raise InvalidInput(
                "a budget is scoped to one tenant, one team or one model, not to two of them"
            )
        if any(not v or len(v) > 256 for v in self.scope.values()):
            raise InvalidInput("a budget's tenant, team or model is 1 to 256 characters")
        if any(not t.is_finite() or t <= 0 or t > 10 for t in self.thresholds):
            raise InvalidInput("thresholds are fractions of the amount, above 0 and at most 10")
        if not self.rules and not self.thresholds:
            raise InvalidInput("a budget needs thresholds or burn rules to alert on")

    @property
    def scope_text(self) -> str:
        """``tenant=acme``, ``model=x`` or ``*`` (the fleet): the incident's scope."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.scope.items())) or "*"

    @property
    def alert_name(self) -> str:
        return f"{BUDGET_PREFIX}{self.name}"

    @property
    def windows(self) -> tuple[timedelta, ...]:
        """Every window the rules read, shortest first."""
        return tuple(sorted({w for r in self.rules for w in (r.long_window, r.short_window)}))


@dataclass(frozen=True, slots=True)
class BudgetFigures:
    """A budget's spend at one instant: the period so far and the rules' windows."""

    budget: Budget
    at: datetime
    start: datetime
    end: datetime
    spent: Decimal
    window_spend: Mapping[timedelta, Decimal]

    @property
    def period_s(self) -> float:
        return (self.end - self.start).total_seconds()

    @property
    def elapsed(self) -> float:
        """The share of the period gone (0..1)."""
        return min(1.0, max(0.0, (self.at - self.start).total_seconds() / self.period_s))

    def _elapsed_exact(self) -> Decimal:
        gone = min(max(self.at, self.start), self.end) - self.start
        return Decimal(gone // timedelta(microseconds=1)) / Decimal(
            (self.end - self.start) // timedelta(microseconds=1)
        )

    @property
    def expected(self) -> Decimal:
        """What the linear curve allows spent by now."""
        return self.budget.amount * self._elapsed_exact()

    @property
    def projected(self) -> Decimal | None:
        """The period's spend if it goes on at its pace so far (``None`` at its first instant)."""
        gone = min(max(self.at, self.start), self.end) - self.start
        if gone <= timedelta(0):
            return None
        us = timedelta(microseconds=1)
        return self.spent * Decimal((self.end - self.start) // us) / Decimal(gone // us)

    @property
    def spent_fraction(self) -> float:
        return float(self.spent / self.budget.amount)

    def allowed(self, window: timedelta) -> Decimal:
        """The budget's share for a window this long (burn rate 1)."""
        return self.budget.amount * Decimal(window.total_seconds()) / Decimal(self.period_s)

    def burn_rates(self) -> dict[timedelta, float]:
        return {w: float(s / self.allowed(w)) for w, s in self.window_spend.items()}

    def crossed(self) -> Decimal | None:
        """The highest threshold the period's spend has reached, if any."""
        reached = [t for t in self.budget.thresholds if self.spent >= self.budget.amount * t]
        return max(reached, default=None)


def _threshold_severity(threshold: Decimal | None) -> Severity | None:
    if threshold is None:
        return None
    return Severity.PAGE if threshold >= 1 else Severity.TICKET


_RANK: Final = {None: 0, Severity.TICKET: 1, Severity.PAGE: 2}


def _top(*severities: Severity | None) -> Severity | None:
    return max(severities, key=lambda s: _RANK[s])


def evaluate_budget(figures: BudgetFigures) -> Evaluation:
    """The budget's alert judgement, in ``core.burn``'s terms (``core.burn.step`` steps it).

    A rule fires when both its windows burn at its rate and holds at ``RESOLVE_RATIO`` × it; a
    crossed threshold fires and holds at its severity; an alert clears when neither holds."""
    budget = figures.budget
    rates = figures.burn_rates()
    fired = tuple(
        r
        for r in budget.rules
        if rates[r.long_window] >= r.burn_rate and rates[r.short_window] >= r.burn_rate
    )
    held = {
        r.severity
        for r in budget.rules
        if rates[r.long_window] >= r.burn_rate * RESOLVE_RATIO
        and rates[r.short_window] >= r.burn_rate * RESOLVE_RATIO
    }
    by_threshold = _threshold_severity(figures.crossed())
    firing = _top(*(r.severity for r in fired), by_threshold)
    if by_threshold is not None:
        # A crossed threshold holds its severity and every lower one.
        held |= {s for s in Severity if s.rank <= by_threshold.rank}
    # ``counts`` carry no events for money; ``core.burn`` only reads them for SLOs.
    counts = {w: EventCounts(0, 0) for w in rates}
    return Evaluation(rates, counts, firing, fired, frozenset(held), firing, frozenset())


def burn_text(rates: Mapping[timedelta, float]) -> dict[str, float]:
    """``{"1h": 2.5, …}``: burn rates keyed as incidents keep them."""
    return {format_duration(w): round(r, 6) for w, r in sorted(rates.items())}


# -- the step of cost per million tokens ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CostSample:
    """A window's cost and usage for one scope (the fleet or one model)."""

    cost: Decimal
    tokens: int
    requests: int
    gpu_hours: Decimal
    idle_gpu_hours: Decimal
    model_version: str = ""
    """Which cost model version priced it (a fingerprint); differs across a price change."""

    @property
    def per_million(self) -> Decimal | None:
        return self.cost * 1_000_000 / self.tokens if self.tokens else None

    @property
    def busy_hours(self) -> Decimal:
        return self.gpu_hours - self.idle_gpu_hours

    @property
    def tokens_per_request(self) -> float | None:
        return self.tokens / self.requests if self.requests else None


class StepCause(StrEnum):
    PRICE_CHANGE = "price_change"
    PRICE_MIX = "price_mix"
    IDLE_GPUS = "idle_gpus"
    LOWER_THROUGHPUT = "lower_throughput"
    FEWER_TOKENS_PER_REQUEST = "fewer_tokens_per_request"


@dataclass(frozen=True, slots=True)
class StepPolicy:
    rise: float = 0.25
    """The step alerts when cost per million tokens is at least this much above the baseline."""
    min_tokens: int = 1_000_000
    """…and the recent window served at least this many tokens (the baseline as many)."""
    resolve_ratio: float = 0.5
    """An open step holds while the rise is at least this share of ``rise``."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rise) and self.rise > 0):
            raise InvalidInput("the cost step's rise must be positive")
        if self.min_tokens < 1:
            raise InvalidInput("the cost step's minimum token volume must be at least 1")


@dataclass(frozen=True, slots=True)
class StepJudgement:
    ratio: float | None
    """Cost per million tokens now over the baseline (``None``: too little volume)."""
    firing: bool
    holding: bool
    cause: StepCause | None
    factors: Mapping[str, float]
    evidence: tuple[Mapping[str, Any], ...]
    versions: tuple[str, str] = ("", "")
    """The cost model versions that priced the window and the baseline (differ: a price
    change)."""


def _ratio(now: Decimal | float, before: Decimal | float) -> float:
    return float(now) / float(before) if before else math.inf


def judge_step(now: CostSample, before: CostSample, policy: StepPolicy) -> StepJudgement:
    """Did cost per million tokens step up from ``before`` to ``now``, and why."""
    if (
        now.tokens < policy.min_tokens
        or before.tokens < policy.min_tokens
        or not now.cost
        or not before.cost
        or now.busy_hours <= 0
        or before.busy_hours <= 0
    ):
        return StepJudgement(None, False, False, None, {}, ())
    per_now, per_before = now.per_million, before.per_million
    assert per_now is not None
    assert per_before is not None
    ratio = _ratio(per_now, per_before)
    price = _ratio(now.cost / now.gpu_hours, before.cost / before.gpu_hours)
    idle = _ratio(now.gpu_hours / now.busy_hours, before.gpu_hours / before.busy_hours)
    throughput = _ratio(now.busy_hours / now.tokens, before.busy_hours / before.tokens)
    factors = {"price": price, "idle": idle, "throughput": throughput}
    changed = now.model_version != before.model_version
    evidence: list[dict[str, Any]] = [
        {
            "signal": "cost_per_million_tokens",
            "current": float(per_now),
            "baseline": float(per_before),
            "ratio": ratio,
        },
        {
            "signal": "cost_per_gpu_hour",
            "current": float(now.cost / now.gpu_hours),
            "baseline": float(before.cost / before.gpu_hours),
            "ratio": price,
        },
        {
            "signal": "idle_share",
            "current": float(now.idle_gpu_hours / now.gpu_hours),
            "baseline": float(before.idle_gpu_hours / before.gpu_hours),
            "ratio": idle,
        },
        {
            "signal": "tokens_per_busy_gpu_hour",
            "current": now.tokens / float(now.busy_hours),
            "baseline": before.tokens / float(before.busy_hours),
            "ratio": 1.0 / throughput if throughput else math.inf,
        },
    ]
    per_request_now, per_request_before = now.tokens_per_request, before.tokens_per_request
    if per_request_now is not None and per_request_before is not None:
        evidence.append(
            {
                "signal": "tokens_per_request",
                "current": per_request_now,
                "baseline": per_request_before,
                "ratio": _ratio(per_request_now, per_request_before),
            }
        )
    biggest = max(factors, key=lambda k: factors[k])
    cause: StepCause
    if biggest == "price":
        cause = StepCause.PRICE_CHANGE if changed else StepCause.PRICE_MIX
    elif biggest == "idle":
        cause = StepCause.IDLE_GPUS
    else:
        fewer = (
            per_request_now is not None
            and per_request_before is not None
            and per_request_now < per_request_before * (1 - policy.rise / 2)
        )
        cause = StepCause.FEWER_TOKENS_PER_REQUEST if fewer else StepCause.LOWER_THROUGHPUT
    firing = ratio >= 1 + policy.rise
    holding = ratio >= 1 + policy.rise * policy.resolve_ratio
    versions = (now.model_version, before.model_version)
    return StepJudgement(ratio, firing, holding, cause, factors, tuple(evidence), versions)


def merge_samples(samples: Sequence[CostSample]) -> CostSample:
    """The sum of windows' samples (the baseline's days), with the version of the first."""
    return CostSample(
        cost=sum((s.cost for s in samples), Decimal(0)),
        tokens=sum(s.tokens for s in samples),
        requests=sum(s.requests for s in samples),
        gpu_hours=sum((s.gpu_hours for s in samples), Decimal(0)),
        idle_gpu_hours=sum((s.idle_gpu_hours for s in samples), Decimal(0)),
        model_version=samples[0].model_version if samples else "",
    )


__all__ = [
    "BUDGET_DIMENSIONS",
    "BUDGET_PREFIX",
    "COST_STEP_PREFIX",
    "DEFAULT_RULES",
    "DEFAULT_THRESHOLDS",
    "Budget",
    "BudgetFigures",
    "CostSample",
    "Period",
    "StepCause",
    "StepJudgement",
    "StepPolicy",
    "burn_text",
    "evaluate_budget",
    "is_money_alert",
    "judge_step",
    "merge_samples",
    "period_bounds",
]
