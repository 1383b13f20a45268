"""Symptom → cause diagnosis: a pure function of two windows' signals and a rule pack.

Each instance in scope is compared with itself in the reference window and with its peers
(same model) in the incident window. Every rule of the pack that matches an instance becomes a
candidate, scored by the rule's weight, its supporting evidence and how badly that instance is
hurt compared with the worst one. Candidates are ranked per cause; the best is the diagnosis,
the rest its alternatives. No IO, no clock: the caller passes everything in.

Telemetry is often partial (``alerts.matching``): a rule that needs a signal family the
instance lacks (no GPU samples, no engine ``/metrics``, no stage spans) is skipped, and when no
rule explains an instance, the pack's fallbacks name the cause its symptom pattern supports
(``decode_bound`` for a decode slowdown without GPU samples). Every candidate loses
``unchecked_penalty`` of its score per family it could not read, and says so in
``missing_evidence``; so too, without the penalty, for supporting evidence its family could
not give in the window (a counter read once has no rate).

Errors have no cause of their own in the contract's vocabulary: a failure that no rule
explains (a total outage, a bad deploy) stays ``unknown``, but its evidence says what fails —
the error ratio against the reference and the most frequent error types (``error_type:NAME``,
the share of failed requests that carry it). When one instance fails while its peers do not,
the rule pack blames that instance (``instance_degraded``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from infersight.alerts.matching import (
    Context,
    Evidence,
    holds,
    judge,
    missing_evidence,
    ratio,
    unread_support,
)
from infersight.alerts.rules import Cause, RulePack
from infersight.core.errors import InvalidInput
from infersight.core.profile import NAMED_SHARE, dominant
from infersight.core.signals import InstanceSignals, WindowSignals

__all__ = ["Candidate", "Diagnosis", "Evidence", "diagnose", "ratio", "step_onset"]

#: Below this, a reference value counts as zero (ratios then become infinite or 1).
_TINY: Final = 1e-12
#: How much a cause that is not an instance's best explanation still counts.
_SECONDARY: Final = 0.5
#: The symptom signals every diagnosis reports (the client's where calls were joined).
_SYMPTOM_SIGNALS: Final = (
    "ttft_p90", "tpot_p90", "e2e_p90", "error_ratio", "client_ttft_p90", "client_e2e_p90",
)  # fmt: skip
#: The latency signals whose growth says how badly an instance is hurt: the engine's, and the
#: client's (a gateway's delay hurts the callers while the engine's figures stay flat).
_IMPACT_SIGNALS: Final = ("ttft_p90", "tpot_p90", "e2e_p90", "client_ttft_p90", "client_e2e_p90")
#: Confidence of ``unknown`` when something hurts but no rule explains it.
_UNEXPLAINED: Final = 0.2
#: How many error types the evidence names.
_ERROR_TYPES: Final = 3
#: Failed requests per instance and error type (``storage.signals.error_types``).
ErrorCounts = Mapping[str, Mapping[str, int]]


@dataclass(frozen=True, slots=True)
class Candidate:
    cause: Cause
    confidence: float
    instance: str
    evidence: tuple[Evidence, ...] = ()
    missing_evidence: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause.value,
            "confidence": round(self.confidence, 3),
            "instance": self.instance,
            "evidence": [e.to_dict() for e in self.evidence],
            "missing_evidence": list(self.missing_evidence),
        }


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The contract's diagnosis: top cause, confidence, evidence, ranked alternatives, and
    what could not be checked for want of telemetry (``missing_evidence``, one sentence per
    absent signal family: "no GPU samples for vllm-8b-0: cannot tell compute from memory
    bandwidth")."""

    cause: Cause
    confidence: float
    instance: str
    evidence: tuple[Evidence, ...]
    alternatives: tuple[Candidate, ...]
    symptoms: tuple[Evidence, ...] = ()
    missing_evidence: tuple[str, ...] = ()
    #: A slow KV transfer's other end: the prefill source whose transfers into ``instance``
    #: slowed, ``*`` when all of them did (the decode side's link), "" when not known.
    kv_source: str = ""

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
            "missing_evidence": list(self.missing_evidence),
            "kv_source": self.kv_source or None,
        }


