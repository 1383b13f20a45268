"""SLO spec documents (YAML or JSON) → ``core.slo.SloSpec``, and back.

Two formats are read:

``apiVersion: infersight/v1``, ``kind: SLO``::

    metadata: {name: chat-ttft, description: "…"}
    spec:
      sli: {latency: {metric: ttft, threshold: 2s}}     # or {availability: {}}
      # or {goodput: {ttft: 2s, tpot: 100ms, e2e: 30s, per: request}}: the targets hold
      # together (each optional, at least one); per: request (default) or token
      selector: {model: llama-70b, tenant: acme}          # optional
      window: 28d
      objective: 0.99                                     # or "99%"

``apiVersion: openslo/v1``, ``kind: SLO``, where it maps: an inline indicator whose metric
source has ``type: infersight``; a ``thresholdMetric`` (``spec: {metric: ttft, selector}``)
with one objective ``op: lte`` (or ``lt``) and ``value`` in seconds becomes a latency SLI; a
``ratioMetric`` whose ``good`` source is ``{query: successful_requests}`` and ``total`` is
``{query: requests}`` becomes availability; a ``ratioMetric`` whose ``good`` source is
``{query: good_requests, ttft: 2s, tpot: 100ms, e2e: …}`` over ``total: {query: requests}``
is request-based goodput, and ``{query: good_output_tokens, …}`` over ``{query:
output_tokens}`` token-based goodput (the targets sit on the good source, which is what they
define; the selector on the total). Rolling windows only, ``budgetingMethod: Occurrences``.
Everything else is rejected with the reason (``InvalidInput``).
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from infersight.core.errors import InvalidInput
from infersight.core.query import Selector
from infersight.core.slo import GOODPUT_METRICS, GoodputUnit, Sli, SliKind, SloSpec
from infersight.core.window import parse_duration
from infersight.service.documents import (
    DocumentKind,
    Header,
    Reading,
    at,
    load_one,
    read_value,
    read_values,
)
from infersight.service.slo_documents import API_VERSION, to_document, window_text

__all__ = [
    "API_VERSION",
    "OPENSLO",
    "SLO",
    "load_document",
    "parse_objective",
    "parse_spec",
    "parse_specs",
    "parse_threshold",
    "to_document",
    "window_text",
]

OPENSLO: Final = "openslo/v1"
#: OpenSLO ratioMetric (good query, total query) pairs of a goodput SLI → its ``per``.
_GOODPUT_QUERIES: Final = {
    ("good_requests", "requests"): "request",
    ("good_output_tokens", "output_tokens"): "token",
}
_SECONDS = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Latency(_Strict):
    metric: str
    threshold: str | float


class _Goodput(_Strict):
    ttft: str | float | None = None
    tpot: str | float | None = None
    e2e: str | float | None = None
    per: str = "request"


class _SliDoc(_Strict):
    availability: dict[str, Any] | None = None
    latency: _Latency | None = None
    goodput: _Goodput | None = None


class _SelectorDoc(_Strict):
    model: str | None = None
    instance: str | None = None
    tenant: str | None = None
    priority: str | None = None
    team: str | None = None
    workload: str | None = None


class _SpecDoc(_Strict):
    sli: _SliDoc
    selector: _SelectorDoc = Field(default_factory=_SelectorDoc)
    window: str
    objective: float | str


def parse_threshold(value: str | float) -> float:
    """``2s``, ``500ms``, ``0.25`` (seconds) → seconds."""
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _SECONDS.match(value) if isinstance(value, str) else None
        if not match:
            raise InvalidInput(f"threshold must be seconds, '2s' or '500ms', got {value!r}")
        seconds = float(match[1]) / (1000.0 if match[2] == "ms" else 1.0)
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInput("threshold must be positive")
    return seconds


def parse_objective(value: float | str) -> float:
    """``0.99`` or ``"99%"`` → 0.99."""
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
        except ValueError:
            raise InvalidInput(f"objective must be a fraction or a percentage: {value!r}") from None
    if not isinstance(value, int | float):
        raise InvalidInput(f"objective must be a fraction or a percentage: {str(value)[:32]!r}")
    return float(value)


def load_document(text: str | bytes) -> dict[str, Any]:
    """The one YAML or JSON document of ``text`` as a mapping (``PUT /api/v1/slos/{name}``)."""
    return load_one(text, SLO)


def parse_spec(data: dict[str, Any]) -> SloSpec:
    """Either format → ``SloSpec``."""
    return read_value(data, SLO)


def parse_specs(text: str | bytes) -> list[SloSpec]:
    """Every document of a (multi-document) YAML file."""
    return read_values(text, SLO)


def _native(header: Header, doc: _SpecDoc) -> SloSpec:
    sli_doc = doc.sli
    given = [k for k in ("availability", "latency", "goodput") if getattr(sli_doc, k) is not None]
    if len(given) != 1:
        raise InvalidInput(
            "spec.sli must have exactly one of 'availability', 'latency' or 'goodput'"
        )
    if sli_doc.latency is not None:
        with at("spec.sli.latency.threshold"):
            threshold = parse_threshold(sli_doc.latency.threshold)
        sli = Sli(SliKind.LATENCY, sli_doc.latency.metric, threshold)
    elif sli_doc.goodput is not None:
        with at("spec.sli.goodput"):
            sli = _goodput_sli(sli_doc.goodput.model_dump())
    else:
        sli = Sli(SliKind.AVAILABILITY)
    with at("spec.window"):
        window = parse_duration(doc.window)
    return SloSpec(
        name=header.name,
        sli=sli,
        objective=parse_objective(doc.objective),
        window=window,
        selector=Selector(**doc.selector.model_dump()),
        description=header.description,
    )


def _goodput_sli(doc: dict[str, Any]) -> Sli:
    """``{ttft: 2s, tpot: 100ms, e2e: …, per: request|token}`` → a goodput SLI."""
    per = doc.get("per", "request")
    if per not in {u.value for u in GoodputUnit}:
        raise InvalidInput(
            f"goodput per must be 'request' or 'token', got {per!r}",
            details={"allowed": [u.value for u in GoodputUnit]},
        )
    targets = tuple(
        (metric, parse_threshold(doc[metric]))
        for metric in GOODPUT_METRICS
        if doc.get(metric) is not None
    )
    return Sli(SliKind.GOODPUT, targets=targets, per=GoodputUnit(per))


# -- OpenSLO v1 -----------------------------------------------------------------------------


def _get(data: Any, path: str) -> Any:
    node = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise InvalidInput(f"OpenSLO document lacks {path}")
        node = node[part]
    return node


def _source(metric: Any, where: str) -> dict[str, Any]:
    source = _get(metric, "metricSource") if isinstance(metric, dict) else None
    if not isinstance(source, dict) or source.get("type") != "infersight":
        kind = source.get("type") if isinstance(source, dict) else None
        raise InvalidInput(
            f"OpenSLO {where} reads metric source type {kind!r}; only 'infersight' maps onto "
            "infersight's SLIs (they are computed from the stored request records)"
        )
    spec = source.get("spec", {})
    if not isinstance(spec, dict):
        raise InvalidInput(f"OpenSLO {where}.metricSource.spec must be a mapping")
    return spec


def _selector(spec: dict[str, Any]) -> Selector:
    raw = spec.get("selector", {}) or {}
    if not isinstance(raw, dict):
        raise InvalidInput("an OpenSLO selector is a mapping of labels")
    unknown = set(raw) - {"model", "instance", "tenant", "priority", "team", "workload"}
    if unknown:
        raise InvalidInput("unknown selector labels", details={"labels": sorted(map(str, unknown))})
    return Selector(**{k: str(v) for k, v in raw.items()})


def _openslo(header: Header, spec: Any) -> SloSpec:
    if not isinstance(spec, dict):
        raise InvalidInput("the OpenSLO spec must be a mapping")
    if "indicatorRef" in spec:
        raise InvalidInput("OpenSLO indicatorRef is not supported: inline the indicator")
    if spec.get("budgetingMethod", "Occurrences") != "Occurrences":
        raise InvalidInput(
            f"OpenSLO budgetingMethod {spec.get('budgetingMethod')!r} is not supported; "
            "infersight budgets by Occurrences (share of good requests)"
        )
    windows = _get(spec, "timeWindow")
    if not isinstance(windows, list) or len(windows) != 1 or not isinstance(windows[0], dict):
        raise InvalidInput("OpenSLO timeWindow must hold exactly one window")
    if windows[0].get("isRolling") is not True or "calendar" in windows[0]:
        raise InvalidInput("only rolling OpenSLO time windows are supported, not calendar ones")
    objectives = _get(spec, "objectives")
    if (
        not isinstance(objectives, list)
        or len(objectives) != 1
        or not isinstance(objectives[0], dict)
    ):
        raise InvalidInput("exactly one OpenSLO objective is supported")
    objective = objectives[0]
    if "target" not in objective:
        raise InvalidInput("the OpenSLO objective needs a target (e.g. 0.99)")
    sli, source = _openslo_sli(_get(spec, "indicator.spec"), objective)
    return SloSpec(
        name=header.name,
        sli=sli,
        objective=parse_objective(objective["target"]),
        window=parse_duration(str(windows[0].get("duration"))),
        selector=_selector(source),
        description=str(spec.get("description", "")),
    )


def _openslo_sli(indicator: Any, objective: dict[str, Any]) -> tuple[Sli, dict[str, Any]]:
    if not isinstance(indicator, dict):
        raise InvalidInput("the OpenSLO indicator spec must be a mapping")
    if "thresholdMetric" in indicator:
        source = _source(indicator["thresholdMetric"], "thresholdMetric")
        if objective.get("op") not in ("lte", "lt"):
            raise InvalidInput("a latency objective must use op lte (or lt): good is fast")
        if "value" not in objective:
            raise InvalidInput("a thresholdMetric objective needs a value (seconds)")
        metric = str(source.get("metric"))
        return Sli(SliKind.LATENCY, metric, parse_threshold(objective["value"])), source
    if "ratioMetric" in indicator:
        ratio = indicator["ratioMetric"]
        if not isinstance(ratio, dict):
            raise InvalidInput("an OpenSLO ratioMetric is a mapping of good and total")
        if "bad" in ratio:
            raise InvalidInput("OpenSLO ratioMetric with 'bad' is not supported; use good/total")
        good = _source(ratio.get("good"), "ratioMetric.good")
        total = _source(ratio.get("total"), "ratioMetric.total")
        queries = (good.get("query"), total.get("query"))
        if queries == ("successful_requests", "requests"):
            return Sli(SliKind.AVAILABILITY), total
        if queries in _GOODPUT_QUERIES:
            unknown = set(good) - {"query", "selector", *GOODPUT_METRICS}
            if unknown:
                raise InvalidInput(
                    "unknown goodput targets on ratioMetric.good",
                    details={"keys": sorted(map(str, unknown)), "allowed": list(GOODPUT_METRICS)},
                )
            if good.get("selector", total.get("selector")) != total.get("selector"):
                raise InvalidInput("ratioMetric.good and .total must select the same requests")
            targets = {m: good[m] for m in GOODPUT_METRICS if good.get(m) is not None}
            return _goodput_sli({**targets, "per": _GOODPUT_QUERIES[queries]}), total
        raise InvalidInput(
            "an infersight ratioMetric is good: {query: successful_requests} over "
            "total: {query: requests} (availability), or goodput: good: {query: "
            "good_requests, ttft: 2s, tpot: 100ms, e2e: …} over total: {query: requests}, "
            "or good: {query: good_output_tokens, …} over total: {query: output_tokens}"
        )
    raise InvalidInput("the OpenSLO indicator needs a thresholdMetric or a ratioMetric")


#: The SLO kind: infersight/v1 (written) and OpenSLO v1.
SLO: Final[DocumentKind[SloSpec]] = DocumentKind(
    "SLO",
    {API_VERSION: Reading(_SpecDoc, _native), OPENSLO: Reading(None, _openslo)},
    field_paths={
        "objective": "spec.objective",
        "description": "metadata.description",
        "the SLO window": "spec.window",
    },
    article="an",
)
