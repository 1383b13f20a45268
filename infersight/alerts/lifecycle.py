"""The incident lifecycle as one table: when a page, an update or a resolve goes out.

``decide(state, cue, facts, tuning)`` is the whole paging decision, pure: the incident's
``Lifecycle`` (its phase and headline, as the store keeps them), what happened (the ``Cue``),
the ``Facts`` of the evaluation and of the diagnosis, and the ``Tuning`` in; the ``Decision``
out — the next phase, the history entries to append, the headline to keep and the one
notification to send, if any. ``service.diagnosis.DiagnosisListener`` gathers the facts and
applies the decision; ``service.notifications.Announcer`` asks it about a reopening.

A row whose ``when`` or writes need a fact the caller has not gathered yet (the burn's onset, the
onset of a burn that came back, a diagnosis) answers with ``Decision.need`` (and, for a
diagnosis, the windows to diagnose) instead: the caller gathers it and asks again, so only the
row that applies decides what is read from the store. The first row (in order) whose phase,
cue and ``when`` match decides:

 # phase       cue           when              → phase     history          tell
 1 unpaged     change, pass  page may wait     unpaged     —                —
 2 unpaged     change, pass  otherwise         firing      onset            PAGE latest
 3 unpaged     resolved      —                 resolved    onset, resolved  —
 4 paged       resolved      —                 resolved    resolved         RESOLVE headline
 5 paged       change        cleared           =           —                CHANGE headline
 6 firing      change        otherwise         firing      judged           CHANGE headline
 7 recovering  change        otherwise         firing      burning, judged  CHANGE latest
 8 firing      pass          cleared           recovering  recovering       —
 9 recovering  pass          cleared           recovering  —                —
10 recovering  pass          returned lately   recovering  —                —
11 recovering  pass          news              firing      burning, judged  UPDATE latest
12 recovering  pass          otherwise (flap)  firing      burning, judged  —
13 firing      pass          diagnosed lately  firing      —                —
14 firing      pass          raised            firing      judged           UPDATE latest
15 firing      pass          otherwise (kept)  firing      judged           —
16 resolved    reopened      more severe       resolved    —                UPDATE latest (severity)
17 resolved    reopened      elsewhere         resolved    —                UPDATE latest (cause)
18 resolved    reopened      otherwise (flap)  resolved    —                —
19 any         any           otherwise         =           —                —

Cues: *change* is the evaluation's ``opened``, ``escalated`` or ``deescalated``; *resolved* its
resolution; *pass* the follow-up job's pass over firing incidents (every few seconds);
*reopened* the announcer's: the next incident of the SLO and scope opened while this one's
resolve was held back (``flap_hold``). Phases: *unpaged* has no headline yet (the page is owed);
*firing* has one; *recovering* is firing with the symptom seen cleared (the history's last
step); *paged* is firing or recovering. When:

* *page may wait*: the incident window holds < min_evidence of the burn, opened < max_page_wait ago
* *cleared*: the symptom has cleared (the evaluation's recovering_since)
* *returned lately*: the burn that came back began < min_evidence ago
* *news*: it names another cause or instance than the headline, or began after the symptom had
  stayed cleared ≥ reburn_after
* *diagnosed lately*: the headline was stamped < every ago
* *raised*: judge raises the latest over the headline
* *more severe*: the reopening incident is of a higher severity
* *elsewhere*: the reopening names another cause or instance than the headline

History: *onset* is the latest diagnosis as the headline, stored with its symptom; *judged* is
the latest as ``kept`` or ``raised`` (``judge``): a raised one becomes the headline, either way
the headline is stamped with the time (the follow-up's ``every`` counts from it); *burning*,
*recovering* (at when the symptom cleared, or the last entry if later) and *resolved* are steps
with the headline's cause. A row that writes a diagnosis diagnoses the incident window
(``incident_windows``) or, with *burning*, the window of the burn that came back, against the
incident's reference. Tell: PAGE is ``Transition.OPENED`` at the incident's severity, CHANGE the
cue's own transition, RESOLVE ``Transition.RESOLVED``, UPDATE ``Notice.UPDATE`` (an update of
the receiver's open alert: same dedup key); it carries the *headline* (after the writes) or the
*latest* diagnosis. Nothing is paged twice: a kept diagnosis (15), the same fault flapping
(12) and a reopening with nothing new (18) tell nobody, and the outbox keys each message by
incident, event, severity and revision (an update's cause and when its burn came back).

``judge`` is the headline's rule: a later diagnosis replaces it (``RAISED``) only with clearly
stronger evidence from the incident's own place — a named cause (never ``unknown``), on the
headline's instance when the headline names one (a fault on another instance is another
incident's business), at least ``raise_margin`` more confident than the headline and at least
``raise_floor``, and confirmed by the diagnosis before it (same cause, same instance), so one
noisy window cannot rewrite an incident.

Diagnoses come in as the dictionaries ``alerts.diagnose.Diagnosis.to_dict`` makes.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from infersight.core.burn import Severity, Transition
from infersight.core.errors import InvalidInput
from infersight.core.incident_writes import HistoryWrite
from infersight.core.window import Window

# -- the vocabulary ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tuning:
    """Every constant of the lifecycle, with the values it ships with."""

    window: timedelta = timedelta(minutes=5)
    """The incident window: short, so that an early diagnosis is not diluted by healthy
    minutes."""
    lead: timedelta = timedelta(minutes=1)
    """How far before its opening an incident's window reaches when no onset is found (a fast
    burn pages within a minute or two of its onset); the window grows to ``window``."""
    every: timedelta = timedelta(minutes=2)
    """How often a firing incident is diagnosed again."""
    min_evidence: timedelta = timedelta(seconds=30)
    """How much of the burn the incident window must hold before the page's diagnosis is
    made (requests are stored when they finish: the newest seconds lack those in flight)."""
    max_page_wait: timedelta = timedelta(seconds=60)
    """The longest a page waits for that evidence after the incident opened."""
    reburn_after: timedelta = timedelta(minutes=2)
    """A burn that returns after the symptom stayed cleared this long is news even when it
    names the headline's cause. Shorter than the policy's ``resolve_after`` (5 min)."""
    raise_margin: float = 0.15
    """How much more confident a later cause must be than the headline to replace it."""
    raise_floor: float = 0.5
    """The least confidence a cause needs to replace a headline at all."""
    flap_hold: timedelta = timedelta(minutes=5)
    """How long a resolve notification waits in case the alert flaps back open."""
    onset_lookback: timedelta = timedelta(hours=1)
    """How far back, before an incident opened, the start of its burn is looked for."""
    onset_slice: timedelta = timedelta(seconds=10)
    """The onset, found to the minute, is refined within it to slices this long."""
    onset_margin: timedelta = timedelta(minutes=1)
    """The reference ends this long before the burn's onset."""
    min_window: timedelta = timedelta(seconds=30)
    """The shortest incident window (a burn diagnosed seconds after its onset)."""
    cleared_before_resolve: timedelta = timedelta(minutes=5)
    """The onset of an incident that opens after another of its SLO and scope resolved is
    looked for from this long before that resolution (its symptom had cleared by then)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, timedelta) and value <= timedelta(0) and f.name != "lead":
                raise InvalidInput(f"lifecycle tuning: {f.name} must be positive")
        if self.lead < timedelta(0):
            raise InvalidInput("lifecycle tuning: lead must not be negative")
        for name in ("raise_margin", "raise_floor"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise InvalidInput(f"lifecycle tuning: {name} must be within [0, 1]")


DEFAULTS: Final = Tuning()


class Phase(StrEnum):
    UNPAGED = "unpaged"
    FIRING = "firing"
    RECOVERING = "recovering"
    RESOLVED = "resolved"


class Cue(StrEnum):
    """What happened to the incident."""

    OPENED = "opened"
    ESCALATED = "escalated"
    DEESCALATED = "deescalated"
    RESOLVED = "resolved"
    PASS = "pass"  # noqa: S105 (the follow-up job's pass, no secret)
    REOPENED = "reopened"

    @classmethod
    def of(cls, transition: Transition) -> Cue:
        """The cue of an incident change (``Transition.NONE`` changes nothing: no cue)."""
        if transition is Transition.NONE:
            raise ValueError("Transition.NONE is no incident change")
        return cls(transition.value)


class Notice(StrEnum):
    """A notification that is no change of the alert (those are ``core.burn.Transition``)."""

    UPDATE = "update"
    """News of the open alert — a raised diagnosis, a burn that came back, a reopening with
    another cause, a profile's finding: an update of the receiver's open alert (its dedup key),
    under an outbox key of its own."""


#: What a notification tells: an alert's change, or news of the open alert.
Told = Transition | Notice


class Verdict(StrEnum):
    KEPT = "kept"
    RAISED = "raised"


class Need(StrEnum):
    """A fact gathered only when a row asks for it."""

    ONSET = "onset"
    """The incident's burn onset (``None``: no step up found)."""
    RETURN = "return"
    """The onset of a burn that came back, since the symptom cleared."""
    DIAGNOSIS = "diagnosis"
    """A diagnosis of ``Decision.windows``, and the diagnosis before it in the history."""


