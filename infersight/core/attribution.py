"""Who a request was for: tenant, team, workload and LoRA adapter from the trace it belongs to.

An engine (vLLM, SGLang, TGI) does not know who sent a request: the tenant, the team, the API
key's alias or the workload live in the gateway's or the client's span one hop before it, in
the same trace (LiteLLM's ``metadata.user_api_key_team_alias``, llm-d's fairness id header, an
OpenAI SDK app's own resource attributes). This module is the pure part of joining them:

* **The mapping** (``AttributionMap``): for each dimension (``DIMENSIONS``) an ordered list of
  attribute names, span attributes or resource attributes (``resource.`` + the name), the
  first present one giving the value. Shipped presets (``PRESETS``) name the attributes of
  LiteLLM, llm-d, Envoy AI Gateway and OpenTelemetry-instrumented OpenAI SDK apps; rules
  (``tenant=metadata.user_api_key_team_alias|resource.tenant.id``) add or override. It is
  declared by ``INFERSIGHT_ATTRIBUTION`` (``parse_setting``) or a versioned ``Attribution``
  document (``service.attribution.ATTRIBUTION``: ``spec.presets`` and ``spec.rules``, read by
  the one document reader), and applied where spans are read (the sidecar).
* **The record** (``Attribution``): what one gateway or client span said of its trace — the
  dimensions it named, when it ran, and which rule set named them.
* **The join** (``fill``): a request's labels with the dimensions its own span left empty
  filled from its trace's attribution; the engine's own value always wins. The store applies
  it exactly once per request and dimension (``storage.attribution``).
* **Bounded answers** (``top_values``): an answer that groups by a dimension keeps its
  ``top_n`` values by weight and folds the rest into ``OTHER``, saying so.

Pure: no I/O, no clock, no environment.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from infersight.core.errors import InvalidInput, InvalidRecord
from infersight.core.records import (
    MAX_DURATION_S,
    MAX_LABEL_LEN,
    check_ids,
    check_label,
    check_timestamp,
)

#: The dimensions a request can be attributed by, in the order answers list them.
DIMENSIONS: Final = ("tenant", "team", "workload", "adapter")
#: The dimensions that are answers' own grouping (``adapter`` is a model's series label).
GROUPING_DIMENSIONS: Final = ("tenant", "team", "workload")
#: An attribute named ``resource.<name>`` is the resource attribute ``<name>``.
RESOURCE_PREFIX: Final = "resource."
#: Most attribute names one dimension may list, and most characters in one name.
MAX_ATTRIBUTES: Final = 32
MAX_NAME_LEN: Final = 256
#: Most characters of a rule-set name (``Attribution.source``).
MAX_SOURCE_LEN: Final = 64
#: How many values of a dimension an answer keeps apart by default; the rest are ``OTHER``.
DEFAULT_TOP_N: Final = 20
MAX_TOP_N: Final = 1000
#: The group the values past the top N are folded into. Parenthesised so that it reads as no
#: tenant's own name; a tenant really named so is folded with them.
OTHER: Final = "(other)"
#: The version and kind of an ``Attribution`` document.
API_VERSION: Final = "infersight/v1"
KIND: Final = "Attribution"
#: Characters no label of an attribution may hold: C0 controls (NUL among them: PostgreSQL's
#: text refuses it), DEL and lone surrogates (no encoding can write them).
_UNWRITABLE: Final = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")
#: Where a request may start relative to its trace's gateway or client span: from a minute
#: before that span began (clocks of different hosts disagree) to a minute after it ended.
JOIN_SKEW: Final = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class AttributeRef:
    """One attribute a dimension is read from: a span attribute, or a resource attribute."""

    name: str
    resource: bool = False

    @classmethod
    def parse(cls, text: str) -> AttributeRef:
        """``resource.service.name`` → the resource attribute ``service.name``; any other
        name → the span attribute of that name."""
        name = text.strip()
        if not name or len(name) > MAX_NAME_LEN or any(c in name for c in "|=;,\n\r\t "):
            raise InvalidInput(
                f"an attribute name must be 1 to {MAX_NAME_LEN} characters without spaces, "
                "'|', '=', ',' or ';'",
                details={"attribute": text[:80]},
            )
        if name.startswith(RESOURCE_PREFIX) and len(name) > len(RESOURCE_PREFIX):
            return cls(name[len(RESOURCE_PREFIX) :], resource=True)
        return cls(name)

    @property
    def text(self) -> str:
        return RESOURCE_PREFIX + self.name if self.resource else self.name


def _refs(*names: str) -> tuple[AttributeRef, ...]:
    return tuple(AttributeRef.parse(name) for name in names)


@dataclass(frozen=True, slots=True)
class Preset:
    """The attributes one gateway or instrumentation names its callers by."""

    name: str
    what: str
    rules: Mapping[str, tuple[AttributeRef, ...]]


#: LiteLLM's proxy sets every key of its logging metadata on its span as ``metadata.<key>``
#: (``litellm/integrations/opentelemetry.py``, ``set_attributes``; the keys are those of
#: ``StandardLoggingUserAPIKeyMetadata``). A LiteLLM organisation is the tenant where one is
#: used, else the team; the virtual key's alias is the workload.
_LITELLM = Preset(
    "litellm",
    "LiteLLM proxy: organisation or team, team, virtual key alias",
    {
        "tenant": _refs(
            "metadata.user_api_key_org_alias",
            "metadata.user_api_key_org_id",
            "metadata.user_api_key_team_alias",
            "metadata.user_api_key_team_id",
        ),
        "team": _refs("metadata.user_api_key_team_alias", "metadata.user_api_key_team_id"),
        "workload": _refs("metadata.user_api_key_alias", "metadata.user_api_key_project_alias"),
    },
)
#: llm-d (the Gateway API Inference Extension's endpoint picker) keys its fairness queues by
#: the ``x-gateway-inference-fairness-id`` request header and admits by the InferenceObjective
#: named in ``x-gateway-inference-objective``. A gateway records request headers as
#: ``http.request.header.<name>`` (the OpenTelemetry HTTP conventions; Envoy's custom tags
#: may name the tag after the header itself).
_LLM_D = Preset(
    "llm-d",
    "llm-d / Gateway API Inference Extension: fairness id, inference objective",
    {
        "tenant": _refs(
            "http.request.header.x-gateway-inference-fairness-id",
            "x-gateway-inference-fairness-id",
        ),
        "workload": _refs(
            "http.request.header.x-gateway-inference-objective",
            "x-gateway-inference-objective",
        ),
    },
)
#: Envoy AI Gateway maps request headers to span attributes by its
#: ``controller.spanRequestHeaderAttributes`` (``<header>:<attribute>`` pairs); this preset
#: reads ``tenant.id`` (e.g. ``x-tenant-id:tenant.id``), OpenInference's ``user.id``,
#: ``team.id`` and ``workload.name``.
_ENVOY_AI_GATEWAY = Preset(
    "envoy-ai-gateway",
    "Envoy AI Gateway: tenant.id or user.id, team.id, workload.name (header attributes)",
    {
        "tenant": _refs("tenant.id", "user.id"),
        "team": _refs("team.id"),
        "workload": _refs("workload.name"),
    },
)
#: An application calling through the OpenAI SDK, traced by an OpenTelemetry instrumentation
#: (``opentelemetry-instrumentation-openai``, OpenLIT, OpenInference): who it works for lives
#: in its resource (``OTEL_RESOURCE_ATTRIBUTES=tenant.id=acme,team=search``), the workload is
#: its ``service.name``.
_OPENAI_SDK = Preset(
    "openai-sdk",
    "an OpenTelemetry-instrumented OpenAI SDK app: resource tenant.id / team, service.name",
    {
        "tenant": _refs(
            "infersight.tenant",
            "tenant.id",
            "resource.infersight.tenant",
            "resource.tenant.id",
            "resource.tenant",
        ),
        "team": _refs(
            "infersight.team",
            "resource.infersight.team",
            "resource.team",
            "resource.service.namespace",
        ),
        "workload": _refs(
            "infersight.workload", "resource.infersight.workload", "resource.service.name"
        ),
    },
)
PRESETS: Final[Mapping[str, Preset]] = {
    p.name: p for p in (_LITELLM, _LLM_D, _ENVOY_AI_GATEWAY, _OPENAI_SDK)
}


def _value(raw: Any) -> str:
    """An attribute's value as a label: a string as it is, a number or bool in words, an
    array's first item (a captured HTTP header is an array of strings); "" for none."""
    if isinstance(raw, str):
        value = raw
    elif isinstance(raw, bool):
        value = "true" if raw else "false"
    elif isinstance(raw, int):
        value = str(raw)
    elif isinstance(raw, float):
        value = repr(raw) if math.isfinite(raw) else ""
    elif isinstance(raw, tuple | list) and raw:
        return _value(raw[0])
    else:
        return ""
    value = value.strip()[:MAX_LABEL_LEN]
    return "" if not usable(value) else value


