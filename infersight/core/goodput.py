"""Good tokens: the latency limits a request must meet for its tokens to count as good.

A good token is a token of a successful request that was *within its SLO*: its TTFT, TPOT and
end-to-end latency each at most the threshold of every latency SLO on that metric, and every
target of every goodput SLO (``core.slo.SliKind.GOODPUT``) on it, whose selector covers the
request's series (model, instance, tenant, priority). Several SLOs on one metric give the
tightest threshold; SLOs on other metrics (queue, prefill, …) describe the
server's inside, not what a user waits for, and do not make a token bad. A series no latency
SLO covers falls back to the cost model's ``goodRequest`` limits, and every answer says which
basis (``slo`` or ``cost_model``) and which limits it used. A measurement the engine did not
report does not fail a request.

Limits are the SLOs in force when a question is asked, as an SLO's compliance is: changing an
SLO re-measures the past (``storage.good_tokens`` keeps counts per set of limits, so hours
already counted under the new limits are reused and others are counted again from raw rows).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.slo import GOODPUT_METRICS, Sli, SliKind, SloSpec

#: The ``GoodLimits`` fields: the record fields of the metrics a good request is held to.
_FIELDS: Final = tuple(GOODPUT_METRICS.values())


class GoodBasis(StrEnum):
    SLO = "slo"
    COST_MODEL = "cost_model"


@dataclass(frozen=True, slots=True)
class GoodLimits:
    """Seconds a request's TTFT, TPOT and end-to-end latency may take (``None``: no limit)."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value <= 0):
                raise InvalidInput(f"good limit {name} must be a positive number of seconds")

    @property
    def key(self) -> tuple[float, float, float]:
        """The limits as stored (``storage.good_tokens``): 0 stands for no limit."""
        return (self.ttft_s or 0.0, self.tpot_s or 0.0, self.e2e_s or 0.0)

    def items(self) -> list[tuple[str, float]]:
        """(record field, limit) of the limits set."""
        return [(f, v) for f in _FIELDS if (v := getattr(self, f)) is not None]

    def as_dict(self) -> dict[str, float | None]:
        return {name: getattr(self, name) for name in _FIELDS}


@dataclass(frozen=True, slots=True)
class GoodRule:
    """The limits a series is held to and where they come from (SLO names when SLOs)."""

    limits: GoodLimits
    basis: GoodBasis
    slos: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GoodPolicy:
    """Which limits hold for a series: its covering latency SLOs, else ``fallback``."""

    slos: tuple[SloSpec, ...]
    fallback: GoodLimits

    @classmethod
    def of(cls, slos: Iterable[SloSpec], fallback: GoodLimits) -> GoodPolicy:
        latency = (s for s in slos if _limits(s.sli))
        return cls(tuple(sorted(latency, key=lambda s: s.name)), fallback)

    def rule_for(self, labels: Mapping[str, str]) -> GoodRule:
        limits: dict[str, float] = {}
        names: list[str] = []
        for slo in self.slos:
            if not slo.selector.matches(labels):
                continue
            for field, threshold in _limits(slo.sli):
                limits[field] = min(limits.get(field, math.inf), threshold)
            names.append(slo.name)
        if not names:
            return GoodRule(self.fallback, GoodBasis.COST_MODEL)
        return GoodRule(GoodLimits(**limits), GoodBasis.SLO, tuple(names))


def _limits(sli: Sli) -> tuple[tuple[str, float], ...]:
    """The (record field, seconds) limits an SLI holds a good request to: a goodput SLI's
    ``Sli.limits``, a latency SLI's threshold on a metric a user waits for (none for
    availability, nor for a latency SLI on the server's inside)."""
    if sli.kind is SliKind.GOODPUT:
        return sli.limits
    if sli.kind is SliKind.LATENCY and sli.column in _FIELDS and sli.threshold_s:
        return ((str(sli.column), sli.threshold_s),)
    return ()


def limits_of(sli: Sli) -> GoodLimits:
    """A goodput SLI's targets as ``GoodLimits`` (what its good tokens are counted under)."""
    return GoodLimits(**dict(_limits(sli)))


def basis_of(bases: Iterable[str]) -> str:
    """One word for the bases of a group of series: ``slo``, ``cost_model``, ``mixed`` (or
    ``""`` when there are none)."""
    found = set(bases)
    if len(found) > 1:
        return "mixed"
    return found.pop() if found else ""