class Step(StrEnum):
    """A history entry a row appends (the column *history*)."""

    ONSET = "onset"
    JUDGED = "judged"
    BURNING = "burning"
    RECOVERING = "recovering"
    RESOLVED = "resolved"


class Tell(StrEnum):
    """The notification a row sends (the column *tell*)."""

    PAGE = "PAGE"
    CHANGE = "CHANGE"
    RESOLVE = "RESOLVE"
    UPDATE = "UPDATE"


class About(StrEnum):
    """Which diagnosis the notification carries."""

    HEADLINE = "headline"
    LATEST = "latest"


class Reopen(StrEnum):
    """Why a reopening is news (the outbox revision of its update)."""

    SEVERITY = "severity"
    CAUSE = "cause"


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """An incident's place in its lifecycle, as the store keeps it."""

    phase: Phase
    headline: Mapping[str, Any] | None = None
    """The page's diagnosis, or one raised over it."""
    diagnosed_at: datetime | None = None
    """When a diagnosis last stamped the headline."""
    last_at: datetime | None = None
    """The time of the newest history entry (recovering: when the symptom cleared)."""
    severity: Severity | None = None
    """The incident's severity (a reopening compares the next incident's with it)."""

    @classmethod
    def of(
        cls,
        headline: Mapping[str, Any] | None,
        symptom: Mapping[str, Any] | None,
        diagnosed_at: datetime | None,
        last: tuple[str, datetime] | None,
        severity: Severity | None = None,
    ) -> Lifecycle:
        """From the stored note (headline, symptom, when) and the newest history entry
        (verdict, time)."""
        verdict, at = last if last is not None else ("", None)
        if headline is None or symptom is None:
            phase = Phase.UNPAGED
        elif verdict == "recovering":
            phase = Phase.RECOVERING
        elif verdict == "resolved":
            phase = Phase.RESOLVED
        else:
            phase = Phase.FIRING
        return cls(phase, headline, diagnosed_at, at, severity)