def usable(value: str) -> bool:
    """Whether ``value`` may be an attribution's label: it holds no control character (a
    span's value that holds one names nothing: the next attribute is tried)."""
    return _UNWRITABLE.search(value) is None


@dataclass(frozen=True, slots=True)
class AttributionMap:
    """Which attributes name each dimension, first present first (the module's doc)."""

    rules: Mapping[str, tuple[AttributeRef, ...]] = field(default_factory=dict)
    #: The presets it was built from, and whether explicit rules were given.
    presets: tuple[str, ...] = ()
    custom: bool = False

    def __post_init__(self) -> None:
        for dimension, refs in self.rules.items():
            if dimension not in DIMENSIONS:
                raise InvalidInput(
                    f"unknown attribution dimension {dimension!r}",
                    details={"allowed": list(DIMENSIONS)},
                )
            if len(refs) > MAX_ATTRIBUTES:
                raise InvalidInput(
                    f"a dimension names at most {MAX_ATTRIBUTES} attributes",
                    details={"dimension": dimension},
                )

    @property
    def empty(self) -> bool:
        return not any(self.rules.values())

    @property
    def source(self) -> str:
        """The rule set's name, as records carry it (``Attribution.source``)."""
        names = [*self.presets, *(["rules"] if self.custom else [])]
        return "+".join(names)[:MAX_SOURCE_LEN] or "rules"

    def resolve(
        self, attributes: Mapping[str, Any], resource: Mapping[str, Any]
    ) -> tuple[dict[str, str], bool]:
        """The dimensions a span names (for each, the value of its first attribute present
        with a non-empty value), and whether a span attribute (not only the resource) named
        one: the resource names every span of a service, its attributes this span alone."""
        out: dict[str, str] = {}
        own = False
        for dimension, refs in self.rules.items():
            for ref in refs:
                where = resource if ref.resource else attributes
                if ref.name in where:
                    value = _value(where[ref.name])
                    if value:
                        out[dimension] = value
                        own = own or not ref.resource
                        break
        return out, own

    def describe(self) -> dict[str, list[str]]:
        """Each dimension's attributes, in the order they are tried."""
        return {d: [r.text for r in self.rules[d]] for d in DIMENSIONS if self.rules.get(d)}


