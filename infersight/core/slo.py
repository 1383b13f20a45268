"""SLO definitions and the arithmetic of SLIs and error budgets.

An SLO says what share of requests (``objective``, e.g. 0.999) matching a ``Selector`` must be
*good* over a rolling ``window`` (e.g. 28 days). Two SLIs exist:

* availability — a request is good when it did not fail;
* latency — a request is good when its ``metric`` (``ttft``, ``tpot``, ``e2e``, …) is at most
  ``threshold_s`` seconds. Requests that did not report the metric are not counted at all.

A third, goodput, holds several latency targets *together* (``targets``: TTFT, TPOT and
end-to-end seconds, each optional, at least one): a request is good when it succeeded and every
target it reported holds (a measurement the engine did not report fails nothing, as for good
tokens, ``core.goodput``). ``per`` says what an event is: a request (``GoodputUnit.REQUEST``:
good requests ÷ requests) or an output token (``GoodputUnit.TOKEN``: output tokens of good
requests ÷ output tokens). A request fast to its first token but slow to stream, and one slow
to its first token but fast to stream, are both bad here while each single-metric SLO may hold.

The error budget is the share of events allowed to be bad, ``1 − objective``. The burn rate of
a window is its bad share divided by the budget: 1× spends the budget exactly over the SLO
window, 14.4× spends 2 % of a 30-day budget in one hour. Spec *files* (YAML/JSON, OpenSLO) are
parsed at the edge into ``SloSpec``; this module knows nothing of their format.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.query import LATENCY_METRICS, Selector
from infersight.core.records import RequestRecord

NAME_PATTERN: Final = re.compile(r"[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?")
MIN_WINDOW: Final = timedelta(hours=1)
MAX_WINDOW: Final = timedelta(days=90)


class SliKind(StrEnum):
    AVAILABILITY = "availability"
    LATENCY = "latency"
    GOODPUT = "goodput"


class GoodputUnit(StrEnum):
    """What one event of a goodput SLI is."""

    REQUEST = "request"
    TOKEN = "token"  # noqa: S105 (an event unit, not a secret)


#: The metrics a goodput SLI may hold a request to (``targets``), with their record field.
GOODPUT_METRICS: Final = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


@dataclass(frozen=True, slots=True)
class Sli:
    """What makes one request good."""

    kind: SliKind
    metric: str | None = None
    threshold_s: float | None = None
    targets: tuple[tuple[str, float], ...] = ()
    """Goodput only: (metric, seconds) pairs that must hold together, in ``GOODPUT_METRICS``
    order."""
    per: GoodputUnit | None = None
    """Goodput only: what an event is (a request, or an output token)."""

    def __post_init__(self) -> None:
        if not isinstance(self.kind, SliKind):
            try:
                object.__setattr__(self, "kind", SliKind(str(self.kind)))
            except ValueError:
                raise InvalidInput(
                    f"unknown SLI kind {self.kind!r}",
                    details={"allowed": [k.value for k in SliKind]},
                ) from None
        if self.kind is SliKind.GOODPUT:
            self._check_goodput()
            return
        if self.targets or self.per is not None:
            raise InvalidInput("only a goodput SLI takes targets and per")
        if self.kind is SliKind.AVAILABILITY:
            if self.metric is not None or self.threshold_s is not None:
                raise InvalidInput("an availability SLI takes no metric or threshold")
            return
        if self.metric not in LATENCY_METRICS:
            raise InvalidInput(
                f"unknown latency metric {self.metric!r}",
                details={"allowed": sorted(LATENCY_METRICS)},
            )
        threshold = self.threshold_s
        if threshold is None or not math.isfinite(threshold) or threshold <= 0:
            raise InvalidInput("a latency SLI needs a positive threshold in seconds")

    def _check_goodput(self) -> None:
        if self.metric is not None or self.threshold_s is not None:
            raise InvalidInput("a goodput SLI takes targets, not a metric and threshold")
        try:
            per = GoodputUnit(str(self.per or GoodputUnit.REQUEST))
        except ValueError:
            raise InvalidInput(
                f"unknown goodput unit {self.per!r}",
                details={"allowed": [u.value for u in GoodputUnit]},
            ) from None
        object.__setattr__(self, "per", per)
        seen: dict[str, float] = {}
        for pair in self.targets:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise InvalidInput("goodput targets are (metric, seconds) pairs")
            metric, seconds = pair
            if metric not in GOODPUT_METRICS:
                raise InvalidInput(
                    f"a goodput SLI cannot hold {metric!r}",
                    details={"allowed": list(GOODPUT_METRICS)},
                )
            if metric in seen:
                raise InvalidInput(f"goodput target {metric!r} given twice")
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, int | float)
                or not math.isfinite(seconds)
                or seconds <= 0
            ):
                raise InvalidInput(f"goodput target {metric!r} needs a positive number of seconds")
            seen[metric] = float(seconds)
        if not seen:
            raise InvalidInput("a goodput SLI needs at least one target (ttft, tpot or e2e)")
        ordered = tuple((m, seen[m]) for m in GOODPUT_METRICS if m in seen)
        object.__setattr__(self, "targets", ordered)

    @property
    def column(self) -> str | None:
        """The record field a latency SLI reads (``ttft`` → ``ttft_s``)."""
        return LATENCY_METRICS[self.metric] if self.metric is not None else None

    @property
    def limits(self) -> tuple[tuple[str, float], ...]:
        """Goodput: (record field, seconds) of each target (``ttft`` → ``ttft_s``)."""
        return tuple((GOODPUT_METRICS[m], s) for m, s in self.targets)


def goodput_sli(
    *,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    e2e_s: float | None = None,
    per: GoodputUnit | str = GoodputUnit.REQUEST,
) -> Sli:
    """A goodput SLI from its targets in seconds (``None``: no target on that metric)."""
    given = {"ttft": ttft_s, "tpot": tpot_s, "e2e": e2e_s}
    return Sli(
        SliKind.GOODPUT,
        targets=tuple((m, s) for m, s in given.items() if s is not None),
        per=GoodputUnit(str(per)),
    )


def seconds_text(value: float, *, compact: bool = False) -> str:
    """A target in seconds as people read it: ``2 s``, ``100 ms``, ``250 µs`` (four significant
    digits; ``compact``: no space, ``100ms``)."""
    if value >= 1:
        number, unit = f"{value:.4g}", "s"
    elif value >= 1e-3:
        number, unit = f"{value * 1e3:.4g}", "ms"
    else:
        number, unit = f"{value * 1e6:.4g}", "µs"
    return f"{number}{'' if compact else ' '}{unit}"


def targets_text(sli: Sli, *, compact: bool = False) -> str:
    """What a goodput SLI holds a request to, every target together: ``TTFT ≤ 2 s and TPOT ≤
    100 ms`` (``compact``, for a table's cell: ``ttft≤2s,tpot≤100ms``). The one wording of the
    targets: the dashboard, the alert rules' descriptions and ``infersight slo list`` use it."""
    if compact:
        return ",".join(f"{m}≤{seconds_text(s, compact=True)}" for m, s in sli.targets)
    return " and ".join(f"{m.upper()} ≤ {seconds_text(s)}" for m, s in sli.targets)


def is_good(record: RequestRecord, sli: Sli) -> bool:
    """Whether ``record`` is a good request under a goodput SLI: it succeeded and every target
    it reported holds."""
    if record.is_error:
        return False
    for field_name, limit in sli.limits:
        value = getattr(record, field_name)
        if value is not None and value > limit:
            return False
    return True


@dataclass(frozen=True, slots=True)
class SloSpec:
    """One service level objective, as stored and evaluated."""

    name: str
    sli: Sli
    objective: float
    window: timedelta
    selector: Selector = field(default_factory=Selector)
    description: str = ""

    def __post_init__(self) -> None:
        if not NAME_PATTERN.fullmatch(self.name):
            raise InvalidInput(
                "an SLO name is 1–128 lowercase letters, digits, '.', '_' or '-', "
                "starting and ending with a letter or digit",
                details={"name": self.name[:140]},
            )
        if not math.isfinite(self.objective) or not 0.0 < self.objective < 1.0:
            raise InvalidInput(
                "objective must be a fraction strictly between 0 and 1 (e.g. 0.999)",
                details={"objective": self.objective},
            )
        if not MIN_WINDOW <= self.window <= MAX_WINDOW:
            raise InvalidInput(
                "the SLO window must be between 1 hour and 90 days",
                details={"window_s": self.window.total_seconds()},
            )
        if len(self.description) > 1024:
            raise InvalidInput("description longer than 1024 characters")

    @property
    def error_budget(self) -> float:
        """The share of events allowed to be bad."""
        return 1.0 - self.objective

    @property
    def scope(self) -> str:
        return scope_of(self.selector)


def scope_of(selector: Selector) -> str:
    """A stable text for the requests a selector covers: ``model=a,tenant=b`` or ``*``."""
    return ",".join(f"{name}={value}" for name, value in selector.items()) or "*"


@dataclass(frozen=True, slots=True)
class EventCounts:
    """Events over one window: all that count for the SLI, and the bad ones among them."""

    total: int
    bad: int

    def __post_init__(self) -> None:
        if self.total < 0 or not 0 <= self.bad <= self.total:
            raise InvalidInput(
                "event counts need 0 ≤ bad ≤ total", details={"total": self.total, "bad": self.bad}
            )

    @property
    def good(self) -> int:
        return self.total - self.bad

    def __add__(self, other: EventCounts) -> EventCounts:
        return EventCounts(self.total + other.total, self.bad + other.bad)


NO_EVENTS: Final = EventCounts(0, 0)


def sli_value(counts: EventCounts) -> float | None:
    """The share of good events, or ``None`` when there were none."""
    return counts.good / counts.total if counts.total else None


def burn_rate(counts: EventCounts, objective: float) -> float:
    """Bad share ÷ error budget; a window without events burns nothing."""
    if not counts.total:
        return 0.0
    return (counts.bad / counts.total) / (1.0 - objective)


def budget_remaining(counts: EventCounts, objective: float) -> float:
    """Share of the SLO window's error budget still unspent, in [0, 1].

    A window that spent more than its budget has 0 left (the overspend is visible in the SLI
    and the burn rate; a negative budget would only confuse a gauge).
    """
    return min(1.0, max(0.0, 1.0 - burn_rate(counts, objective)))


def count_events(records: Iterable[RequestRecord], sli: Sli) -> EventCounts:
    """Events and bad events among ``records`` (the reference the store's counts must equal)."""
    total = bad = 0
    column = sli.column
    if sli.kind is SliKind.GOODPUT:
        for record in records:
            weight = 1 if sli.per is GoodputUnit.REQUEST else (record.output_tokens or 0)
            total += weight
            bad += 0 if is_good(record, sli) else weight
        return EventCounts(total, bad)
    for record in records:
        if column is None:
            total += 1
            bad += record.is_error
            continue
        value = getattr(record, column)
        if value is None:
            continue
        total += 1
        bad += value > (sli.threshold_s or 0.0)
    return EventCounts(total, bad)