@dataclass(frozen=True, slots=True)
class Facts:
    """What is known at the cue: the evaluation's facts, then what the rows asked for."""

    at: datetime
    """When: the change's time, the follow-up's now, or the resolution."""
    opened_at: datetime
    cleared_since: datetime | None = None
    """Since when the symptom has cleared (``Incident.recovering_since``)."""
    severity: Severity | None = None
    """The incident's severity (reopened: the reopening incident's)."""
    found: frozenset[Need] = frozenset()
    onset: datetime | None = None
    returned_at: datetime | None = None
    """The onset of the burn that came back."""
    latest: Mapping[str, Any] | None = None
    """The diagnosis just made (reopened: the reopening incident's)."""
    previous: Mapping[str, Any] | None = None
    """The diagnosis before it in the history (``judge`` wants it confirmed)."""

    def given(self, need: Need, **values: Any) -> Facts:
        """These facts with ``need`` gathered (its ``values``)."""
        return dataclasses.replace(self, found=self.found | {need}, **values)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a row decided: gather ``need`` and ask again, or apply the rest (all in one
    transaction: the writes and the notification commit together)."""

    row: int
    phase: Phase
    need: Need | None = None
    windows: tuple[Window, Window] | None = None
    """With ``Need.DIAGNOSIS``: the incident window and its reference."""
    history: tuple[HistoryWrite, ...] = ()
    """The history entries to append (``storage.incident_history``)."""
    headline: Mapping[str, Any] | None = None
    """The headline to store, stamped ``at`` (``None``: left alone)."""
    renewed: bool = False
    """The headline is new, stored with the latest diagnosis's symptom (the onset)."""
    at: datetime | None = None
    tell: Told | None = None
    about: Mapping[str, Any] | None = None
    """The diagnosis the notification carries."""
    reopened: Reopen | None = None

    @property
    def acts(self) -> bool:
        return bool(self.history) or self.headline is not None or self.tell is not None


