"""Who spent it: cost per tenant, team or workload split three ways, with goodput, and the
``Attribution`` document kind.

The requests of a window are attributed to tenants, teams and workloads from their traces
(``core.attribution``; ``storage.attribution`` fills them). ``attributed_cost`` answers, per
value of one dimension (its ``top_n`` values by cost, the rest folded into ``OTHER``, the
requests no span named apart as unattributed):

* **usage**: the cost of the GPU time its requests used — each instance's cost less its idle
  cost, shared among the series it served by their GPU time (prefill + decode
  request-seconds), exactly as ``GET /api/v1/cost`` shares it;
* **allocation**: its share of the instances' whole cost, idle included, in proportion to
  that same usage (``GET /api/v1/cost``'s ``cost``);
* **idle**: allocation − usage, its part of the idle GPU time.

The fleet's idle / unallocated cost is the sum of every line's idle (instances that served
nothing are idle all through, under the unattributed line). All three are ``Decimal``s
allocated to the millionth, so ``Σ usage + idle = Σ allocation = total`` exactly; the answer
checks it. Goodput per line: its good tokens (tokens of successful requests within their
SLOs, ``core.goodput``), their share of its tokens, and cost per million good tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Final, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field

from infersight.core.attribution import (
    API_VERSION,
    DEFAULT_TOP_N,
    GROUPING_DIMENSIONS,
    KIND,
    OTHER,
    AttributionMap,
    TopValues,
    check_top_n,
    combine,
    top_values,
)
from infersight.core.cost import CostLine, CostModel, CostResult, Money
from infersight.core.errors import InvalidInput
from infersight.core.money import ZERO
from infersight.core.query import Selector
from infersight.core.window import Resolution, Window
from infersight.service.documents import DocumentKind, Header, Reading, at, read

__all__ = [
    "ATTRIBUTION",
    "UNATTRIBUTED",
    "AttributedCost",
    "CostShare",
    "attributed_cost",
    "attributed_from",
    "bounded_statements",
    "check_dimension",
    "fold_additive",
    "fold_requery",
    "read_attribution",
    "top_of",
]

#: How the requests no gateway or client span named are shown.
UNATTRIBUTED: Final = "(unattributed)"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    presets: list[str] = Field(default_factory=list, max_length=16)
    rules: dict[str, list[str]] = Field(default_factory=dict)


def _mapping(_header: Header, spec: _Spec) -> AttributionMap:
    with at("spec"):
        mapping = combine(spec.presets, spec.rules)
    if mapping.empty:
        raise InvalidInput("spec names no preset or rule")
    return mapping


#: The ``Attribution`` document: which gateway and client span attributes name a trace's
#: tenant, team, workload and adapter (read by ``infersight sidecar --attribution-file``).
ATTRIBUTION: Final[DocumentKind[AttributionMap]] = DocumentKind(
    KIND, {API_VERSION: Reading(_Spec, _mapping)}, article="an"
)


def read_attribution(text: str | bytes) -> AttributionMap:
    """The one ``Attribution`` document of ``text``."""
    documents = read(text, [ATTRIBUTION])
    if len(documents) != 1:
        raise InvalidInput(
            f"an attribution file holds one Attribution document, not {len(documents)}"
        )
    value: AttributionMap = documents[0].value
    return value


def check_dimension(name: str) -> str:
    if name not in GROUPING_DIMENSIONS:
        raise InvalidInput(
            f"cannot attribute cost by {name!r}", details={"allowed": list(GROUPING_DIMENSIONS)}
        )
    return name


@dataclass(frozen=True, slots=True)
class CostShare:
    """One value of the dimension (or ``OTHER``, or the unattributed requests)."""

    value: str
    #: ``value``, ``OTHER`` or ``UNATTRIBUTED`` as shown.
    label: str
    #: How many values ``OTHER`` stands for (0 for any other line).
    folded: int
    line: CostLine

    @property
    def allocation(self) -> Decimal:
        return self.line.cost

    @property
    def idle(self) -> Decimal:
        return self.line.idle_cost

    @property
    def usage(self) -> Decimal:
        return self.line.cost - self.line.idle_cost

    @property
    def good_share(self) -> float | None:
        tokens = self.line.tokens
        return self.line.good_tokens / tokens if tokens else None

    def to_json(self, window: Window) -> dict[str, Any]:
        line = self.line
        per_million = line.cost_per_million_tokens
        per_good = line.cost_per_million_good_tokens
        seconds = window.seconds
        return {
            "value": self.value,
            "label": self.label,
            "folded_values": self.folded,
            "requests": line.requests,
            "input_tokens": line.input_tokens,
            "output_tokens": line.output_tokens,
            "gpu_hours": str(line.gpu_hours),
            "usage": str(self.usage),
            "idle": str(self.idle),
            "allocation": str(self.allocation),
            "cost_per_million_tokens": None if per_million is None else str(per_million.amount),
            "goodput": {
                "good_tokens": line.good_tokens,
                "good_share": self.good_share,
                "good_tokens_per_second": line.good_tokens / seconds if seconds else None,
                "cost_per_million_good_tokens": None if per_good is None else str(per_good.amount),
                "basis": line.good_basis,
            },
        }


@dataclass(frozen=True, slots=True)
class AttributedCost:
    """Cost per value of one dimension over a window, split three ways (the module's doc)."""

    window: Window
    dimension: str
    currency: str
    model_name: str
    example_prices: bool
    top: TopValues
    shares: tuple[CostShare, ...]
    total: CostLine
    #: The fleet's total: every instance's cost (``InstanceCost.total``), summed.
    fleet_total: Decimal
    good_tokens_exact: bool

    def __post_init__(self) -> None:
        allocation = sum((s.allocation for s in self.shares), ZERO)
        split = self.usage + self.idle
        if not allocation == split == self.total.cost == self.fleet_total:  # pragma: no cover
            raise AssertionError(
                f"attributed cost does not add up: allocation {allocation}, usage + idle "
                f"{split}, lines {self.total.cost}, instances {self.fleet_total}"
            )

    @property
    def usage(self) -> Decimal:
        return sum((s.usage for s in self.shares), ZERO)

    @property
    def idle(self) -> Decimal:
        return sum((s.idle for s in self.shares), ZERO)

    @property
    def attributed_requests(self) -> int:
        return sum(s.line.requests for s in self.shares if s.value)

    def money(self, amount: Decimal) -> Money:
        return Money(amount, self.currency)

    def to_json(self) -> dict[str, Any]:
        requests = self.total.requests
        return {
            "dimension": self.dimension,
            "currency": self.currency,
            "cost_model": self.model_name,
            "example_prices": self.example_prices,
            "top": self.top.statement(),
            "fleet": {
                "total": str(self.fleet_total),
                "usage": str(self.usage),
                "idle_unallocated": str(self.idle),
                "requests": requests,
                "attributed_requests": self.attributed_requests,
                "attributed_share": self.attributed_requests / requests if requests else None,
                "good_tokens": self.total.good_tokens,
            },
            "shares": [s.to_json(self.window) for s in self.shares],
            "good_tokens_exact": self.good_tokens_exact,
            "method": (
                "usage: each instance's cost less its idle cost, shared by the GPU time "
                "(prefill + decode request-seconds) its requests used; allocation: its whole "
                "cost, idle included, shared the same way; idle = allocation - usage; "
                "usage + idle add up to the total exactly"
            ),
        }


def _folded(lines: Sequence[CostLine], top: TopValues, dimension: str) -> list[CostShare]:
    """One share per kept value, ``OTHER`` the sum of the rest (``fold_additive``), by
    allocation, then ``OTHER`` and the unattributed requests."""
    folded = fold_additive(lines, {dimension: top}, lambda a, b, labels: a.plus(b, labels))
    shares = [
        CostShare(value, value or UNATTRIBUTED, top.folded if value == OTHER else 0, line)
        for line in folded
        for value in (line.labels.get(dimension, ""),)
    ]
    named = sorted(
        (s for s in shares if s.value not in ("", OTHER)), key=lambda s: (-s.allocation, s.value)
    )
    rest = [s for s in shares if s.value == OTHER] + [s for s in shares if not s.value]
    return named + rest


def attributed_cost(
    store: Any,
    window: Window,
    model: CostModel,
    dimension: str = "tenant",
    top_n: int = DEFAULT_TOP_N,
    *,
    finest: Resolution = Resolution.MINUTE,
) -> AttributedCost:
    """Cost per ``dimension`` value over ``window`` (``store``: a ``storage.seam`` cost
    store), its ``top_n`` values by allocation apart (the module's doc)."""
    check_dimension(dimension)
    check_top_n(top_n)
    result = store.cost(window, model, group_by=(dimension,), finest=finest)
    return attributed_from(result, top_n)


def attributed_from(result: CostResult, top_n: int = DEFAULT_TOP_N) -> AttributedCost:
    """The split of a cost answer grouped by one dimension alone (``GET /api/v1/cost``'s
    ``group_by=tenant``, unfiltered): its ``top_n`` values by allocation apart."""
    if len(result.group_by) != 1:
        raise InvalidInput("cost is attributed by one dimension at a time")
    dimension = check_dimension(result.group_by[0])
    check_top_n(top_n)
    lines = list(result.groups)
    top = top_values(
        dimension, ((g.labels.get(dimension, ""), float(g.cost)) for g in lines), top_n
    )
    shares = _folded(lines, top, dimension)
    return AttributedCost(
        window=result.window,
        dimension=dimension,
        currency=result.currency,
        model_name=result.model_name,
        example_prices=result.example_prices,
        top=top,
        shares=tuple(shares),
        total=result.total,
        fleet_total=sum((i.total.amount for i in result.instances), ZERO),
        good_tokens_exact=result.good_tokens_exact,
    )


# -- answers grouped by a dimension: the top N apart, the rest folded into OTHER ---------------

G = TypeVar("G")


def top_of(
    groups: Sequence[G],
    group_by: Sequence[str],
    top_n: int,
    weight: Callable[[G], float],
) -> dict[str, TopValues]:
    """For each attribution dimension ``group_by`` names, its ``top_n`` values by the summed
    ``weight`` of ``groups`` (an answer's own groups, each with ``labels``)."""
    out: dict[str, TopValues] = {}
    for dimension in group_by:
        if dimension in GROUPING_DIMENSIONS:
            pairs = ((_labels(g).get(dimension, ""), weight(g)) for g in groups)
            out[dimension] = top_values(dimension, pairs, top_n)
    return out


def _labels(group: Any) -> Mapping[str, str]:
    labels: Mapping[str, str] = group.labels
    return labels


def _relabelled(group: G, labels: Mapping[str, str]) -> G:
    """``group`` (a dataclass with ``labels``) under ``labels``."""
    return cast(G, replace(cast(Any, group), labels=dict(labels)))


def _mapped(labels: Mapping[str, str], tops: Mapping[str, TopValues]) -> dict[str, str]:
    return {**labels, **{d: t.label(labels.get(d, "")) for d, t in tops.items()}}


def _ordered(groups: list[G]) -> list[G]:
    """Groups sorted by labels as answers sort them, ``OTHER`` after the values it folds."""

    def key(group: G) -> tuple[tuple[int, str], ...]:
        return tuple((value == OTHER, value) for value in _labels(group).values())

    return sorted(groups, key=key)


def fold_additive(
    groups: Sequence[G],
    tops: Mapping[str, TopValues],
    plus: Callable[[G, G, dict[str, str]], G],
) -> list[G]:
    """``groups`` with the values past the top N of each dimension summed into ``OTHER``
    (``plus(a, b, labels)`` adds two groups under ``labels``); as they are when none is
    folded."""
    if not any(t.folded for t in tops.values()):
        return list(groups)
    out: dict[tuple[tuple[str, str], ...], G] = {}
    for group in groups:
        labels = _mapped(_labels(group), tops)
        key = tuple(labels.items())
        found = out.get(key)
        if found is None:
            out[key] = group if labels == dict(_labels(group)) else _relabelled(group, labels)
        else:
            out[key] = plus(found, group, labels)
    return _ordered(list(out.values()))


def fold_requery(
    groups: Sequence[G],
    group_by: Sequence[str],
    tops: Mapping[str, TopValues],
    selector: Selector,
    read: Callable[[Selector], Sequence[G]],
) -> list[G]:
    """``groups`` with the values past the top N of each dimension folded into ``OTHER``,
    for answers that cannot be added up (quantiles, shares): each folded group is read again
    as one (``read(selector)`` answers it ungrouped), its labels pinned, its dimensions'
    kept values excluded (``Selector.excluding``)."""
    if not any(t.folded for t in tops.values()):
        return list(groups)
    kept: list[G] = []
    folded: dict[tuple[str, ...], dict[str, str]] = {}
    for group in groups:
        labels = _mapped(_labels(group), tops)
        if labels == dict(_labels(group)):
            kept.append(group)
        else:
            folded[tuple(labels[name] for name in group_by)] = labels
    for labels in folded.values():
        narrowed = selector
        for name in group_by:
            value = labels[name]
            if value == OTHER:
                narrowed = narrowed.excluding(name, tops[name].kept)
            else:
                narrowed = narrowed.pinned(name, value)
        for answer in read(narrowed):
            kept.append(_relabelled(answer, {n: labels[n] for n in group_by}))
    return _ordered(kept)


def bounded_statements(tops: Mapping[str, TopValues]) -> list[dict[str, Any]]:
    """What an answer grouped by attribution dimensions says of its bounds (``[]``: none)."""
    return [t.statement() for t in tops.values()]