def _symptoms(pack: RulePack, ctx: Context) -> dict[str, Evidence | None]:
    """The symptoms that hold for the instance, with their evidence."""
    out = {}
    for name, cond in pack.symptoms:
        held, evidence = holds(cond, ctx)
        if held:
            out[name] = evidence
    return out


def _impact(ctx: Context) -> float:
    """How badly the instance is hurt: log of its worst latency ratio, plus error growth."""
    worst = 1.0
    for signal in _IMPACT_SIGNALS:
        current = ctx.now.get(signal)
        r = ratio(current, ctx.ref.get(signal)) if current is not None and ctx.ref else None
        if r is not None:
            worst = max(worst, min(r, 1e6))
    errors = (ctx.now.get("error_ratio") or 0.0) - (
        (ctx.ref.get("error_ratio") or 0.0) if ctx.ref else 0.0
    )
    return math.log(worst) + max(0.0, errors) * 10.0


def _contexts(pack: RulePack, current: WindowSignals, reference: WindowSignals) -> list[Context]:
    refs = reference.by_instance()
    out = []
    for now in current.instances:
        ref = refs.get(now.instance)
        if (now.get("requests") or 0) < pack.min_requests:
            continue
        if ref is None or (ref.get("requests") or 0) < pack.min_requests:
            continue
        same = [p for p in current.instances if p.instance != now.instance and p.model == now.model]
        ctx = Context(now, ref, tuple(same))
        out.append(Context(now, ref, ctx.peers, _symptoms(pack, ctx)))
    return out


def _symptom_evidence(ctx: Context) -> tuple[Evidence, ...]:
    out = []
    for signal in _SYMPTOM_SIGNALS:
        current = ctx.now.get(signal)
        if current is None:
            continue
        reference = ctx.ref.get(signal) if ctx.ref else None
        out.append(Evidence(signal, current, reference, ratio(current, reference), ctx.instance))
    return tuple(out)


def _errors_of(contexts: list[Context], errors: ErrorCounts, at_reference: bool) -> Counter[str]:
    out: Counter[str] = Counter()
    for ctx in contexts:
        out.update(errors.get((ctx.ref if at_reference and ctx.ref else ctx.now).instance, {}))
    return out


def _failed(contexts: list[Context], reference: bool) -> tuple[float, float]:
    """(failed requests, requests) over ``contexts`` in one window."""
    failed = total = 0.0
    for ctx in contexts:
        signals = ctx.ref if reference and ctx.ref is not None else ctx.now
        n = signals.get("requests") or 0.0
        failed += n * (signals.get("error_ratio") or 0.0)
        total += n
    return failed, total