# -- the guards --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class When:
    """A row's condition: its name in the table, what it means, the facts it reads."""

    name: str
    meaning: str
    test: Callable[[Lifecycle, Facts, Tuning], bool]
    needs: tuple[Need, ...] = ()


def _cause(diagnosis: Mapping[str, Any] | None) -> str:
    return str((diagnosis or {}).get("cause") or "unknown")


def _page_may_wait(state: Lifecycle, facts: Facts, tuning: Tuning) -> bool:
    current, _ = incident_windows(facts.opened_at, facts.at, facts.onset, tuning)
    young = facts.at - (facts.onset or current.start) < tuning.min_evidence
    return young and facts.at - facts.opened_at < tuning.max_page_wait


def _returned_lately(state: Lifecycle, facts: Facts, tuning: Tuning) -> bool:
    return facts.returned_at is not None and facts.at - facts.returned_at < tuning.min_evidence


def _news(state: Lifecycle, facts: Facts, tuning: Tuning) -> bool:
    latest, headline = facts.latest or {}, state.headline or {}
    elsewhere = any(latest.get(k) != headline.get(k) for k in ("cause", "instance"))
    cleared_at = state.last_at or facts.at
    return elsewhere or (facts.returned_at or facts.at) - cleared_at >= tuning.reburn_after


def _raised(state: Lifecycle, facts: Facts, tuning: Tuning) -> bool:
    return _verdict(state, facts, tuning) is Verdict.RAISED


def _more_severe(state: Lifecycle, facts: Facts, tuning: Tuning) -> bool:
    if state.severity is None or facts.severity is None:
        return False
    return facts.severity.rank > state.severity.rank


def _elsewhere(state: Lifecycle, facts: Facts, tuning: Tuning) -> bool:
    if state.headline is None:
        return False  # nothing to tell it from
    latest = facts.latest or {}
    place = (state.headline.get("cause"), state.headline.get("instance"))
    return place != (latest.get("cause"), latest.get("instance"))


ALWAYS: Final = When("—", "", lambda *_: True)
OTHERWISE: Final = When("otherwise", "", lambda *_: True)
FLAP: Final = When("otherwise (flap)", "", lambda *_: True)
KEPT: Final = When("otherwise (kept)", "", lambda *_: True)
CLEARED: Final = When(
    "cleared", "the symptom has cleared (the evaluation's recovering_since)",
    lambda s, f, t: f.cleared_since is not None,
)  # fmt: skip
PAGE_MAY_WAIT: Final = When(
    "page may wait",
    "the incident window holds < min_evidence of the burn, opened < max_page_wait ago",
    _page_may_wait, (Need.ONSET,),
)  # fmt: skip
RECENT: Final = When(
    "diagnosed lately", "the headline was stamped < every ago",
    lambda s, f, t: s.diagnosed_at is not None and f.at - s.diagnosed_at < t.every,
)  # fmt: skip
RAISED: Final = When(
    "raised", "judge raises the latest over the headline",
    _raised, (Need.ONSET, Need.DIAGNOSIS),
)  # fmt: skip
RETURNED_LATELY: Final = When(
    "returned lately", "the burn that came back began < min_evidence ago",
    _returned_lately, (Need.RETURN,),
)  # fmt: skip
NEWS: Final = When(
    "news",
    "it names another cause or instance than the headline, or began after the symptom "
    "had stayed cleared ≥ reburn_after",
    _news, (Need.RETURN, Need.ONSET, Need.DIAGNOSIS),
)  # fmt: skip
MORE_SEVERE: Final = When(
    "more severe", "the reopening incident is of a higher severity", _more_severe
)
ELSEWHERE: Final = When(
    "elsewhere", "the reopening names another cause or instance than the headline", _elsewhere
)

