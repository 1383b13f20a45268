"""Query specifications and answers that cross the storage boundary.

Storage functions take a ``Selector`` and a ``Window`` and return these values; the API turns
them into JSON. Labels are the four grouping labels of the request record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from core.errors import InvalidInput
from core.records import DURATION_FIELDS, GROUP_LABELS, MAX_LABEL_LEN
from core.window import Window

#: Metric names as the API spells them → record field.
LATENCY_METRICS: Final = {name.removesuffix("_s"): name for name in DURATION_FIELDS}
#: Stages whose shares of end-to-end time make up the breakdown, in pipeline order.
STAGES: Final = ("gateway", "preprocess", "queue", "prefill", "decode", "postprocess")


class Method(StrEnum):
    """How quantiles were (or should be) computed."""

    AUTO = "auto"
    EXACT = "exact"
    SKETCH = "sketch"


def check_metric(name: str) -> str:
    if name not in LATENCY_METRICS:
        raise InvalidInput(f"unknown metric {name!r}", details={"allowed": sorted(LATENCY_METRICS)})
    return name


def check_group_by(names: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for name in names:
        if name not in GROUP_LABELS:
            raise InvalidInput(f"cannot group by {name!r}", details={"allowed": list(GROUP_LABELS)})
        if name not in out:
            out.append(name)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Selector:
    """Which requests a query covers; ``None`` means any value of that label."""

    model: str | None = None
    instance: str | None = None
    tenant: str | None = None
    priority: str | None = None

    def __post_init__(self) -> None:
        for name in GROUP_LABELS:
            value = getattr(self, name)
            if value is not None and len(value) > MAX_LABEL_LEN:
                raise InvalidInput(f"{name} filter longer than {MAX_LABEL_LEN} characters")

    def items(self) -> list[tuple[str, str]]:
        """The labels that are pinned, as (name, value) pairs."""
        return [(n, v) for n in GROUP_LABELS if (v := getattr(self, n)) is not None]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(name) == value for name, value in self.items())


@dataclass(frozen=True, slots=True)
class GroupQuantiles:
    labels: Mapping[str, str]
    count: int
    quantiles: Mapping[float, float]


@dataclass(frozen=True, slots=True)
class LatencyResult:
    metric: str
    window: Window
    method: Method
    relative_error: float
    groups: tuple[GroupQuantiles, ...]


@dataclass(frozen=True, slots=True)
class Throughput:
    """Totals over a window for one group; rates divide by the window's length."""

    labels: Mapping[str, str]
    requests: int
    errors: int
    input_tokens: int
    output_tokens: int
    seconds: float

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds

    @property
    def errors_per_s(self) -> float:
        return self.errors / self.seconds

    @property
    def input_tokens_per_s(self) -> float:
        return self.input_tokens / self.seconds

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.seconds

    @property
    def error_ratio(self) -> float | None:
        return self.errors / self.requests if self.requests else None


@dataclass(frozen=True, slots=True)
class StageShare:
    stage: str
    seconds_total: float
    share: float | None
    coverage: float | None
    """Share of the group's requests that reported this stage at all."""


@dataclass(frozen=True, slots=True)
class Breakdown:
    labels: Mapping[str, str]
    requests: int
    e2e_seconds_total: float
    stages: tuple[StageShare, ...] = field(default_factory=tuple)

    @property
    def unaccounted_share(self) -> float | None:
        known = [s.share for s in self.stages if s.share is not None]
        if not self.e2e_seconds_total or not known:
            return None
        return max(0.0, 1.0 - sum(known))
