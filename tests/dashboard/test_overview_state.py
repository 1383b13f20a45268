"""The Overview's state badge follows what would open an incident, not any rule that fires.

With the policy's ``resolve_after``, an incident opens only at a rule whose burn is present
now (``core.burn.Evaluation.opening``). After a goodput incident resolved, the 6 h / 30 m
rule of a real policy still fired (both windows kept the earlier burn) while the 5 minutes
burnt nothing: no incident was open and none would open, yet the row read "page". The
evaluation job steps the same ``Evaluation`` here, so the badge and the incidents agree.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np

from infersight.api.dashboard.views.overview import backing, first_data
from infersight.core.burn import AlertState, Policy, Rule, Severity, evaluate, step
from infersight.core.slo import EventCounts, GoodputUnit, Sli, SliKind, SloSpec
from infersight.service.evaluation import SloStatus
from infersight.service.slos import SloView
from infersight.storage.writer import open_writer
from tests.conftest import Store
from tests.factories import make_records

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


def test_an_slo_whose_window_the_data_outlast_is_fully_backed(store: Store) -> None:
    """A 1-hour SLO over a store with three hours of data: its window is full. The series'
    first rollup (looked up over the longest SLO window) lies before the hour: the row said
    "1 min of 1 hour" (only series first seen within the window counted) and drew dashes."""
    start = NOW - timedelta(hours=3)
    records = make_records(np.random.default_rng(4), start, 600, span=timedelta(hours=3))
    open_writer(store.engine).write_requests(records)
    hourly = SloSpec("hourly", Sli(SliKind.AVAILABILITY), 0.99, H1)
    daily = SloSpec("daily", Sli(SliKind.AVAILABILITY), 0.99, timedelta(days=1))
    first = first_data(SimpleNamespace(store=store.sql), [hourly, daily], NOW)  # type: ignore[arg-type]
    assert first["hourly"] == NOW - H1  # was the first series seen within the hour
    assert start <= first["daily"] < start + timedelta(minutes=1)
    counts = {w: EventCounts(100, 0) for w in POLICY.windows}
    status = SloStatus(hourly, NOW, EventCounts(100, 0), evaluate(POLICY, 0.99, counts))
    backed = backing(SloView(hourly, status, None), POLICY, first["hourly"], NOW)
    assert backed["data"] is None  # the whole window is backed
    kinds = {c["window"]: c["kind"] for c in backed["burns"]}
    assert kinds == {"5m": "full", "30m": "full", "1h": "full", "6h": "partial"}, kinds
