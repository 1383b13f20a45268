"""Symptom → cause diagnosis: a pure function of two windows' signals and a rule pack.

Each instance in scope is compared with itself in the reference window and with its peers
(same model) in the incident window. Every rule of the pack that matches an instance becomes a
candidate, scored by the rule's weight, its supporting evidence and how badly that instance is
hurt compared with the worst one. Candidates are ranked per cause; the best is the diagnosis,
the rest its alternatives. No IO, no clock: the caller passes everything in.

Errors have no cause of their own in the contract's vocabulary: a failure that no rule
explains (a total outage, a bad deploy) stays ``unknown``, but its evidence says what fails —
the error ratio against the reference and the most frequent error types (``error_type:NAME``,
the share of failed requests that carry it). When one instance fails while its peers do not,
the rule pack blames that instance (``instance_degraded``).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from alerts.rules import Cause, CauseRule, Condition, RulePack
from core.signals import InstanceSignals, WindowSignals

#: Below this, a reference value counts as zero (ratios then become infinite or 1).
_TINY: Final = 1e-12
#: How much a cause that is not an instance's best explanation still counts.
_SECONDARY: Final = 0.5
#: The symptom signals every diagnosis reports.
_SYMPTOM_SIGNALS: Final = ("ttft_p90", "tpot_p90", "e2e_p90", "error_ratio")
#: Confidence of ``unknown`` when something hurts but no rule explains it.
_UNEXPLAINED: Final = 0.2
#: How many error types the evidence names.
_ERROR_TYPES: Final = 3
#: Failed requests per instance and error type (``storage.signals.error_types``).
ErrorCounts = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class Evidence:
    signal: str
    current: float
    baseline: float | None
    ratio: float | None
    instance: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "instance": self.instance,
            "current": _finite(self.current),
            "baseline": _finite(self.baseline),
            "ratio": _finite(self.ratio),
        }


@dataclass(frozen=True, slots=True)
class Candidate:
    cause: Cause
    confidence: float
    instance: str
    evidence: tuple[Evidence, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause.value,
            "confidence": round(self.confidence, 3),
            "instance": self.instance,
            "evidence": [e.to_dict() for e in self.evidence],
        }


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The contract's diagnosis: top cause, confidence, evidence, ranked alternatives."""

    cause: Cause
    confidence: float
    instance: str
    evidence: tuple[Evidence, ...]
    alternatives: tuple[Candidate, ...]
    symptoms: tuple[Evidence, ...] = ()

    @property
    def ranked(self) -> tuple[Cause, ...]:
        return (self.cause, *(c.cause for c in self.alternatives))

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause.value,
            "confidence": round(self.confidence, 3),
            "instance": self.instance or None,
            "evidence": [e.to_dict() for e in self.evidence],
            "alternatives": [c.to_dict() for c in self.alternatives],
            "symptoms": [e.to_dict() for e in self.symptoms],
        }


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, 6)


def ratio(current: float, reference: float | None) -> float | None:
    """``current / reference``; a zero reference gives ∞ (or 1 when both are zero)."""
    if reference is None:
        return None
    if abs(reference) <= _TINY:
        return math.inf if current > _TINY else 1.0
    return current / reference


@dataclass(frozen=True, slots=True)
class _Context:
    """One instance in both windows, its peers, and the symptoms that hold for it."""

    now: InstanceSignals
    ref: InstanceSignals | None
    peers: tuple[InstanceSignals, ...]
    symptoms: frozenset[str] = frozenset()

    def peer_median(self, signal: str) -> float | None:
        values = [v for p in self.peers if (v := p.get(signal)) is not None]
        return statistics.median(values) if values else None


def _holds(cond: Condition, ctx: _Context) -> tuple[bool, Evidence | None]:
    if cond.symptom:
        return cond.symptom in ctx.symptoms, None
    current = ctx.now.get(cond.signal)
    if current is None:
        return False, None
    reference = ctx.ref.get(cond.signal) if ctx.ref is not None else None
    r = ratio(current, reference)
    checks = [
        cond.above is None or current > cond.above,
        cond.below is None or current < cond.below,
        cond.ratio_above is None or (r is not None and r >= cond.ratio_above),
        cond.ratio_below is None or (r is not None and r <= cond.ratio_below),
    ]
    evidence = Evidence(cond.signal, current, reference, r, ctx.now.instance)
    if cond.peer_ratio_above is not None:
        peer = ctx.peer_median(cond.signal)
        pr = ratio(current, peer)
        checks.append(pr is not None and pr >= cond.peer_ratio_above)
        if cond.ratio_above is None:
            evidence = Evidence(cond.signal, current, peer, pr, ctx.now.instance)
    return all(checks), evidence