# -- the table ---------------------------------------------------------------------------------

UNPAGED, FIRING, RECOVERING, RESOLVED = Phase
CHANGE: Final = (Cue.OPENED, Cue.ESCALATED, Cue.DEESCALATED)
CHANGE_OR_PASS: Final = (*CHANGE, Cue.PASS)
PASS: Final = (Cue.PASS,)
RESOLVE: Final = (Cue.RESOLVED,)
REOPEN: Final = (Cue.REOPENED,)
#: A burn that came back: a step, then its diagnosis judged.
AGAIN: Final = (Step.BURNING, Step.JUDGED)
PAGED: Final = (Phase.FIRING, Phase.RECOVERING)
LATEST, HEADLINE = About.LATEST, About.HEADLINE


@dataclass(frozen=True, slots=True)
class Row:
    number: int
    phases: tuple[Phase, ...]
    cues: tuple[Cue, ...]
    when: When
    then: Phase | None
    """The next phase (``None``: unchanged)."""
    history: tuple[Step, ...] = ()
    tell: Tell | None = None
    about: About = About.HEADLINE
    reopened: Reopen | None = None

    @property
    def needs(self) -> tuple[Need, ...]:
        """The facts the row reads: its ``when``'s, then a diagnosis (after the onsets its
        windows start from) when it writes one."""
        wanted = list(self.when.needs)
        if Step.BURNING in self.history:
            wanted.append(Need.RETURN)
        if Step.ONSET in self.history or Step.JUDGED in self.history:
            wanted += [Need.ONSET, Need.DIAGNOSIS]
        return tuple(dict.fromkeys(wanted))


# fmt: off
TABLE: Final = (
    Row(1, (UNPAGED,), CHANGE_OR_PASS, PAGE_MAY_WAIT, UNPAGED),
    Row(2, (UNPAGED,), CHANGE_OR_PASS, OTHERWISE, FIRING, (Step.ONSET,), Tell.PAGE, LATEST),
    Row(3, (UNPAGED,), RESOLVE, ALWAYS, RESOLVED, (Step.ONSET, Step.RESOLVED)),
    Row(4, PAGED, RESOLVE, ALWAYS, RESOLVED, (Step.RESOLVED,), Tell.RESOLVE),
    Row(5, PAGED, CHANGE, CLEARED, None, (), Tell.CHANGE),
    Row(6, (FIRING,), CHANGE, OTHERWISE, FIRING, (Step.JUDGED,), Tell.CHANGE),
    Row(7, (RECOVERING,), CHANGE, OTHERWISE, FIRING, AGAIN, Tell.CHANGE, LATEST),
    Row(8, (FIRING,), PASS, CLEARED, RECOVERING, (Step.RECOVERING,)),
    Row(9, (RECOVERING,), PASS, CLEARED, RECOVERING),
    Row(10, (RECOVERING,), PASS, RETURNED_LATELY, RECOVERING),
    Row(11, (RECOVERING,), PASS, NEWS, FIRING, AGAIN, Tell.UPDATE, LATEST),
    Row(12, (RECOVERING,), PASS, FLAP, FIRING, AGAIN),
    Row(13, (FIRING,), PASS, RECENT, FIRING),
    Row(14, (FIRING,), PASS, RAISED, FIRING, (Step.JUDGED,), Tell.UPDATE, LATEST),
    Row(15, (FIRING,), PASS, KEPT, FIRING, (Step.JUDGED,)),
    Row(16, (RESOLVED,), REOPEN, MORE_SEVERE, RESOLVED, (), Tell.UPDATE, LATEST, Reopen.SEVERITY),
    Row(17, (RESOLVED,), REOPEN, ELSEWHERE, RESOLVED, (), Tell.UPDATE, LATEST, Reopen.CAUSE),
    Row(18, (RESOLVED,), REOPEN, FLAP, RESOLVED),
    Row(19, tuple(Phase), tuple(Cue), OTHERWISE, None),
)
# fmt: on
"""The lifecycle, row by row (rendered in the module's docstring by ``render``)."""

