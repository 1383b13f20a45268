"""``alerts.lifecycle.decide``: the incident lifecycle's table, one case per row.

Each case gives the incident's stored state, the cue and the evidence the store would answer
with; ``walk`` asks ``decide`` as the listener does, answering only the facts it asks for, so a
case also shows what each row reads (a recovering incident's healthy minutes are never
diagnosed, a fresh headline is not diagnosed again).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infersight.alerts import lifecycle
from infersight.alerts.lifecycle import (
    DEFAULTS,
    TABLE,
    Cue,
    Decision,
    Facts,
    Lifecycle,
    Need,
    Notice,
    Phase,
    Reopen,
    Tuning,
    decide,
    incident_windows,
)
from infersight.core.burn import Severity, Transition
from infersight.core.errors import InvalidInput
from infersight.core.window import Window

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
OPENED = T0 + timedelta(minutes=10)


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def d(cause: str, confidence: float = 0.6, instance: str | None = "vllm-8b-0") -> dict[str, Any]:
    return {"cause": cause, "confidence": confidence, "instance": instance, "evidence": []}


HEADLINE = d("overload")
STRONGER = d("kv_cache_pressure", 0.9)  # the same instance, clearly more confident


@dataclass(frozen=True)
class Store:
    """What the store answers when a row asks."""

    onset: datetime | None = OPENED - s(30)
    returned_at: datetime | None = None
    latest: Mapping[str, Any] = field(default_factory=lambda: dict(HEADLINE))
    previous: Mapping[str, Any] | None = None


def walk(
    state: Lifecycle, cue: Cue, facts: Facts, store: Store
) -> tuple[Decision, list[Need], list[tuple[Window, Window]]]:
    """Ask, answer, ask again (as ``service.diagnosis.DiagnosisListener`` does); the decision,
    the facts asked for and the windows diagnosed."""
    asked: list[Need] = []
    windows: list[tuple[Window, Window]] = []
    for _ in range(len(Need) + 1):
        decision = decide(state, cue, facts)
        if decision.need is None:
            return decision, asked, windows
        asked.append(decision.need)
        if decision.need is Need.ONSET:
            facts = facts.given(Need.ONSET, onset=store.onset)
        elif decision.need is Need.RETURN:
            facts = facts.given(Need.RETURN, returned_at=store.returned_at)
        else:
            assert decision.windows is not None
            windows.append(decision.windows)
            facts = facts.given(Need.DIAGNOSIS, latest=store.latest, previous=store.previous)
    raise AssertionError("decide kept asking")


def paged(phase: Phase = Phase.FIRING, **kw: Any) -> Lifecycle:
    values: dict[str, Any] = {
        "headline": HEADLINE,
        "diagnosed_at": OPENED,
        "last_at": OPENED,
        "severity": Severity.PAGE,
    }
    return Lifecycle(phase, **(values | kw))


def at(after_opening: timedelta, **kw: Any) -> Facts:
    return Facts(OPENED + after_opening, OPENED, severity=Severity.PAGE, **kw)


UNPAGED = Lifecycle(Phase.UNPAGED)
CLEARED = OPENED + timedelta(minutes=4)
RECOVERING = paged(Phase.RECOVERING, last_at=CLEARED)
LATER = CLEARED + timedelta(minutes=1)  # a pass while recovering


@dataclass(frozen=True)
class Case:
    name: str
    state: Lifecycle
    cue: Cue
    facts: Facts
    row: int
    phase: Phase
    history: tuple[str, ...] = ()
    tell: Transition | Notice | None = None
    about: str | None = None  # the cause the notification carries
    asked: tuple[Need, ...] = ()
    store: Store = Store()
    reopened: Reopen | None = None


def burned(again: datetime | None, latest: dict[str, Any]) -> Store:
    return Store(returned_at=again, latest=latest)


CASES = [
    # -- the page -------------------------------------------------------------------------
    Case("opened 10 s into its burn: the page waits for evidence", UNPAGED, Cue.OPENED,
         at(s(10)), 1, Phase.UNPAGED, asked=(Need.ONSET,), store=Store(onset=OPENED)),
    Case("a pass while the window still holds 20 s of the burn: still waiting", UNPAGED,
         Cue.PASS, at(s(20)), 1, Phase.UNPAGED, asked=(Need.ONSET,),
         store=Store(onset=OPENED)),
    Case("30 s of the burn in the window: paged with the onset's diagnosis", UNPAGED,
         Cue.PASS, at(s(0)), 2, Phase.FIRING, ("onset",), Transition.OPENED, "overload",
         (Need.ONSET, Need.DIAGNOSIS)),
    Case("a minute after the opening with 10 s of the burn: paged anyway", UNPAGED, Cue.PASS,
         at(s(60)), 2, Phase.FIRING, ("onset",), Transition.OPENED, "overload",
         (Need.ONSET, Need.DIAGNOSIS), Store(onset=OPENED + s(50))),
    Case("no onset found: the window reaches back a minute, paged at once", UNPAGED,
         Cue.OPENED, at(s(5)), 2, Phase.FIRING, ("onset",), Transition.OPENED, "overload",
         (Need.ONSET, Need.DIAGNOSIS), Store(onset=None)),
    Case("escalated before its page: paged as an opening at its severity", UNPAGED,
         Cue.ESCALATED, at(s(45)), 2, Phase.FIRING, ("onset",), Transition.OPENED, "overload",
         (Need.ONSET, Need.DIAGNOSIS)),
    Case("resolved before its page: diagnosed and recorded, nobody paged", UNPAGED,
         Cue.RESOLVED, at(s(20)), 3, Phase.RESOLVED, ("onset", "resolved"), None, None,
         (Need.ONSET, Need.DIAGNOSIS), Store(latest=d("queue_backlog"))),
    # -- changes of a paged incident ------------------------------------------------------
    Case("resolved: the resolve carries the headline, nothing is diagnosed", paged(),
         Cue.RESOLVED, at(timedelta(minutes=20)), 4, Phase.RESOLVED, ("resolved",),
         Transition.RESOLVED, "overload"),
    Case("resolved while recovering", RECOVERING, Cue.RESOLVED, at(timedelta(minutes=9)), 4,
         Phase.RESOLVED, ("resolved",), Transition.RESOLVED, "overload"),
    Case("escalated while the symptom has cleared: told with the headline", paged(),
         Cue.ESCALATED, at(timedelta(minutes=5), cleared_since=CLEARED), 5, Phase.FIRING,
         (), Transition.ESCALATED, "overload"),
    Case("de-escalated while recovering and cleared: told, still recovering", RECOVERING,
         Cue.DEESCALATED, at(timedelta(minutes=6), cleared_since=CLEARED), 5,
         Phase.RECOVERING, (), Transition.DEESCALATED, "overload"),
    Case("escalated while burning: diagnosed, told with the kept headline", paged(),
         Cue.ESCALATED, at(timedelta(minutes=3)), 6, Phase.FIRING, ("kept",),
         Transition.ESCALATED, "overload", (Need.ONSET, Need.DIAGNOSIS),
         Store(latest=d("gpu_throttled", 0.9, "vllm-8b-1"))),
    Case("escalated with a confirmed stronger cause: told with the raised one", paged(),
         Cue.ESCALATED, at(timedelta(minutes=3)), 6, Phase.FIRING, ("raised",),
         Transition.ESCALATED, "kv_cache_pressure", (Need.ONSET, Need.DIAGNOSIS),
         Store(latest=STRONGER, previous=STRONGER)),
    Case("escalated by a burn that came back: told with that burn, no wait", RECOVERING,
         Cue.ESCALATED, at(timedelta(minutes=6)), 7, Phase.FIRING, ("burning", "kept"),
         Transition.ESCALATED, "gpu_throttled", (Need.RETURN, Need.ONSET, Need.DIAGNOSIS),
         burned(OPENED + timedelta(minutes=6) - s(5), d("gpu_throttled", 0.9, "vllm-8b-1"))),
    # -- the follow-up's passes -----------------------------------------------------------
    Case("the symptom cleared: marked recovering, nothing told", paged(), Cue.PASS,
         at(timedelta(minutes=5), cleared_since=CLEARED), 8, Phase.RECOVERING,
         ("recovering",)),
    Case("recovering: healthy minutes are not diagnosed", RECOVERING, Cue.PASS,
         Facts(LATER, OPENED, cleared_since=CLEARED), 9, Phase.RECOVERING),
    Case("a burn that came back 10 s ago: waits for evidence", RECOVERING, Cue.PASS,
         Facts(LATER, OPENED), 10, Phase.RECOVERING, asked=(Need.RETURN,),
         store=burned(LATER - s(10), HEADLINE)),
    Case("burning again on another instance: an update of the open alert", RECOVERING,
         Cue.PASS, Facts(LATER, OPENED), 11, Phase.FIRING, ("burning", "kept"), Notice.UPDATE,
         "gpu_throttled", (Need.RETURN, Need.ONSET, Need.DIAGNOSIS),
         burned(LATER - s(40), d("gpu_throttled", 0.9, "vllm-8b-1"))),
    Case("burning again with the same cause after 2 quiet minutes: an update", RECOVERING,
         Cue.PASS, Facts(CLEARED + timedelta(minutes=3), OPENED), 11, Phase.FIRING,
         ("burning", "kept"), Notice.UPDATE, "overload",
         (Need.RETURN, Need.ONSET, Need.DIAGNOSIS),
         burned(CLEARED + timedelta(minutes=2), HEADLINE)),
    Case("the same fault flapping: recorded, nobody told", RECOVERING, Cue.PASS,
         Facts(LATER, OPENED), 12, Phase.FIRING, ("burning", "kept"), None, None,
         (Need.RETURN, Need.ONSET, Need.DIAGNOSIS), burned(LATER - s(40), HEADLINE)),
    Case("diagnosed a minute ago: not diagnosed again", paged(), Cue.PASS,
         at(timedelta(minutes=1)), 13, Phase.FIRING),
    Case("a stronger cause, confirmed: raised, an update of the open alert", paged(),
         Cue.PASS, at(timedelta(minutes=2)), 14, Phase.FIRING, ("raised",), Notice.UPDATE,
         "kv_cache_pressure", (Need.ONSET, Need.DIAGNOSIS),
         Store(latest=STRONGER, previous=STRONGER)),
    Case("a stronger cause seen once: kept, nobody told", paged(), Cue.PASS,
         at(timedelta(minutes=2)), 15, Phase.FIRING, ("kept",), None, None,
         (Need.ONSET, Need.DIAGNOSIS), Store(latest=STRONGER, previous=HEADLINE)),
    Case("a fault on another instance: kept, nobody told", paged(), Cue.PASS,
         at(timedelta(minutes=2)), 15, Phase.FIRING, ("kept",), None, None,
         (Need.ONSET, Need.DIAGNOSIS), Store(latest=d("gpu_throttled", 1.0, "vllm-8b-1"),
                                             previous=d("gpu_throttled", 1.0, "vllm-8b-1"))),
    # -- reopened within the resolve's hold-down (the announcer) ---------------------------
    Case("a page reopens a ticket's incident: an update at its severity",
         Lifecycle(Phase.RESOLVED, HEADLINE, severity=Severity.TICKET), Cue.REOPENED,
         Facts(OPENED, OPENED, severity=Severity.PAGE, latest=HEADLINE), 16, Phase.RESOLVED,
         (), Notice.UPDATE, "overload", reopened=Reopen.SEVERITY),
    Case("reopened on another instance: an update with the new cause",
         Lifecycle(Phase.RESOLVED, HEADLINE, severity=Severity.PAGE), Cue.REOPENED,
         Facts(OPENED, OPENED, severity=Severity.PAGE,
               latest=d("kv_cache_pressure", 0.8, "vllm-8b-1")), 17, Phase.RESOLVED,
         (), Notice.UPDATE, "kv_cache_pressure", reopened=Reopen.CAUSE),
    Case("reopened with the same cause: the alert flapped, nobody told",
         Lifecycle(Phase.RESOLVED, HEADLINE, severity=Severity.PAGE), Cue.REOPENED,
         Facts(OPENED, OPENED, severity=Severity.PAGE, latest=d("overload", 0.9)), 18,
         Phase.RESOLVED),
    Case("reopened after an incident never diagnosed: nothing to tell it from",
         Lifecycle(Phase.RESOLVED, severity=Severity.PAGE), Cue.REOPENED,
         Facts(OPENED, OPENED, severity=Severity.PAGE, latest=HEADLINE), 18, Phase.RESOLVED),
    # -- nothing else changes anything ----------------------------------------------------
    Case("a pass over a resolved incident", paged(Phase.RESOLVED), Cue.PASS,
         at(timedelta(minutes=30)), 19, Phase.RESOLVED),
    Case("a reopening asked of a firing incident", paged(), Cue.REOPENED,
         at(timedelta(minutes=3)), 19, Phase.FIRING),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_row(case: Case) -> None:
    decision, asked, _ = walk(case.state, case.cue, case.facts, case.store)
    assert decision.row == case.row
    assert decision.phase is case.phase
    assert tuple(e.verdict for e in decision.history) == case.history
    assert decision.tell == case.tell
    assert decision.tell is None or type(decision.tell) is type(case.tell)
    assert (decision.about or {}).get("cause") == case.about
    assert tuple(asked) == case.asked
    assert decision.reopened is case.reopened
    assert decision.acts == bool(case.history or case.tell)


def test_every_row_has_a_case() -> None:
    decided = {walk(c.state, c.cue, c.facts, c.store)[0].row for c in CASES}
    assert decided == {row.number for row in TABLE}
    assert [row.number for row in TABLE] == list(range(1, len(TABLE) + 1))


def test_the_page_stores_its_diagnosis_and_symptom_as_the_headline() -> None:
    decision, _, [(current, reference)] = walk(UNPAGED, Cue.OPENED, at(s(0)), Store())
    assert decision.renewed
    assert decision.headline == HEADLINE
    assert decision.at == OPENED
    # The window starts at the burn's onset; the reference ends well before it.
    assert current == Window(OPENED - s(30), OPENED)
    assert reference.end <= OPENED - s(30) - DEFAULTS.onset_margin
    [entry] = decision.history
    assert (entry.verdict, entry.at, entry.cause, entry.diagnosis) == (
        "onset", OPENED, "overload", HEADLINE)  # fmt: skip


def test_a_resolution_before_the_page_records_the_diagnosis_it_made() -> None:
    case = Store(latest=d("queue_backlog"))
    decision, _, _ = walk(UNPAGED, Cue.RESOLVED, at(s(20)), case)
    assert decision.headline == case.latest
    assert [(e.verdict, e.cause) for e in decision.history] == [
        ("onset", "queue_backlog"), ("resolved", "queue_backlog")]  # fmt: skip


def test_a_raised_diagnosis_becomes_the_headline_and_a_kept_one_restamps_it() -> None:
    now = OPENED + timedelta(minutes=2)
    raised, _, _ = walk(paged(), Cue.PASS, at(timedelta(minutes=2)),
                        Store(latest=STRONGER, previous=STRONGER))  # fmt: skip
    assert raised.headline == STRONGER
    kept, _, _ = walk(paged(), Cue.PASS, at(timedelta(minutes=2)), Store(latest=STRONGER))
    assert kept.headline == HEADLINE
    assert kept.at == raised.at == now
    assert not kept.renewed
    assert not raised.renewed


def test_the_recovering_mark_is_dated_when_the_symptom_cleared() -> None:
    decision, _, _ = walk(paged(), Cue.PASS, at(timedelta(minutes=5), cleared_since=CLEARED),
                          Store())  # fmt: skip
    [entry] = decision.history
    assert (entry.verdict, entry.at, entry.cause, entry.diagnosis) == (
        "recovering", CLEARED, "overload", None)  # fmt: skip
    # Seen cleared before the last entry: marked at the last entry.
    late = paged(last_at=CLEARED + s(30))
    decision, _, _ = walk(late, Cue.PASS, at(timedelta(minutes=5), cleared_since=CLEARED),
                          Store())  # fmt: skip
    assert decision.history[0].at == CLEARED + s(30)


def test_a_burn_that_came_back_is_diagnosed_from_its_own_onset() -> None:
    again = LATER - s(40)
    store = burned(again, d("gpu_throttled", 0.9, "vllm-8b-1"))
    decision, _, [(current, reference)] = walk(RECOVERING, Cue.PASS, Facts(LATER, OPENED), store)
    assert current == Window(again, LATER)
    _, incident_reference = incident_windows(OPENED, LATER, store.onset)
    assert reference == incident_reference  # the incident's reference, clear of both burns
    burning, judged = decision.history
    assert (burning.verdict, burning.cause, burning.diagnosis) == ("burning", "overload", None)
    assert judged.diagnosis is not None
    assert judged.diagnosis["burning_again_at"] == "2026-01-05T09:14:20Z"
    assert decision.about == judged.diagnosis
    assert decision.headline == HEADLINE  # the headline stays


def test_a_return_without_a_step_is_diagnosed_over_the_last_window() -> None:
    store = burned(None, d("gpu_throttled", 0.9, "vllm-8b-1"))
    decision, _, [(current, _)] = walk(RECOVERING, Cue.PASS, Facts(LATER, OPENED), store)
    assert decision.row == 11  # another instance: news
    assert current == Window(LATER - DEFAULTS.window, LATER)
    assert decision.about is not None
    assert decision.about["burning_again_at"] == "2026-01-05T09:10:00Z"


def test_only_a_reopening_or_a_resolved_incident_falls_to_the_last_row() -> None:
    everything = Store(returned_at=LATER - s(40), previous=HEADLINE)
    last = {}
    for phase in Phase:
        for cue in Cue:
            state = paged(phase) if phase is not Phase.UNPAGED else UNPAGED
            decision, _, _ = walk(state, cue, Facts(LATER, OPENED), everything)
            last[(phase, cue)] = decision.row == len(TABLE)
    expected = {(p, c) for p in Phase for c in Cue
                if (c is Cue.REOPENED) != (p is Phase.RESOLVED)}  # fmt: skip
    assert {k for k, v in last.items() if v} == expected


def test_the_docstring_shows_the_table_and_what_its_conditions_mean() -> None:
    doc = inspect.getdoc(lifecycle) or ""
    assert lifecycle.render() in doc
    assert lifecycle.legend() in doc


def test_a_change_cue_is_a_real_change() -> None:
    assert Cue.of(Transition.ESCALATED) is Cue.ESCALATED
    with pytest.raises(ValueError, match="no incident change"):
        Cue.of(Transition.NONE)


@pytest.mark.parametrize(
    "bad",
    [{"every": timedelta(0)}, {"min_evidence": -s(1)}, {"lead": -s(1)}, {"raise_margin": 1.5},
     {"raise_floor": -0.1}],
)  # fmt: skip
def test_tuning_refuses_what_cannot_work(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="lifecycle tuning"):
        Tuning(**bad)


def test_tuning_moves_the_rows_thresholds() -> None:
    patient = Tuning(min_evidence=s(60), max_page_wait=s(120))
    facts = at(s(45)).given(Need.ONSET, onset=OPENED - s(10))
    assert decide(UNPAGED, Cue.PASS, facts, patient).row == 1
    assert decide(UNPAGED, Cue.PASS, facts).need is Need.DIAGNOSIS  # row 2 with the defaults
