"""One rule against one instance, when telemetry may be partial: match, blindness, what is missing.

A condition is true, false or *unchecked* — its signal's family is absent for the instance in
the incident window (no GPU samples, no engine ``/metrics``, no stage spans), the signal itself
is absent, or a ratio test has no reference value. A rule is *blind* on an instance when a
family it ``needs`` is absent there, or present without any of the rule's ``when`` / ``any``
signals of it; a blind rule is skipped, but it *might have matched* when none of its checked
conditions failed, and then its missing-evidence sentence is reported and a fallback may
stand in for it. Pure: signals and rules in, verdicts out (``alerts.diagnose`` ranks them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from infersight.alerts.rules import SUPPORT_BASE, CauseRule, Condition
from infersight.core.signals import (
    FAMILIES,
    FAMILY_OF,
    FEATURE_FAMILIES,
    STAGES,
    InstanceSignals,
)

#: Below this, a reference value counts as zero (ratios then become infinite or 1).
_TINY: Final = 1e-12


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
class Context:
    """One instance in both windows, its peers, and the symptoms that hold for it."""

    now: InstanceSignals
    ref: InstanceSignals | None
    peers: tuple[InstanceSignals, ...]
    symptoms: Mapping[str, Evidence | None] = field(default_factory=dict)
    """The symptoms that hold, each with the evidence of its defining condition."""

    @property
    def instance(self) -> str:
        return self.now.instance

    def peer_median(self, signal: str) -> float | None:
        values = [v for p in self.peers if (v := p.get(signal)) is not None]
        return statistics.median(values) if values else None


def holds(cond: Condition, ctx: Context) -> tuple[bool | None, Evidence | None]:
    """Whether ``cond`` holds for the instance (``None``: it cannot be checked), and the
    evidence it gives when it holds."""
    if cond.symptom:
        held = cond.symptom in ctx.symptoms
        return held, ctx.symptoms.get(cond.symptom) if held else None
    current = ctx.now.get(cond.signal)
    if current is None or not ctx.now.has(cond.family):
        return None, None
    reference = ctx.ref.get(cond.signal) if ctx.ref is not None else None
    r = ratio(current, reference)
    if (cond.ratio_above is not None or cond.ratio_below is not None) and r is None:
        return None, None
    if cond.baseline_above is not None and reference is None:
        return None, None
    checks = [
        cond.above is None or current > cond.above,
        cond.below is None or current < cond.below,
        cond.ratio_above is None or (r is not None and r >= cond.ratio_above),
        cond.ratio_below is None or (r is not None and r <= cond.ratio_below),
        cond.baseline_above is None or (reference is not None and reference > cond.baseline_above),
    ]
    evidence = Evidence(cond.signal, current, reference, r, ctx.instance)
    if cond.peer_ratio_above is not None:
        peer = ctx.peer_median(cond.signal)
        pr = ratio(current, peer)
        # No peers is a fact about the fleet, not a gap in telemetry: the test fails.
        checks.append(pr is not None and pr >= cond.peer_ratio_above)
        if cond.ratio_above is None:
            evidence = Evidence(cond.signal, current, peer, pr, ctx.instance)
    return all(checks), evidence


@dataclass(frozen=True, slots=True)
class Verdict:
    """One rule on one instance."""

    rule: CauseRule
    blind: frozenset[str]
    """Needed families it could not read (non-empty: the rule was skipped)."""
    matched: bool
    might: bool
    """No condition that could be checked failed (for a blind rule: it might have matched)."""
    strength: float = 0.0
    evidence: tuple[Evidence, ...] = ()
    unchecked: frozenset[str] = frozenset()
    """Families of the ``unless`` conditions it could not check (it may be wrongly matched)."""


def blind_families(rule: CauseRule, ctx: Context) -> frozenset[str]:
    """The families ``rule`` needs but cannot read on this instance."""
    out = set()
    deciding = (*rule.when, *rule.any)
    for family in rule.needs:
        signals = [c.signal for c in deciding if c.signal and c.family == family]
        if not ctx.now.has(family) or (signals and all(ctx.now.get(s) is None for s in signals)):
            out.add(family)
    return frozenset(out)


def judge(rule: CauseRule, ctx: Context) -> Verdict:
    """Evaluate ``rule`` on one instance, in three-valued logic. A rule that needs a feature
    the instance does not use (``FEATURE_FAMILIES``: no speculative decoding) does not apply:
    it neither matches nor counts as blind."""
    if any(not ctx.now.has(f) for f in rule.needs & FEATURE_FAMILIES):
        return Verdict(rule, frozenset(), False, False)
    evidence: dict[str, Evidence] = {}

    def check(conds: Sequence[Condition], keep: bool = True) -> list[bool | None]:
        out = []
        for cond in conds:
            value, ev = holds(cond, ctx)
            out.append(value)
            if keep and value and ev is not None:
                evidence.setdefault(ev.signal, ev)
        return out

    when, any_, unless = check(rule.when), check(rule.any), check(rule.unless, keep=False)
    excluded = any(u is True for u in unless)
    might = (
        not excluded
        and all(w is not False for w in when)
        and (not any_ or any(a is not False for a in any_))
    )
    blind = blind_families(rule, ctx)
    matched = (
        not blind
        and might
        and all(w is True for w in when)
        and (not any_ or any(a is True for a in any_))
    )
    if not matched:
        return Verdict(rule, blind, False, might)
    support = check(rule.support)
    share = sum(s is True for s in support) / len(support) if support else 1.0
    unchecked = frozenset(c.family for c, u in zip(rule.unless, unless, strict=True) if u is None)
    return Verdict(
        rule,
        blind,
        True,
        True,
        rule.weight * (SUPPORT_BASE + (1.0 - SUPPORT_BASE) * share),
        tuple(evidence.values()),
        unchecked,
    )


def unread_support(rule: CauseRule, ctx: Context) -> frozenset[str]:
    """The families the instance has data of in which a ``support`` condition of ``rule``
    finds no value (a counter read once in the window has no rate): evidence that could not
    be computed, reported in ``missing_evidence``."""
    return frozenset(
        c.family
        for c in rule.support
        if c.signal and ctx.now.has(c.family) and ctx.now.get(c.signal) is None
    )


#: Stage signals a split request has none of: its wait is the KV transfer's.
_QUEUE_SIGNALS: Final = frozenset({"queue_mean", "queue_p90"})


def _absent_signals(ctx: Context, family: str, rules: Iterable[CauseRule]) -> list[str]:
    signals = {
        c.signal
        for rule in rules
        for c in (*rule.when, *rule.any, *rule.unless, *rule.support)
        if c.signal and FAMILY_OF[c.signal] == family and ctx.now.get(c.signal) is None
    }
    return sorted(signals)


def missing_evidence(
    ctx: Context,
    rule: CauseRule | None,
    own: Iterable[str],
    blind: Sequence[Verdict],
) -> tuple[str, ...]:
    """One sentence per family the diagnosis could not read on this instance: what ``rule``
    (the candidate's) lost in its ``own`` families, then what each blind rule that might have
    matched could have shown ("no GPU samples for vllm-8b-0: cannot tell compute from memory
    bandwidth")."""
    texts: dict[str, list[str]] = {}
    users: dict[str, list[CauseRule]] = {}
    own = list(dict.fromkeys(own))
    for family in own:
        if rule is not None and family in rule.missing:
            texts.setdefault(family, []).append(rule.missing[family])
            users.setdefault(family, []).append(rule)
    summarised = set(own) if rule is not None and rule.fallback else set()
    for verdict in blind:
        for family in sorted(verdict.blind):
            users.setdefault(family, []).append(verdict.rule)
            if family not in summarised:
                texts.setdefault(family, []).append(verdict.rule.missing[family])
    out = []
    transfer = ctx.now.get("kv_transfer_p90")
    for family, clauses in texts.items():
        noun = FAMILIES[family]
        if ctx.now.has(family):
            absent = _absent_signals(ctx, family, users[family])
            if transfer is not None and family == STAGES:
                # Split requests (P/D): the decode instance's wait is the KV transfer's.
                queued = [name for name in absent if name in _QUEUE_SIGNALS]
                absent = [name for name in absent if name not in _QUEUE_SIGNALS]
                if queued and not absent:
                    out.append(
                        f"the stage spans of {ctx.instance} have no queue time of their own: "
                        "its requests were split (prefill/decode), and their wait for a decode "
                        f"slot is counted in the KV transfer (kv_transfer_p90 {transfer:.3g} s)"
                    )
                    continue
            lacking = ", ".join(absent) or "some signals"
            head = f"the {noun} of {ctx.instance} lack {lacking}"
        else:
            head = f"no {noun} for {ctx.instance}"
        out.append(f"{head}: {'; '.join(dict.fromkeys(clauses))}")
    return tuple(out)