def combine(
    presets: Sequence[str], rules: Mapping[str, Sequence[str]] | None = None
) -> AttributionMap:
    """The map of ``presets`` (in order) with explicit ``rules`` tried before them."""
    merged: dict[str, list[AttributeRef]] = {}
    for dimension, names in (rules or {}).items():
        if dimension not in DIMENSIONS:
            raise InvalidInput(
                f"unknown attribution dimension {dimension!r}",
                details={"allowed": list(DIMENSIONS)},
            )
        if isinstance(names, str) or not isinstance(names, Sequence) or not names:
            raise InvalidInput(f"the rule for {dimension} must list one or more attributes")
        merged.setdefault(dimension, []).extend(AttributeRef.parse(str(n)) for n in names)
    seen: list[str] = []
    for name in presets:
        preset = PRESETS.get(name.strip())
        if preset is None:
            raise InvalidInput(
                f"unknown attribution preset {name!r}", details={"presets": sorted(PRESETS)}
            )
        if preset.name in seen:
            continue
        seen.append(preset.name)
        for dimension, refs in preset.rules.items():
            merged.setdefault(dimension, []).extend(refs)
    ordered = {d: tuple(dict.fromkeys(merged[d])) for d in DIMENSIONS if merged.get(d)}
    return AttributionMap(ordered, tuple(seen), custom=bool(rules))


def parse_setting(text: str) -> AttributionMap:
    """``INFERSIGHT_ATTRIBUTION``: preset names and ``dimension=attr1|attr2`` rules,
    separated by commas or semicolons, e.g. ``litellm,team=resource.team|metadata.team``.
    Rules are tried before the presets' attributes, the presets in the order given."""
    presets: list[str] = []
    rules: dict[str, list[str]] = {}
    for raw in text.replace(";", ",").split(","):
        item = raw.strip()
        if not item:
            continue
        if "=" not in item:
            presets.append(item)
            continue
        dimension, _, names = item.partition("=")
        parts = [n.strip() for n in names.split("|") if n.strip()]
        if not parts:
            raise InvalidInput(f"the rule {item!r} names no attribute")
        rules.setdefault(dimension.strip(), []).extend(parts)
    mapping = combine(presets, rules)
    if mapping.empty:
        raise InvalidInput(
            "INFERSIGHT_ATTRIBUTION names no preset or rule",
            details={"presets": sorted(PRESETS), "example": "litellm,team=resource.team"},
        )
    return mapping