def _match(rule: CauseRule, ctx: _Context) -> tuple[float, tuple[Evidence, ...]] | None:
    """The rule's strength for this instance and its evidence, or ``None`` if it fails."""
    evidence: dict[str, Evidence] = {}

    def check(conds: tuple[Condition, ...]) -> list[bool]:
        out = []
        for cond in conds:
            ok, ev = _holds(cond, ctx)
            out.append(ok)
            if ok and ev is not None:
                evidence.setdefault(ev.signal, ev)
        return out

    if not all(check(rule.when)):
        return None
    if rule.any and not any(check(rule.any)):
        return None
    if any(_holds(cond, ctx)[0] for cond in rule.unless):
        return None
    support = check(rule.support)
    share = sum(support) / len(support) if support else 1.0
    return rule.weight * (0.7 + 0.3 * share), tuple(evidence.values())


def _symptoms(pack: RulePack, ctx: _Context) -> frozenset[str]:
    return frozenset(name for name, cond in pack.symptoms if _holds(cond, ctx)[0])


def _impact(ctx: _Context) -> float:
    """How badly the instance is hurt: log of its worst latency ratio, plus error growth."""
    worst = 1.0
    for signal in ("ttft_p90", "tpot_p90", "e2e_p90"):
        current = ctx.now.get(signal)
        r = ratio(current, ctx.ref.get(signal)) if current is not None and ctx.ref else None
        if r is not None:
            worst = max(worst, min(r, 1e6))
    errors = (ctx.now.get("error_ratio") or 0.0) - (
        (ctx.ref.get("error_ratio") or 0.0) if ctx.ref else 0.0
    )
    return math.log(worst) + max(0.0, errors) * 10.0


def _contexts(pack: RulePack, current: WindowSignals, reference: WindowSignals) -> list[_Context]:
    refs = reference.by_instance()
    out = []
    for now in current.instances:
        ref = refs.get(now.instance)
        if (now.get("requests") or 0) < pack.min_requests:
            continue
        if ref is None or (ref.get("requests") or 0) < pack.min_requests:
            continue
        same = [p for p in current.instances if p.instance != now.instance and p.model == now.model]
        ctx = _Context(now, ref, tuple(same))
        out.append(_Context(now, ref, ctx.peers, _symptoms(pack, ctx)))
    return out


def _symptom_evidence(ctx: _Context) -> tuple[Evidence, ...]:
    out = []
    for signal in _SYMPTOM_SIGNALS:
        current = ctx.now.get(signal)
        if current is None:
            continue
        reference = ctx.ref.get(signal) if ctx.ref else None
        out.append(
            Evidence(signal, current, reference, ratio(current, reference), ctx.now.instance)
        )
    return tuple(out)


def _errors_of(contexts: list[_Context], errors: ErrorCounts, at_reference: bool) -> Counter[str]:
    out: Counter[str] = Counter()
    for ctx in contexts:
        out.update(errors.get((ctx.ref if at_reference and ctx.ref else ctx.now).instance, {}))
    return out


def _failed(contexts: list[_Context], reference: bool) -> tuple[float, float]:
    """(failed requests, requests) over ``contexts`` in one window."""
    failed = total = 0.0
    for ctx in contexts:
        signals = ctx.ref if reference and ctx.ref is not None else ctx.now
        n = signals.get("requests") or 0.0
        failed += n * (signals.get("error_ratio") or 0.0)
        total += n
    return failed, total


def _error_evidence(
    failing: list[_Context], errors: ErrorCounts, reference_errors: ErrorCounts
) -> tuple[Evidence, ...]:
    """What fails on ``failing`` instances: their error ratio, then the top error types."""
    if not failing:
        return ()
    instance = failing[0].now.instance if len(failing) == 1 else ""
    now_failed, now_total = _failed(failing, reference=False)
    ref_failed, ref_total = _failed(failing, reference=True)
    current = now_failed / now_total if now_total else 0.0
    baseline = ref_failed / ref_total if ref_total else None
    out = [Evidence("error_ratio", current, baseline, ratio(current, baseline), instance)]
    kinds = _errors_of(failing, errors, at_reference=False)
    before = _errors_of(failing, reference_errors, at_reference=True)
    failed, failed_before = sum(kinds.values()), sum(before.values())
    for kind, n in sorted(kinds.items(), key=lambda item: (-item[1], item[0]))[:_ERROR_TYPES]:
        share = n / failed
        was = before.get(kind, 0) / failed_before if failed_before else None
        out.append(
            Evidence(f"error_type:{kind or 'untyped'}", share, was, ratio(share, was), instance)
        )
    return tuple(out)


