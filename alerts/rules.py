"""The diagnosis rule pack: its file format (``kind: DiagnosisRules``) and its core values.

The YAML under ``alerts/rules/`` is parsed at this edge into frozen values (``RulePack``), so
the file format and the engine evolve separately. ``default.yaml`` documents the semantics;
every threshold the engine applies comes from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import yaml

from core.errors import InvalidInput
from core.signals import SIGNALS

RULES_DIR: Final = Path(__file__).parent / "rules"
DEFAULT_RULES: Final = RULES_DIR / "default.yaml"


class Cause(StrEnum):
    """ARCHITECTURE.md's cause vocabulary."""

    QUEUE_BACKLOG = "queue_backlog"
    PREPROCESSING_SLOW = "preprocessing_slow"
    LONG_INPUTS = "long_inputs"
    GPU_SATURATED = "gpu_saturated"
    MEMORY_BANDWIDTH_BOUND = "memory_bandwidth_bound"
    GPU_THROTTLED = "gpu_throttled"
    KV_CACHE_PRESSURE = "kv_cache_pressure"
    OVERLOAD = "overload"
    INSTANCE_DEGRADED = "instance_degraded"
    HOST_BOUND = "host_bound"
    UNKNOWN = "unknown"


TESTS: Final = ("above", "below", "ratio_above", "ratio_below", "peer_ratio_above")
SYMPTOMS: Final = ("ttft", "tpot", "e2e", "errors")


@dataclass(frozen=True, slots=True)
class Condition:
    """One signal with tests that must all hold, or one symptom (``signal`` empty)."""

    signal: str = ""
    symptom: str = ""
    above: float | None = None
    below: float | None = None
    ratio_above: float | None = None
    ratio_below: float | None = None
    peer_ratio_above: float | None = None

    def __post_init__(self) -> None:
        if bool(self.signal) == bool(self.symptom):
            raise InvalidInput("a condition names a signal or a symptom, not both")
        if self.signal and self.signal not in SIGNALS:
            raise InvalidInput(f"unknown signal {self.signal!r}")
        if self.symptom and self.symptom not in SYMPTOMS:
            raise InvalidInput(f"unknown symptom {self.symptom!r}")
        tests = [getattr(self, t) for t in TESTS]
        if self.signal and all(t is None for t in tests):
            raise InvalidInput(f"condition on {self.signal} has no test")
        if self.symptom and any(t is not None for t in tests):
            raise InvalidInput("a symptom condition takes no thresholds")
        for t in tests:
            if t is not None and (not math.isfinite(t) or t < 0):
                raise InvalidInput("thresholds are finite numbers ≥ 0")


@dataclass(frozen=True, slots=True)
class CauseRule:
    cause: Cause
    weight: float
    when: tuple[Condition, ...] = ()
    any: tuple[Condition, ...] = ()
    unless: tuple[Condition, ...] = ()
    support: tuple[Condition, ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 < self.weight <= 1.0:
            raise InvalidInput("a rule's weight is in (0, 1]")
        if not self.when and not self.any:
            raise InvalidInput(f"rule {self.cause} needs `when` or `any` conditions")
        if self.cause is Cause.UNKNOWN:
            raise InvalidInput("`unknown` is what no rule matching means; it has no rule")


@dataclass(frozen=True, slots=True)
class RulePack:
    name: str
    min_requests: int
    symptoms: tuple[tuple[str, Condition], ...]
    causes: tuple[CauseRule, ...]

    def __post_init__(self) -> None:
        if self.min_requests < 1:
            raise InvalidInput("min_requests must be ≥ 1")
        names = [name for name, _ in self.symptoms]
        if sorted(names) != sorted(SYMPTOMS):
            raise InvalidInput(f"a rule pack defines exactly the symptoms {', '.join(SYMPTOMS)}")
        for _, cond in self.symptoms:
            if not cond.signal:
                raise InvalidInput("a symptom is defined on a signal")


def _condition(data: Any) -> Condition:
    if not isinstance(data, dict):
        raise InvalidInput("a condition is a mapping", details={"condition": repr(data)})
    extra = set(data) - {"signal", "symptom", *TESTS}
    if extra:
        raise InvalidInput("unknown condition keys", details={"keys": sorted(extra)})
    numbers = {t: float(data[t]) for t in TESTS if t in data}
    return Condition(
        signal=str(data.get("signal", "")), symptom=str(data.get("symptom", "")), **numbers
    )


def _conditions(data: Any, key: str) -> tuple[Condition, ...]:
    items = data.get(key) or []
    if not isinstance(items, list):
        raise InvalidInput(f"`{key}` is a list of conditions")
    return tuple(_condition(item) for item in items)


def _cause_rule(data: Any) -> CauseRule:
    if not isinstance(data, dict):
        raise InvalidInput("a cause rule is a mapping")
    extra = set(data) - {"cause", "weight", "when", "any", "unless", "support", "doc"}
    if extra:
        raise InvalidInput("unknown rule keys", details={"keys": sorted(extra)})
    try:
        cause = Cause(str(data.get("cause")))
    except ValueError:
        raise InvalidInput(f"unknown cause {data.get('cause')!r}") from None
    return CauseRule(
        cause=cause,
        weight=float(data.get("weight", 1.0)),
        when=_conditions(data, "when"),
        any=_conditions(data, "any"),
        unless=_conditions(data, "unless"),
        support=_conditions(data, "support"),
    )


def rule_pack_from_data(data: Any) -> RulePack:
    """Convert a parsed ``kind: DiagnosisRules`` document; raises ``InvalidInput``."""
    if not isinstance(data, dict):
        raise InvalidInput("a rule pack is a YAML mapping")
    if data.get("apiVersion") != "infersight/v1" or data.get("kind") != "DiagnosisRules":
        raise InvalidInput("a rule pack has apiVersion infersight/v1 and kind DiagnosisRules")
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise InvalidInput("a rule pack needs a `spec` mapping")
    symptoms = spec.get("symptoms")
    if not isinstance(symptoms, dict):
        raise InvalidInput("`spec.symptoms` maps a symptom name to a condition")
    causes = spec.get("causes")
    if not isinstance(causes, list) or not causes:
        raise InvalidInput("`spec.causes` is a non-empty list")
    return RulePack(
        name=str((data.get("metadata") or {}).get("name", "rules")),
        min_requests=int(spec.get("min_requests", 20)),
        symptoms=tuple((str(k), _condition(v)) for k, v in symptoms.items()),
        causes=tuple(_cause_rule(c) for c in causes),
    )


def load_rules(path: Path = DEFAULT_RULES) -> RulePack:
    """Read and convert one rule-pack file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read rule pack {path}: {exc}") from None
    return rule_pack_from_data(data)