def _error_evidence(
    failing: list[Context], errors: ErrorCounts, reference_errors: ErrorCounts
) -> tuple[Evidence, ...]:
    """What fails on ``failing`` instances: their error ratio, then the top error types."""
    if not failing:
        return ()
    instance = failing[0].instance if len(failing) == 1 else ""
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
    gaps: dict[str, tuple[str, ...]] = {}
    for ctx in hurt:
        scale = 0.5 + 0.5 * min(1.0, _impact(ctx) / top_impact)
        found, gaps[ctx.instance] = _candidates(pack, ctx)
        found.sort(key=lambda c: c.confidence, reverse=True)
        for rank, candidate in enumerate(found):
            confidence = candidate.confidence * scale * (1.0 if rank == 0 else _SECONDARY)
            held = best.get(candidate.cause)
            if held is None or confidence > held.confidence:
                best[candidate.cause] = replace(candidate, confidence=confidence)
    worst = max(hurt, key=_impact)
    failing = [c for c in hurt if "errors" in c.symptoms]
    if not best:
        # Nothing explains it; if requests fail, say what fails and where (one instance, or
        # the whole scope when several fail).
        where = failing[0].instance if len(failing) == 1 else ""
        if not failing:
            where = worst.instance
        evidence = _error_evidence(failing, errors, reference_errors)
        missing = gaps.get(where) or gaps[worst.instance]
        return Diagnosis(
            Cause.UNKNOWN, _UNEXPLAINED, where, evidence, (), _symptom_evidence(worst), missing
        )
    ranked = sorted(best.values(), key=lambda c: (-c.confidence, c.cause.value))
    top = ranked[0]
    symptoms = next((_symptom_evidence(c) for c in hurt if c.instance == top.instance), ())
    evidence = top.evidence
    if errors:
        named = {e.signal for e in evidence}
        on_top = [c for c in failing if c.instance == top.instance]
        extra = _error_evidence(on_top, errors, reference_errors)
        evidence += tuple(e for e in extra if e.signal not in named)
    source = ""
    if top.cause is Cause.KV_TRANSFER_SLOW:
        now_of, ref_of = current.by_instance(), reference.by_instance()
        ref = ref_of.get(top.instance)
        source = slow_kv_source(now_of[top.instance], ref)
    return Diagnosis(
        top.cause,
        top.confidence,
        top.instance,
        evidence,
        tuple(ranked[1:]),
        symptoms,
        top.missing_evidence,
        source,
    )


#: A prefill source is the slow end of a pair when its KV transfers into the instance took
#: this many times as long as before, and the other sources' did not.
SLOW_SOURCE_RATIO: Final = 2.0


def slow_kv_source(now: InstanceSignals, ref: InstanceSignals | None) -> str:
    """Which prefill → decode pair a slow KV transfer is on, from the decode instance's mean
    transfer time by prefill source against the reference window: the one source that
    slowed (``SLOW_SOURCE_RATIO``), ``*`` when every source did, "" when it cannot tell (no
    sources, none slowed, or several but not all)."""
    before = ref.kv_sources if ref is not None else {}
    slowed = [
        source
        for source, value in now.kv_sources.items()
        if source in before and value >= SLOW_SOURCE_RATIO * max(before[source], 1e-9)
    ]
    compared = [source for source in now.kv_sources if source in before]
    if not slowed:
        return ""
    if len(slowed) == len(compared) and len(compared) > 1:
        return "*"
    return slowed[0] if len(slowed) == 1 else ""


def _candidates(pack: RulePack, ctx: Context) -> tuple[list[Candidate], tuple[str, ...]]:
    """The causes that explain one instance (unscaled), and what could not be checked there.

    Rules first; a rule that is blind here is skipped. Only when no rule matched are the
    fallbacks tried, each where a rule of a cause it covers is blind but might have matched.
    Every candidate loses ``unchecked_penalty`` of its score per family it could not read."""
    verdicts = [judge(rule, ctx) for rule in pack.causes]
    blind = [v for v in verdicts if v.blind and v.might]
    matched = [v for v in verdicts if v.matched]
    if not matched:
        for fb in pack.fallbacks:
            stood_for = [v for v in blind if v.rule.cause in fb.covers]
            if stood_for:
                verdict = judge(fb, ctx)
                if verdict.matched:
                    covered = frozenset().union(*(v.blind for v in stood_for))
                    matched.append(replace(verdict, unchecked=verdict.unchecked | covered))
    out = []
    for v in matched:
        unchecked = missing_evidence(ctx, v.rule, sorted(v.unchecked), blind)
        strength = v.strength * (1.0 - pack.unchecked_penalty) ** len(unchecked)
        # Support it could not read already counts as not holding: reported, not penalised.
        unread = unread_support(v.rule, ctx) - v.unchecked
        missing = (
            missing_evidence(ctx, v.rule, [*sorted(v.unchecked), *sorted(unread)], blind)
            if unread
            else unchecked
        )
        out.append(Candidate(v.rule.cause, strength, ctx.instance, v.evidence, missing))
    return out, missing_evidence(ctx, None, (), blind)


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