# -- the function ------------------------------------------------------------------------------


def decide(state: Lifecycle, cue: Cue, facts: Facts, tuning: Tuning = DEFAULTS) -> Decision:
    """The first row that matches ``state``'s phase, ``cue`` and ``facts`` decides: a fact to
    gather first, or what to write and tell."""
    for row in TABLE:
        if state.phase not in row.phases or cue not in row.cues:
            continue
        if (need := _missing(row.when.needs, facts)) is not None:
            return _asking(row, need, state, facts, tuning)
        if not row.when.test(state, facts, tuning):
            continue
        if (need := _missing(row.needs, facts)) is not None:
            return _asking(row, need, state, facts, tuning)
        return _decided(row, state, cue, facts, tuning)
    raise InvalidInput(f"the lifecycle has no row for {state.phase} on {cue}")


def judge(
    headline: Mapping[str, Any],
    latest: Mapping[str, Any],
    previous: Mapping[str, Any] | None,
    tuning: Tuning = DEFAULTS,
) -> Verdict:
    """Whether ``latest`` replaces ``headline``; ``previous`` is the diagnosis before it."""
    cause, instance = _place(latest)
    held, where = _place(headline)
    if cause in ("unknown", held):
        return Verdict.KEPT
    if where and instance != where:
        return Verdict.KEPT  # a fault elsewhere
    needed = max(tuning.raise_floor, _confidence(headline) + tuning.raise_margin)
    if _confidence(latest) < needed:
        return Verdict.KEPT
    if previous is None or _place(previous) != (cause, instance):
        return Verdict.KEPT  # not confirmed yet
    return Verdict.RAISED


def incident_windows(
    opened_at: datetime, at: datetime, onset: datetime | None, tuning: Tuning = DEFAULTS
) -> tuple[Window, Window]:
    """(incident window, reference window) at ``at``. With the burn's ``onset``: the last
    ``window`` but not before the onset (and at least ``min_window``), against ``window`` ending
    ``onset_margin`` before the onset or ``window`` before the opening, whichever is earlier (a
    burn that grows slowly shows its step late). Without: the last ``window`` but from no
    earlier than ``lead`` before the opening, against ``window`` ending ``window`` before it.
    Either way re-diagnoses keep one reference, clear of the burn."""
    length = tuning.window
    if onset is not None and onset <= at:
        start = max(at - length, min(onset, at - tuning.min_window))
        anchor = min(onset - tuning.onset_margin, opened_at - length)
        return Window(start, at), Window(anchor - length, anchor)
    start = max(at - length, opened_at - tuning.lead)
    anchor = opened_at - length
    return Window(start, at), Window(anchor - length, anchor)


def return_windows(facts: Facts, tuning: Tuning = DEFAULTS) -> tuple[Window, Window]:
    """The window of a burn that came back (from its onset, as a page's) and the incident's
    reference."""
    _, reference = incident_windows(facts.opened_at, facts.at, facts.onset, tuning)
    at, length = facts.at, tuning.window
    start = max(at - length, min(facts.returned_at or at - length, at - tuning.min_window))
    return Window(start, at), reference


def render(rows: tuple[Row, ...] = TABLE) -> str:
    """The table as text (the module's docstring holds it)."""
    lines = [_ROW.format("#", "phase", "cue", "when", "→ phase", "history", "tell")]
    for row in rows:
        tell = f"{row.tell} {row.about}" if row.tell is not None else "—"
        if row.reopened is not None:
            tell += f" ({row.reopened})"
        lines.append(
            _ROW.format(
                row.number,
                _phases(row.phases),
                _cues(row.cues),
                row.when.name,
                row.then or "=",
                ", ".join(row.history) or "—",
                tell,
            )
        )
    return "\n".join(line.rstrip() for line in lines)