def diagnose(
    current: WindowSignals,
    reference: WindowSignals,
    pack: RulePack,
    errors: ErrorCounts | None = None,
    reference_errors: ErrorCounts | None = None,
) -> Diagnosis:
    """Rank the causes that explain ``current`` against ``reference`` under ``pack``;
    ``errors`` / ``reference_errors`` (failed requests per instance and error type) name the
    error types in the evidence when failures are among the symptoms."""
    errors, reference_errors = errors or {}, reference_errors or {}
    contexts = _contexts(pack, current, reference)
    hurt = [c for c in contexts if c.symptoms]
    if not hurt:
        worst = max(contexts, key=_impact, default=None)
        symptoms = _symptom_evidence(worst) if worst else ()
        return Diagnosis(Cause.UNKNOWN, 0.0, "", (), (), symptoms)
    top_impact = max(*(_impact(c) for c in hurt), _TINY)
    best: dict[Cause, Candidate] = {}
    for ctx in hurt:
        scale = 0.5 + 0.5 * min(1.0, _impact(ctx) / top_impact)
        matches = []
        for rule in pack.causes:
            found = _match(rule, ctx)
            if found is not None:
                matches.append((found[0], rule.cause, found[1]))
        matches.sort(key=lambda m: m[0], reverse=True)
        for rank, (strength, cause, evidence) in enumerate(matches):
            confidence = strength * scale * (1.0 if rank == 0 else _SECONDARY)
            held = best.get(cause)
            if held is None or confidence > held.confidence:
                best[cause] = Candidate(cause, confidence, ctx.now.instance, evidence)
    worst = max(hurt, key=_impact)
    failing = [c for c in hurt if "errors" in c.symptoms]
    if not best:
        # Nothing explains it; if requests fail, say what fails and where (one instance, or
        # the whole scope when several fail).
        where = failing[0].now.instance if len(failing) == 1 else ""
        if not failing:
            where = worst.now.instance
        evidence = _error_evidence(failing, errors, reference_errors)
        return Diagnosis(Cause.UNKNOWN, _UNEXPLAINED, where, evidence, (), _symptom_evidence(worst))
    ranked = sorted(best.values(), key=lambda c: (-c.confidence, c.cause.value))
    top = ranked[0]
    symptoms = next((_symptom_evidence(c) for c in hurt if c.now.instance == top.instance), ())
    evidence = top.evidence
    if errors:
        named = {e.signal for e in evidence}
        on_top = [c for c in failing if c.now.instance == top.instance]
        extra = _error_evidence(on_top, errors, reference_errors)
        evidence += tuple(e for e in extra if e.signal not in named)
    return Diagnosis(top.cause, top.confidence, top.instance, evidence, tuple(ranked[1:]), symptoms)


def step_onset(ratios: Sequence[float]) -> int | None:
    """Where a series steps up: the index ``k`` that best splits it into ``ratios[:k]`` and a
    higher ``ratios[k:]`` (least squares, two constant levels), or ``None`` with no step up.

    Used on an SLO's bad-event ratio per minute before an incident opened, to find when the
    burn began (the reference window must end before it)."""
    n = len(ratios)
    if n < 2:
        return None
    total, squares = sum(ratios), sum(x * x for x in ratios)
    best: tuple[float, int] | None = None
    before = before_sq = 0.0
    for k in range(1, n):
        before += ratios[k - 1]
        before_sq += ratios[k - 1] ** 2
        after, after_sq = total - before, squares - before_sq
        if after / (n - k) <= before / k:
            continue
        sse = before_sq - before * before / k + after_sq - after * after / (n - k)
        if best is None or sse < best[0] - _TINY:
            best = (sse, k)
    return None if best is None else best[1]


def by_cause(diagnosis: Diagnosis) -> Mapping[Cause, float]:
    """Every ranked cause with its confidence (for tables and tests)."""
    out = {diagnosis.cause: diagnosis.confidence}
    out.update({c.cause: c.confidence for c in diagnosis.alternatives})
    return out
