"""The Overview's state badge follows what would open an incident, not any rule that fires.

With the policy's ``resolve_after``, an incident opens only at a rule whose burn is present
now (``core.burn.Evaluation.opening``). After a goodput incident resolved, the 6 h / 30 m
rule of a real policy still fired (both windows kept the earlier burn) while the 5 minutes
burnt nothing: no incident was open and none would open, yet the row read "page". The
evaluation job steps the same ``Evaluation`` here, so the badge and the incidents agree.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from infersight.api.dashboard.views.overview import backing
from infersight.core.burn import AlertState, Policy, Rule, Severity, evaluate, step
from infersight.core.slo import EventCounts, GoodputUnit, Sli, SliKind, SloSpec
from infersight.service.evaluation import SloStatus
from infersight.service.slos import SloView

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
M5, M30, H1, H6 = (timedelta(minutes=5), timedelta(minutes=30), timedelta(hours=1),
                   timedelta(hours=6))  # fmt: skip
POLICY = Policy(
    windows=(M5, M30, H1, H6),
    rules=(
        Rule(Severity.PAGE, 6.0, H6, M30),
        Rule(Severity.TICKET, 1.0, H6, H1),
    ),
    resolve_after=timedelta(minutes=5),
)
SPEC = SloSpec(
    "chat-goodput",
    Sli(SliKind.GOODPUT, targets=(("ttft", 1.0),), per=GoodputUnit.REQUEST),
    0.99,
    timedelta(days=7),
)


def _view(counts: dict[timedelta, EventCounts]) -> SloView:
    evaluation = evaluate(POLICY, SPEC.objective, counts)
    # Over the SLO's 7 days, a third of the budget spent.
    week = EventCounts(1_000_000, 3_300)
    return SloView(SPEC, SloStatus(SPEC, NOW, week, evaluation), None)


def _opens(view: SloView) -> bool:
    state, _ = step(AlertState(), view.status.evaluation, NOW)
    return state.active


def test_a_rule_that_fires_without_a_present_burn_is_no_page_badge():
    # 6 h and 30 m still hold the earlier burn (10 % bad, 10×); the last 5 minutes none.
    view = _view(
        {
            M5: EventCounts(500, 0),
            M30: EventCounts(3000, 300),
            H1: EventCounts(6000, 600),
            H6: EventCounts(36000, 3600),
        }
    )
    assert view.status.evaluation.firing is Severity.PAGE  # the rule fires …
    assert not _opens(view)  # … but the evaluation would open no incident
    state = backing(view, POLICY, NOW - timedelta(days=8), NOW)["state"]
    assert state["kind"] not in ("sev-page", "sev-ticket"), state  # was "sev-page"
    assert state["label"] == "burning"  # the longest window still burns at 10×


def test_a_present_burn_without_an_incident_shows_its_severity():
    view = _view(
        {
            M5: EventCounts(500, 50),
            M30: EventCounts(3000, 300),
            H1: EventCounts(6000, 600),
            H6: EventCounts(36000, 3600),
        }
    )
    assert _opens(view)
    state = backing(view, POLICY, NOW - timedelta(days=8), NOW)["state"]
    assert state["kind"] == "sev-page", state
    assert state["title"] == "the alert condition holds; no incident is open yet"