def legend(rows: tuple[Row, ...] = TABLE) -> str:
    """What each named ``when`` of the table means."""
    seen = {row.when.name: row.when.meaning for row in rows if row.when.meaning}
    items = (f"* *{name}*: {meaning}" for name, meaning in seen.items())
    return "\n".join(textwrap.fill(item, 100, subsequent_indent="  ") for item in items)


# -- helpers -----------------------------------------------------------------------------------

_ROW: Final = "{:>2} {:<10}  {:<12}  {:<16}  {:<10}  {:<15}  {}"
_TOLD: Final[Mapping[Tell, Told]] = {
    Tell.PAGE: Transition.OPENED,
    Tell.RESOLVE: Transition.RESOLVED,
    Tell.UPDATE: Notice.UPDATE,
}


def _phases(phases: tuple[Phase, ...]) -> str:
    if phases == tuple(Phase):
        return "any"
    return "paged" if phases == PAGED else ", ".join(phases)


def _cues(cues: tuple[Cue, ...]) -> str:
    if cues == tuple(Cue):
        return "any"
    if cues[: len(CHANGE)] == CHANGE:
        return ", ".join(("change", *cues[len(CHANGE) :]))
    return ", ".join(cues)


def _missing(needs: tuple[Need, ...], facts: Facts) -> Need | None:
    return next((need for need in needs if need not in facts.found), None)


def _asking(row: Row, need: Need, state: Lifecycle, facts: Facts, tuning: Tuning) -> Decision:
    windows = None
    if need is Need.DIAGNOSIS:
        windows = (
            return_windows(facts, tuning)
            if Need.RETURN in row.needs
            else incident_windows(facts.opened_at, facts.at, facts.onset, tuning)
        )
    return Decision(row.number, state.phase, need=need, windows=windows)


def _verdict(state: Lifecycle, facts: Facts, tuning: Tuning) -> Verdict:
    return judge(state.headline or {}, facts.latest or {}, facts.previous, tuning)


def _decided(row: Row, state: Lifecycle, cue: Cue, facts: Facts, tuning: Tuning) -> Decision:
    at, headline = facts.at, state.headline
    latest = dict(facts.latest) if facts.latest is not None else None
    if latest is not None and Step.BURNING in row.history:
        start = return_windows(facts, tuning)[0].start
        latest["burning_again_at"] = _iso(facts.returned_at or start)
    kept: Mapping[str, Any] | None = None
    entries: list[HistoryWrite] = []
    for step in row.history:
        if step is Step.ONSET:
            assert latest is not None
            entries.append(HistoryWrite(at, step.value, _cause(latest), latest))
            kept = latest
        elif step is Step.JUDGED:
            assert latest is not None
            verdict = judge(headline or {}, latest, facts.previous, tuning)
            entries.append(HistoryWrite(at, verdict.value, _cause(latest), latest))
            kept = latest if verdict is Verdict.RAISED else headline
        elif step is Step.RECOVERING:
            since = max(facts.cleared_since or at, state.last_at or at)
            entries.append(HistoryWrite(since, step.value, _cause(headline)))
        else:  # burning, resolved: steps with the headline's cause
            entries.append(HistoryWrite(at, step.value, _cause(kept or headline)))
    told: Told | None = None
    if row.tell is Tell.CHANGE:
        told = Transition(cue.value)
    elif row.tell is not None:
        told = _TOLD[row.tell]
    about = latest if row.about is About.LATEST else (kept or headline)
    return Decision(
        row.number, row.then or state.phase, history=tuple(entries), headline=kept,
        renewed=Step.ONSET in row.history, at=at, tell=told,
        about=about if told is not None else None, reopened=row.reopened,
    )  # fmt: skip


def _confidence(diagnosis: Mapping[str, Any]) -> float:
    value = diagnosis.get("confidence")
    return float(value) if isinstance(value, int | float) else 0.0


def _place(diagnosis: Mapping[str, Any]) -> tuple[str, str]:
    return str(diagnosis.get("cause") or "unknown"), str(diagnosis.get("instance") or "")


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")
