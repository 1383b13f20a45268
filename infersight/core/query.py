"""Query specifications and answers that cross the storage boundary.

Storage functions take a ``Selector`` and a ``Window`` and return these values; the API turns
them into JSON. Labels are the grouping labels of the request record (``GROUP_LABELS``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Protocol

from infersight.core.errors import InvalidInput
from infersight.core.records import DURATION_FIELDS, GROUP_LABELS, MAX_LABEL_LEN
from infersight.core.window import Window

#: Metric names as the API spells them → record field.
LATENCY_METRICS: Final = {name.removesuffix("_s"): name for name in DURATION_FIELDS}
#: Stages whose shares of end-to-end time make up the breakdown, in the order a request meets
#: them. ``route`` and ``kv_transfer`` are disaggregated
#: serving's (``core.records.Role.DECODE``): the P/D proxy's routing before the prefill leg,
#: and the KV cache's way from the prefill to the decode instance.
STAGES: Final = (
    "gateway",
    "route",
    "preprocess",
    "queue",
    "prefill",
    "kv_transfer",
    "decode",
    "postprocess",
)


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


#: Most tenants a set-valued tenant filter (``Selector.tenants``) may name.
MAX_TENANTS: Final = 256


@dataclass(frozen=True, slots=True)
class Selector:
    """Which requests a query covers; ``None`` means any value of that label.

    ``tenants`` is a set-valued tenant filter: only requests of one of these tenants (a token
    limited to several tenants reads their union, ``api.auth``). It applies together with
    ``tenant`` (both must hold); ``within`` sets it. ``items`` lists only the single-valued
    pins; a reader that filters by hand must also honour ``tenants`` (``matches`` does;
    ``storage.sql.selected`` turns it into ``tenant IN (…)``), and ``narrowed`` says whether
    any filter is set.
    """

    model: str | None = None
    instance: str | None = None
    tenant: str | None = None
    priority: str | None = None
    #: The LoRA adapter ("" pins the base model's own requests).
    adapter: str | None = None
    #: Who the request was for besides its tenant, from its trace (``core.attribution``;
    #: "" pins the requests no gateway or client span named one for).
    team: str | None = None
    workload: str | None = None
    #: Set by ``within`` only (not a constructor argument, so ``Selector(**labels)`` of
    #: label strings stays as it was).
    tenants: frozenset[str] | None = field(default=None, init=False)
    #: Values a label must not have, per label: set by ``excluding`` only (an answer that
    #: folds the values past its top N into one group reads that group with them).
    excluded: tuple[tuple[str, frozenset[str]], ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        for name in GROUP_LABELS:
            value = getattr(self, name)
            if value is not None and len(value) > MAX_LABEL_LEN:
                raise InvalidInput(f"{name} filter longer than {MAX_LABEL_LEN} characters")

    def within(self, tenants: Iterable[str] | None) -> Selector:
        """This selector, further limited to requests of one of ``tenants`` (``None``: as it
        is); ``InvalidInput`` past ``MAX_TENANTS`` tenants or a tenant too long."""
        if tenants is None:
            return self
        chosen = frozenset(tenants)
        if len(chosen) > MAX_TENANTS:
            raise InvalidInput(f"a tenant set names at most {MAX_TENANTS} tenants")
        if any(len(t) > MAX_LABEL_LEN for t in chosen):
            raise InvalidInput(f"tenant filter longer than {MAX_LABEL_LEN} characters")
        if self.tenants is not None:
            chosen &= self.tenants
        out = Selector(**dict(self.items()))
        object.__setattr__(out, "tenants", chosen)
        object.__setattr__(out, "excluded", self.excluded)
        return out

    def _copy(self, **pins: str) -> Selector:
        out = Selector(**{**dict(self.items()), **pins})
        object.__setattr__(out, "tenants", self.tenants)
        object.__setattr__(out, "excluded", self.excluded)
        return out

    def pinned(self, name: str, value: str) -> Selector:
        """This selector with label ``name`` pinned to ``value`` (set filters kept)."""
        if name not in GROUP_LABELS:
            raise InvalidInput(f"cannot pin {name!r}", details={"allowed": list(GROUP_LABELS)})
        return self._copy(**{name: value})

    def excluding(self, name: str, values: Iterable[str]) -> Selector:
        """This selector, further limited to requests whose label ``name`` is none of
        ``values``."""
        if name not in GROUP_LABELS:
            raise InvalidInput(
                f"cannot exclude by {name!r}", details={"allowed": list(GROUP_LABELS)}
            )
        out = self._copy()
        object.__setattr__(out, "excluded", (*self.excluded, (name, frozenset(values))))
        return out

    def items(self) -> list[tuple[str, str]]:
        """The labels that are pinned to one value, as (name, value) pairs (not ``tenants``)."""
        return [(n, v) for n in GROUP_LABELS if (v := getattr(self, n)) is not None]

    @property
    def narrowed(self) -> bool:
        """Whether any filter is set (a pinned label, a tenant set or excluded values)."""
        return bool(self.items()) or self.tenants is not None or bool(self.excluded)

    def allows_tenant(self, tenant: str | None) -> bool:
        """Whether a request of ``tenant`` passes the tenant filters."""
        if self.tenant is not None and tenant != self.tenant:
            return False
        return self.tenants is None or tenant in self.tenants

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.tenants is not None and labels.get("tenant") not in self.tenants:
            return False
        if any(labels.get(name) in values for name, values in self.excluded):
            return False
        return all(labels.get(name) == value for name, value in self.items())


def within_tenants(tenants: frozenset[str] | None, labels: Mapping[str, str]) -> bool:
    """Whether something pinned by ``labels`` (a stored baseline's labels, an SLO's selector, a
    budget's scope) covers only tenants a caller limited to ``tenants`` may read: its ``tenant``
    is one of them, or its ``tenants`` (``a|b``, a union) are all of them. Unpinned means every
    tenant. ``None``: the caller is not limited."""
    if tenants is None:
        return True
    if labels.get("tenant"):
        return labels["tenant"] in tenants
    union = {t for t in labels.get("tenants", "").split("|") if t}
    return bool(union) and union <= tenants


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


def resolve_method(method: Method, rows: Callable[[], int], exact_max_rows: int) -> Method:
    """``method`` as every store resolves ``AUTO``: exact when the window holds at most
    ``exact_max_rows`` requests (``rows()``, counted only for ``AUTO``), else by sketch."""
    if method is not Method.AUTO:
        return method
    return Method.EXACT if rows() <= exact_max_rows else Method.SKETCH


def latency_result(
    metric: str,
    window: Window,
    method: Method,
    relative_error: float,
    groups: Iterable[GroupQuantiles],
) -> LatencyResult:
    """A latency answer, its groups in their labels' order (every store answers in it)."""
    ordered = tuple(sorted(groups, key=lambda g: tuple(g.labels.values())))
    return LatencyResult(metric, window, method, relative_error, ordered)


class Quantiled(Protocol):
    """What ``sketch_groups`` reads of a merged sketch (``core.sketch.QuantileSketch``)."""

    count: int

    def quantiles(self, quantiles: Sequence[float]) -> dict[float, float]: ...


def sketch_groups(
    group_by: Sequence[str],
    sketches: Mapping[tuple[str, ...], Quantiled],
    quantiles: Sequence[float],
) -> list[GroupQuantiles]:
    """One answer per group (its labels' values keyed by ``group_by``) from its merged sketch;
    a group whose sketch holds no value has none."""
    return [
        GroupQuantiles(
            dict(zip(group_by, key, strict=True)), sketch.count, sketch.quantiles(quantiles)
        )
        for key, sketch in sketches.items()
        if sketch.count
    ]


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

    def plus(self, other: Throughput, labels: Mapping[str, str]) -> Throughput:
        """The two groups' totals under ``labels`` (the same window: ``self``'s seconds)."""
        return Throughput(
            labels,
            self.requests + other.requests,
            self.errors + other.errors,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.seconds,
        )


@dataclass(frozen=True, slots=True)
class StageShare:
    stage: str
    seconds_total: float
    share: float | None
    coverage: float | None
    """Share of the group's requests that reported this stage at all."""


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Where a group's request time goes, stage by stage; the shares add up to at most 1.

    The time shared out is each request's end-to-end time plus, where a gateway enclosed it,
    the gateway's own time (which lies outside the server's end-to-end time). The other
    stages lie within the end-to-end time; where the times the engines reported for them add
    up to more than it (the stages overlap), their shares are scaled down together by
    ``scaled_by`` (< 1), so that no instant counts twice; their ``seconds_total`` stay as
    reported.
    """

    labels: Mapping[str, str]
    requests: int
    e2e_seconds_total: float
    stages: tuple[StageShare, ...] = field(default_factory=tuple)
    scaled_by: float = 1.0

    @property
    def unaccounted_share(self) -> float | None:
        known = [s.share for s in self.stages if s.share is not None]
        if not self.e2e_seconds_total or not known:
            return None
        return max(0.0, 1.0 - sum(known))


def breakdown_of(
    labels: Mapping[str, str],
    e2e: tuple[int, float],
    stages: Mapping[str, tuple[int, float]],
) -> Breakdown:
    """A group's ``Breakdown`` from (count, seconds) totals of end-to-end time and of each
    of ``STAGES`` (a stage absent from ``stages`` was reported by no request)."""
    e2e_count, e2e_total = e2e
    e2e_total = max(0.0, e2e_total)
    totals = {stage: stages.get(stage, (0, 0.0)) for stage in STAGES}
    gateway = max(0.0, totals["gateway"][1])
    inner = sum(max(0.0, seconds) for stage, (_, seconds) in totals.items() if stage != "gateway")
    scale = e2e_total / inner if inner > e2e_total else 1.0
    whole = e2e_total + gateway
    shares = []
    for stage, (count, seconds) in totals.items():
        share = None
        if whole > 0 and count:
            part = max(0.0, seconds) * (1.0 if stage == "gateway" else scale)
            share = min(1.0, part / whole)
        coverage = count / e2e_count if e2e_count else None
        shares.append(StageShare(stage, seconds, share, coverage))
    return Breakdown(dict(labels), int(e2e_count), e2e_total, tuple(shares), scale)
