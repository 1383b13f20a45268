"""The diagnosis rule pack: its file format (``kind: DiagnosisRules``) and its core values.

The YAML under ``alerts/rules/`` is parsed at this edge into frozen values (``RulePack``), so
the file format and the engine evolve separately. ``default.yaml`` documents the semantics;
every threshold the engine applies comes from here.

Two versions of the format are read. ``infersight/v2`` (the shipped one) makes every rule
declare the signal families (``core.signals.FAMILIES``: stage spans, engine ``/metrics``, GPU
samples) it ``needs`` — without them it cannot decide and is skipped — and those that merely
``supports`` it (their absence lowers its confidence), with a ``missing`` sentence per family
that says what is lost without it; and it adds ``fallbacks``: rules that stand in for the
rules they ``cover`` when those cannot be evaluated. ``infersight/v1`` packs are converted:
the families a rule's ``when`` (and an ``any`` made of one family's signals only) read are its
needs, the rest its supports, with generic sentences and no fallbacks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import yaml

from infersight.core.errors import InvalidInput
from infersight.core.signals import CLIENT, FAMILIES, FAMILY_OF, REQUESTS, SIGNALS

RULES_DIR: Final = Path(__file__).parent / "rules"
DEFAULT_RULES: Final = RULES_DIR / "default.yaml"
API_VERSIONS: Final = ("infersight/v1", "infersight/v2")
#: A matched rule scores ``weight × (SUPPORT_BASE + (1 − SUPPORT_BASE) × share of its support
#: conditions that hold)``.
SUPPORT_BASE: Final = 0.7
#: Families a rule may declare: every one but the requests themselves, which are always there.
DECLARABLE: Final = tuple(f for f in FAMILIES if f != REQUESTS)


class Cause(StrEnum):
    """The causes a diagnosis can name: the vocabulary of the API, the rule pack and the pages."""

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
    DECODE_BOUND = "decode_bound"
    """Decode is slower on the GPU side (compute or memory bandwidth), without the GPU
    telemetry that would tell which (a fallback of the GPU causes)."""
    GATEWAY_NETWORK = "gateway_network"
    """The time between the client and the engine grew (a gateway, the network, the client's
    own queueing) while the engine's latency stayed flat: read from client calls joined to
    the server's records by trace id (``core.gap``)."""
    SPEC_DECODE_COLLAPSE = "spec_decode_collapse"
    """Speculative decoding no longer pays: the target model rejects the draft's tokens, each
    verification step yields fewer tokens and decode slows (the engine's acceptance counters
    against the reference window)."""
    KV_TRANSFER_SLOW = "kv_transfer_slow"
    """Disaggregated serving: the KV cache's transfer from the prefill to the decode instance
    slowed or fails; the decode instance holds requests waiting for their blocks."""
    PREFILL_POOL_SATURATED = "prefill_pool_saturated"
    """Disaggregated serving: the prefill pool cannot keep up (its queue grows) while the
    decode side is fine: time to first token rises, time per output token does not."""
    DECODE_POOL_SATURATED = "decode_pool_saturated"
    """Disaggregated serving: the decode pool cannot keep up: its batches grow (slower
    tokens) and new requests wait for a slot after their KV cache arrived."""
    UNKNOWN = "unknown"


TESTS: Final = (
    "above", "below", "ratio_above", "ratio_below", "peer_ratio_above", "baseline_above",
)  # fmt: skip
#: The symptoms every pack defines, on signals of the requests themselves.
SYMPTOMS: Final = ("ttft", "tpot", "e2e", "errors")
#: The symptoms a pack may define, on signals of joined client calls: the latency the callers
#: saw. An instance is judged when one of them holds though the engine's are flat.
CLIENT_SYMPTOMS: Final = ("client_ttft", "client_e2e")


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
    baseline_above: float | None = None
    """The value in the reference window (a sample size there: ``client_pairs``)."""

    def __post_init__(self) -> None:
        if bool(self.signal) == bool(self.symptom):
            raise InvalidInput("a condition names a signal or a symptom, not both")
        if self.signal and self.signal not in SIGNALS:
            raise InvalidInput(f"unknown signal {self.signal!r}")
        if self.symptom and self.symptom not in (*SYMPTOMS, *CLIENT_SYMPTOMS):
            raise InvalidInput(f"unknown symptom {self.symptom!r}")
        tests = [getattr(self, t) for t in TESTS]
        if self.signal and all(t is None for t in tests):
            raise InvalidInput(f"condition on {self.signal} has no test")
        if self.symptom and any(t is not None for t in tests):
            raise InvalidInput("a symptom condition takes no thresholds")
        for t in tests:
            if t is not None and (not math.isfinite(t) or t < 0):
                raise InvalidInput("thresholds are finite numbers ≥ 0")

    @property
    def family(self) -> str:
        """The signal family this condition reads (``requests`` for a symptom)."""
        return FAMILY_OF[self.signal] if self.signal else REQUESTS