# -- A host-side cause made specific by a profile (issue 37) ----------------------------------

#: Causes on the host's side: a profile of the blamed instance can say which limit it is.
HOST_CAUSES: Final = frozenset({Cause.HOST_BOUND, Cause.PREPROCESSING_SLOW})
#: A queue backlog is on the host's side too when the GPU idles while it grows: its evidence's
#: ``util_gpu`` fell below this ratio of the reference.
GPU_IDLE_RATIO: Final = 0.8
#: Busy samples at which a profile's share is taken at face value as confidence; fewer
#: samples scale it down.
CONFIDENT_SAMPLES: Final = 100


def host_side(diagnosis: Mapping[str, Any]) -> bool:
    """Whether a stored diagnosis blames the host of one instance (``HOST_CAUSES``, or a
    queue that grows while the GPU idles)."""
    if not diagnosis.get("instance"):
        return False
    cause = str(diagnosis.get("cause") or "")
    if cause in {c.value for c in HOST_CAUSES}:
        return True
    if cause != Cause.QUEUE_BACKLOG.value:
        return False
    for e in diagnosis.get("evidence") or ():
        r = e.get("ratio") if isinstance(e, Mapping) else None
        if e.get("signal") == "util_gpu" and isinstance(r, int | float) and r < GPU_IDLE_RATIO:
            return True
    return False


def with_profile(diagnosis: Mapping[str, Any], profile: Mapping[str, Any]) -> dict[str, Any]:
    """A stored diagnosis with what a profile of its instance says: ``profile`` (its id, state,
    shares, and the limit it names with its sentence and confidence, or why there is none)
    and, when a limit reaches ``core.profile.NAMED_SHARE`` of the busy samples, ``detail``
    (``tokenizer``, ``gil``, ``lock``, ``logging``) and an evidence entry
    ``profile:<limit>`` whose value is the share. The cause itself is kept (the API's and the
    rules' vocabulary); ``detail`` says which host-side limit it is. A profile of another
    instance than the diagnosis names is refused (``InvalidInput``)."""
    named_instance, profiled = diagnosis.get("instance"), profile.get("instance")
    if profiled is not None and named_instance != profiled:
        raise InvalidInput(
            f"profile {profile.get('id')} is of {profiled}, but the diagnosis is about "
            f"{named_instance}: it cannot be applied"
        )
    out = dict(diagnosis)
    out.pop("detail", None)
    evidence = [
        e for e in out.get("evidence") or () if not str(e.get("signal", "")).startswith("profile:")
    ]
    summary = profile.get("result") if isinstance(profile.get("result"), Mapping) else None
    note: dict[str, Any] = {"id": profile.get("id"), "state": profile.get("state")}
    if summary is None:
        note["error"] = str(profile.get("error") or "no profile")
    else:
        busy = int(summary.get("busy_samples") or 0)
        note.update(
            shares=dict(summary.get("shares") or {}),
            measured=list(summary.get("measured") or []),
            busy_samples=busy,
        )
        named = dominant(summary)
        if named is not None:
            confidence = named.share * min(1.0, busy / CONFIDENT_SAMPLES)
            note.update(
                limit=named.limit.value,
                share=round(named.share, 4),
                sentence=named.sentence,
                confidence=round(confidence, 3),
            )
            out["detail"] = named.limit.value
            instance = str(diagnosis.get("instance") or "")
            evidence.append(
                Evidence(
                    f"profile:{named.limit.value}", named.share, None, None, instance
                ).to_dict()
            )
        else:
            note["sentence"] = f"no host-side limit reaches {NAMED_SHARE * 100:.0f} % of samples"
    out["evidence"] = evidence
    out["profile"] = note
    return out