@dataclass(frozen=True, slots=True)
class Attribution:
    """What a gateway's or client's span said about who its trace's requests are for."""

    trace_id: str
    span_id: str
    start: datetime
    #: The span's length; the requests it made started within it (``JOIN_SKEW`` either side).
    duration_s: float = 0.0
    tenant: str = ""
    team: str = ""
    workload: str = ""
    adapter: str = ""
    #: The rule set that named them (``AttributionMap.source``; ``client`` for a client
    #: record's own tenant attribute).
    source: str = ""

    def __post_init__(self) -> None:
        check_ids(self.trace_id, self.span_id)
        check_timestamp("start", self.start)
        if not (math.isfinite(self.duration_s) and 0.0 <= self.duration_s <= MAX_DURATION_S):
            raise InvalidRecord(
                f"duration_s must be a number of seconds in [0, {MAX_DURATION_S:g}]",
                details={"duration_s": repr(self.duration_s)},
            )
        for name in DIMENSIONS:
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidRecord(f"{name} must be a string")
            check_label(name, value)
            if not usable(value):
                raise InvalidRecord(
                    f"{name} must not contain control characters (such as NUL)",
                    details={name: ascii(value[:64])},
                )
        if (
            not isinstance(self.source, str)
            or len(self.source) > MAX_SOURCE_LEN
            or not usable(self.source)
        ):
            raise InvalidRecord(
                f"source must be a string of at most {MAX_SOURCE_LEN} characters without "
                "control characters"
            )
        if not any(getattr(self, name) for name in DIMENSIONS):
            raise InvalidRecord("an attribution names at least one dimension")

    @property
    def end(self) -> datetime:
        return self.start + timedelta(seconds=self.duration_s)

    @property
    def dimensions(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in DIMENSIONS}

    def window(self) -> tuple[datetime, datetime]:
        """When a request of its trace may have started (``JOIN_SKEW`` either side)."""
        return self.start - JOIN_SKEW, self.end + JOIN_SKEW


#: An ``Attribution``'s fields, in the order the spool and the wire write them.
ATTRIBUTION_FIELDS: Final = (
    "trace_id",
    "span_id",
    "start",
    "duration_s",
    *DIMENSIONS,
    "source",
)


def merged(first: Mapping[str, str], later: Mapping[str, str]) -> dict[str, str]:
    """One trace's dimensions from two of its spans: the first named wins, per dimension."""
    return {d: first.get(d, "") or later.get(d, "") for d in DIMENSIONS}


def fill(labels: Mapping[str, str], dimensions: Mapping[str, str]) -> dict[str, str]:
    """The labels a request gets from its trace: each dimension its own span left empty,
    filled where the trace names it (the engine's own value wins). Only the changed labels."""
    return {d: value for d in DIMENSIONS if not labels.get(d) and (value := dimensions.get(d, ""))}


def check_top_n(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOP_N:
        raise InvalidInput(f"top N must be an integer in [1, {MAX_TOP_N}]")
    return value


@dataclass(frozen=True, slots=True)
class TopValues:
    """Which values of one dimension an answer keeps apart."""

    dimension: str
    top_n: int
    kept: frozenset[str]
    #: How many distinct values were folded into ``OTHER``.
    folded: int

    @property
    def values(self) -> int:
        """How many named values there were, kept and folded (the unattributed not one)."""
        return len(self.kept - {""}) + self.folded

    def label(self, value: str) -> str:
        """``value``, or ``OTHER`` when it is not among the kept ones."""
        return value if value in self.kept else OTHER

    def statement(self) -> dict[str, Any]:
        """What an answer says about it."""
        return {
            "dimension": self.dimension,
            "top_n": self.top_n,
            "values": self.values,
            "folded_into_other": self.folded,
            "other": OTHER,
        }


def top_values(
    dimension: str, weights: Iterable[tuple[str, float]], top_n: int = DEFAULT_TOP_N
) -> TopValues:
    """The ``top_n`` values of ``dimension`` by summed weight (ties: by value); the empty
    value (unattributed) is always kept apart and not counted among them."""
    check_top_n(top_n)
    totals: dict[str, float] = {}
    for value, weight in weights:
        totals[value] = totals.get(value, 0.0) + float(weight)
    named = sorted((v for v in totals if v), key=lambda v: (-totals[v], v))
    kept = frozenset([*named[:top_n], *([""] if "" in totals else [])])
    return TopValues(dimension, top_n, kept, max(0, len(named) - top_n))


__all__ = [
    "API_VERSION",
    "ATTRIBUTION_FIELDS",
    "DEFAULT_TOP_N",
    "DIMENSIONS",
    "GROUPING_DIMENSIONS",
    "JOIN_SKEW",
    "KIND",
    "MAX_TOP_N",
    "OTHER",
    "PRESETS",
    "AttributeRef",
    "Attribution",
    "AttributionMap",
    "Preset",
    "TopValues",
    "check_top_n",
    "combine",
    "fill",
    "merged",
    "parse_setting",
    "top_values",
    "usable",
]