def _families(conds: Iterable[Condition]) -> frozenset[str]:
    return frozenset(c.family for c in conds) - {REQUESTS}


@dataclass(frozen=True, slots=True)
class CauseRule:
    """One cause and the conditions under which it explains an instance's symptoms.

    ``needs``: the signal families without which the rule cannot decide (it is then *blind*
    for that instance and skipped); ``supports``: the other families it reads, whose absence
    only lowers its confidence; ``missing``: per family, what is lost without it (a clause of
    the missing-evidence sentence). A fallback has ``covers``: the causes whose blind rules it
    stands in for."""

    cause: Cause
    weight: float
    when: tuple[Condition, ...] = ()
    any: tuple[Condition, ...] = ()
    unless: tuple[Condition, ...] = ()
    support: tuple[Condition, ...] = ()
    needs: frozenset[str] = frozenset()
    supports: frozenset[str] = frozenset()
    missing: Mapping[str, str] = field(default_factory=dict)
    covers: tuple[Cause, ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 < self.weight <= 1.0:
            raise InvalidInput("a rule's weight is in (0, 1]")
        if not self.when and not self.any:
            raise InvalidInput(f"rule {self.cause} needs `when` or `any` conditions")
        if self.cause is Cause.UNKNOWN:
            raise InvalidInput("`unknown` is what no rule matching means; it has no rule")
        object.__setattr__(self, "needs", frozenset(self.needs))
        object.__setattr__(self, "supports", frozenset(self.supports))
        object.__setattr__(self, "missing", dict(self.missing))
        _check_declarations(self)

    def _covered_families(self) -> frozenset[str]:
        return frozenset(DECLARABLE) if self.covers else frozenset()

    @property
    def fallback(self) -> bool:
        return bool(self.covers)


def _check_declarations(rule: CauseRule) -> None:
    """The families a rule declares agree with those its conditions read."""
    where = f"rule {rule.cause}"
    declared = rule.needs | rule.supports
    if declared - set(DECLARABLE):
        raise InvalidInput(
            f"{where}: unknown signal families (each is one of {', '.join(DECLARABLE)})",
            details={"families": sorted(declared - set(DECLARABLE))},
        )
    if rule.needs & rule.supports:
        raise InvalidInput(f"{where}: a family is needed or supporting, not both")
    read = _families((*rule.when, *rule.any, *rule.unless, *rule.support))
    problems = (
        (read - declared, "reads signal families it declares neither in `needs` nor `supports`"),
        (declared - read, "declares signal families it never reads"),
        (_families(rule.when) - rule.needs, "reads in `when` a family it does not need"),
        (declared - set(rule.missing), "has no `missing` sentence for a declared family"),
    )
    for families, what in problems:
        if families:
            raise InvalidInput(f"{where} {what}", details={"families": sorted(families)})
    if rule.any and all(c.family not in rule.needs | {REQUESTS} for c in rule.any):
        raise InvalidInput(
            f"{where}: no `any` condition can hold with only the needed families "
            "(declare one of theirs in `needs`)"
        )
    if set(rule.missing) - declared - rule._covered_families():
        raise InvalidInput(f"{where}: `missing` names a family the rule does not declare")
    for family, text in rule.missing.items():
        if not isinstance(text, str) or not text.strip() or len(text) > 300:
            raise InvalidInput(f"{where}: `missing.{family}` is a sentence of 1 to 300 characters")


@dataclass(frozen=True, slots=True)
class RulePack:
    name: str
    min_requests: int
    symptoms: tuple[tuple[str, Condition], ...]
    causes: tuple[CauseRule, ...]
    fallbacks: tuple[CauseRule, ...] = ()
    unchecked_penalty: float = 0.1
    """How much a candidate's score drops for each signal family it could not check."""

    def __post_init__(self) -> None:
        if self.min_requests < 1:
            raise InvalidInput("min_requests must be ≥ 1")
        if not 0.0 <= self.unchecked_penalty < 1.0:
            raise InvalidInput("unchecked_penalty is in [0, 1)")
        names = [name for name, _ in self.symptoms]
        required = [name for name in names if name not in CLIENT_SYMPTOMS]
        if sorted(required) != sorted(SYMPTOMS) or len(set(names)) != len(names):
            raise InvalidInput(
                f"a rule pack defines exactly the symptoms {', '.join(SYMPTOMS)}, and may "
                f"define {' and '.join(CLIENT_SYMPTOMS)}"
            )
        for name, cond in self.symptoms:
            if not cond.signal:
                raise InvalidInput("a symptom is defined on a signal")
            wanted = CLIENT if name in CLIENT_SYMPTOMS else REQUESTS
            if cond.family != wanted:
                raise InvalidInput(
                    f"symptom {name} is defined on a signal of the "
                    f"{'joined client calls' if wanted == CLIENT else 'requests themselves'}"
                )
        for rule in (*self.causes, *self.fallbacks):
            named = {c.symptom for c in (*rule.when, *rule.any, *rule.unless, *rule.support)}
            undefined = named - {""} - set(names)
            if undefined:
                raise InvalidInput(
                    f"rule {rule.cause} names a symptom the pack does not define",
                    details={"symptoms": sorted(undefined)},
                )
        for rule in self.causes:
            if rule.fallback:
                raise InvalidInput(f"rule {rule.cause}: `covers` belongs to fallbacks")
        for fb in self.fallbacks:
            self._check_fallback(fb)

    def _check_fallback(self, fb: CauseRule) -> None:
        where = f"fallback {fb.cause}"
        if not fb.fallback:
            raise InvalidInput(f"{where} needs `covers`: the causes it stands in for")
        for cause in fb.covers:
            rules = [r for r in self.causes if r.cause is cause]
            if not rules:
                raise InvalidInput(f"{where} covers {cause}, which has no rule")
            if not any(r.needs for r in rules):
                raise InvalidInput(
                    f"{where} covers {cause}, whose rules need no signal family "
                    "(they are never blind, so the fallback would never stand in)"
                )
            weakest = min(r.weight for r in rules) * SUPPORT_BASE
            if fb.weight * (1.0 - self.unchecked_penalty) >= weakest:
                raise InvalidInput(
                    f"{where} could outscore a rule of {cause} it stands in for: its weight × "
                    f"(1 − unchecked_penalty) must stay below {weakest:.3g}"
                )
            for rule in rules:
                lacking = rule.needs - set(fb.missing)
                if lacking:
                    raise InvalidInput(
                        f"{where}: `missing` needs a sentence for each family {cause} needs",
                        details={"families": sorted(lacking)},
                    )

    def rules_of(self, cause: Cause) -> tuple[CauseRule, ...]:
        return tuple(r for r in self.causes if r.cause is cause)


def _condition(data: Any) -> Condition:
    if not isinstance(data, dict):
        raise InvalidInput("a condition is a mapping", details={"condition": repr(data)})
    extra = set(data) - {"signal", "symptom", *TESTS}
    if extra:
        raise InvalidInput("unknown condition keys", details={"keys": sorted(extra)})
    try:
        numbers = {t: float(data[t]) for t in TESTS if t in data}
    except (TypeError, ValueError):
        raise InvalidInput("thresholds are numbers", details={"condition": repr(data)}) from None
    return Condition(
        signal=str(data.get("signal", "")), symptom=str(data.get("symptom", "")), **numbers
    )


def _conditions(data: Any, key: str) -> tuple[Condition, ...]:
    items = data.get(key) or []
    if not isinstance(items, list):
        raise InvalidInput(f"`{key}` is a list of conditions")
    return tuple(_condition(item) for item in items)


def _family_list(data: Any, key: str, where: str) -> frozenset[str]:
    items = data.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise InvalidInput(f"{where}: `{key}` is a list of signal families")
    return frozenset(items)


def _cause(value: Any) -> Cause:
    try:
        return Cause(str(value))
    except ValueError:
        raise InvalidInput(f"unknown cause {value!r}") from None


_V1_KEYS: Final = frozenset({"cause", "weight", "when", "any", "unless", "support", "doc"})
_V2_KEYS: Final = _V1_KEYS | {"needs", "supports", "missing"}


def _cause_rule(data: Any, version: str, fallback: bool = False) -> CauseRule:
    if not isinstance(data, dict):
        raise InvalidInput("a cause rule is a mapping")
    allowed = (
        _V1_KEYS if version == "infersight/v1" else _V2_KEYS | ({"covers"} if fallback else set())
    )
    extra = set(data) - allowed
    if extra:
        raise InvalidInput("unknown rule keys", details={"keys": sorted(extra)})
    cause = _cause(data.get("cause"))
    where = f"rule {cause}"
    try:
        weight = float(data.get("weight", 1.0))
    except (TypeError, ValueError):
        raise InvalidInput(f"{where}: the weight is a number") from None
    conditions = {key: _conditions(data, key) for key in ("when", "any", "unless", "support")}
    if version == "infersight/v1":
        return _converted(cause, weight, conditions)
    missing = data.get("missing") or {}
    if not isinstance(missing, dict):
        raise InvalidInput(f"{where}: `missing` maps a signal family to a sentence")
    covers = data.get("covers") or []
    if not isinstance(covers, list):
        raise InvalidInput(f"fallback {cause}: `covers` is a list of causes")
    if fallback and not covers:
        raise InvalidInput(f"fallback {cause} needs `covers`: the causes it stands in for")
    return CauseRule(
        cause=cause,
        weight=weight,
        needs=_family_list(data, "needs", where),
        supports=_family_list(data, "supports", where),
        missing={str(k): v for k, v in missing.items()},
        covers=tuple(_cause(c) for c in covers),
        **conditions,
    )


def _converted(
    cause: Cause, weight: float, conditions: dict[str, tuple[Condition, ...]]
) -> CauseRule:
    """A v1 rule: needs what its ``when`` reads, and the family of an ``any`` made of one
    family's signals only; supports the rest; generic sentences."""
    needs = set(_families(conditions["when"]))
    any_families = {c.family for c in conditions["any"]}
    if len(any_families) == 1 and REQUESTS not in any_families:
        needs |= any_families
    read = _families(c for conds in conditions.values() for c in conds)
    missing = {f: f"{cause.value.replace('_', ' ')} not checked" for f in read}
    return CauseRule(
        cause=cause,
        weight=weight,
        needs=frozenset(needs),
        supports=read - needs,
        missing=missing,
        when=conditions["when"],
        any=conditions["any"],
        unless=conditions["unless"],
        support=conditions["support"],
    )


def rule_pack_from_data(data: Any) -> RulePack:
    """Convert a parsed ``kind: DiagnosisRules`` document; raises ``InvalidInput``."""
    if not isinstance(data, dict):
        raise InvalidInput("a rule pack is a YAML mapping")
    version = data.get("apiVersion")
    if version not in API_VERSIONS or data.get("kind") != "DiagnosisRules":
        raise InvalidInput(
            f"a rule pack has apiVersion {' or '.join(API_VERSIONS)} and kind DiagnosisRules",
            details={"apiVersion": repr(version), "kind": repr(data.get("kind"))},
        )
    spec = data.get("spec")
    if not isinstance(spec, dict):
        raise InvalidInput("a rule pack needs a `spec` mapping")
    known = {"min_requests", "symptoms", "causes"}
    if version != "infersight/v1":
        known |= {"fallbacks", "unchecked_penalty"}
    if set(spec) - known:
        raise InvalidInput(
            f"unknown `spec` keys for {version}", details={"keys": sorted(set(spec) - known)}
        )
    symptoms = spec.get("symptoms")
    if not isinstance(symptoms, dict):
        raise InvalidInput("`spec.symptoms` maps a symptom name to a condition")
    causes = spec.get("causes")
    if not isinstance(causes, list) or not causes:
        raise InvalidInput("`spec.causes` is a non-empty list")
    fallbacks = spec.get("fallbacks") or []
    if not isinstance(fallbacks, list):
        raise InvalidInput("`spec.fallbacks` is a list")
    try:
        min_requests = int(spec.get("min_requests", 20))
        penalty = float(spec.get("unchecked_penalty", 0.1))
    except (TypeError, ValueError):
        raise InvalidInput("min_requests and unchecked_penalty are numbers") from None
    return RulePack(
        name=str((data.get("metadata") or {}).get("name", "rules")),
        min_requests=min_requests,
        symptoms=tuple((str(k), _condition(v)) for k, v in symptoms.items()),
        causes=tuple(_cause_rule(c, version) for c in causes),
        fallbacks=tuple(_cause_rule(f, version, fallback=True) for f in fallbacks),
        unchecked_penalty=penalty,
    )


def load_rules(path: Path = DEFAULT_RULES) -> RulePack:
    """Read and convert one rule-pack file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read rule pack {path}: {exc}") from None
    return rule_pack_from_data(data)
