"""The burn-rate policy and alert state, replayed over traffic timelines second by second."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import yaml

from infersight.core.burn import (
    AlertState,
    Policy,
    Rule,
    Severity,
    Transition,
    evaluate,
    policy_from_mapping,
    recovered,
    step,
)
from infersight.core.errors import InvalidInput
from infersight.core.slo import EventCounts

POLICY_FILE = (
    Path(__file__).resolve().parents[2] / "infersight" / "core" / "data" / "burn_rate_policy.yaml"
)
T0 = datetime(2026, 11, 1, tzinfo=UTC)
INTERVAL = 30  # seconds between evaluations
RPS = 10


@pytest.fixture(scope="module")
def policy() -> Policy:
    return policy_from_mapping(yaml.safe_load(POLICY_FILE.read_text()))


class Timeline:
    """Requests and failures per second; counts over any window that ends at a second."""

    def __init__(self, seconds: int, rps: int = RPS) -> None:
        self.total = np.full(seconds, rps, dtype=np.int64)
        self.bad = np.zeros(seconds, dtype=np.int64)

    def fail(self, start: int, end: int, share: float = 1.0) -> None:
        self.bad[start:end] = np.round(self.total[start:end] * share).astype(np.int64)

    def counts(self, now: int, policy: Policy) -> dict[timedelta, EventCounts]:
        total = np.concatenate([[0], np.cumsum(self.total)]).tolist()
        bad = np.concatenate([[0], np.cumsum(self.bad)]).tolist()
        return self._counts(total, bad, now, policy)

    @staticmethod
    def _counts(
        total: list[int], bad: list[int], now: int, policy: Policy
    ) -> dict[timedelta, EventCounts]:
        out = {}
        for window in policy.windows:
            start = max(0, now - int(window.total_seconds()))
            out[window] = EventCounts(total[now] - total[start], bad[now] - bad[start])
        return out

    def replay(
        self, policy: Policy, objective: float, start: int, end: int, every: int = INTERVAL
    ) -> list[tuple[int, AlertState, Transition]]:
        """Evaluate every ``every`` seconds in ``[start, end]``; the states after each."""
        total = np.concatenate([[0], np.cumsum(self.total)]).tolist()
        bad = np.concatenate([[0], np.cumsum(self.bad)]).tolist()
        state, out = AlertState(), []
        for now in range(start, end + 1, every):
            evaluation = evaluate(policy, objective, self._counts(total, bad, now, policy))
            state, change = step(state, evaluation, T0 + timedelta(seconds=now))
            out.append((now, state, change))
        return out


DAY = 86400
HOUR = 3600


def test_the_policy_file_is_the_sre_workbook_table(policy):
    table = {(r.severity, r.burn_rate, r.long_window, r.short_window) for r in policy.rules}
    hours = lambda n: timedelta(hours=n)  # noqa: E731
    assert table == {
        (Severity.PAGE, 14.4, hours(1), timedelta(minutes=5)),
        (Severity.PAGE, 6.0, hours(6), timedelta(minutes=30)),
        (Severity.TICKET, 3.0, hours(24), hours(2)),
        (Severity.TICKET, 1.0, hours(72), hours(6)),
    }
    assert [int(w.total_seconds()) for w in policy.windows] == [
        300, 1800, 3600, 7200, 21600, 86400, 259200,
    ]  # fmt: skip


def test_a_total_outage_at_99_9_pages_within_one_evaluation_interval_after_a_minute_of_data(
    policy,
):
    outage = 3 * DAY
    timeline = Timeline(outage + HOUR)
    timeline.fail(outage, outage + HOUR)
    states = timeline.replay(policy, 0.999, outage - 10 * INTERVAL, outage + 2 * INTERVAL)
    before = [s for now, s, _ in states if now <= outage]
    assert all(not s.active for s in before)
    after_a_minute = [(s, c) for now, s, c in states if now == outage + 60]
    assert after_a_minute == [(AlertState(Severity.PAGE, T0 + timedelta(seconds=outage + 60)),
                               Transition.OPENED)]  # fmt: skip


def test_a_2x_burn_tickets_but_never_pages(policy):
    # 0.2 % of requests fail for three days at a 99.9 % objective: a burn rate of exactly 2.
    timeline = Timeline(4 * DAY)
    timeline.bad[::50] = 1
    assert timeline.bad.sum() / timeline.total.sum() == pytest.approx(0.002)
    states = timeline.replay(policy, 0.999, HOUR, 4 * DAY, every=5 * 60)
    assert all(s.severity is not Severity.PAGE for _, s, _ in states)
    assert states[-1][1].severity is Severity.TICKET
    # One ticket, opened once the 3-day window fills (not one per evaluation).
    assert [c for _, _, c in states].count(Transition.OPENED) == 1


def legacy(policy: Policy) -> Policy:
    """``policy`` without ``resolve_after``: an alert resolves only when nothing holds it."""
    return dataclasses.replace(policy, resolve_after=timedelta(0))


def test_the_page_resolves_once_its_symptom_stayed_cleared_for_resolve_after(policy):
    outage, recovery = 3 * DAY, 3 * DAY + 600
    timeline = Timeline(4 * DAY)
    timeline.fail(outage, recovery)
    states = timeline.replay(policy, 0.999, outage, recovery + 7 * HOUR)
    paging = [now for now, s, _ in states if s.severity is Severity.PAGE]
    assert paging[0] == outage + 60
    # One alert: it opens once and resolves, although the 1 d and 3 d windows still burn
    # over the ticket rates (10 minutes at 1000× are a quarter of a 30-day budget).
    changes = [c for _, _, c in states if c is not Transition.NONE]
    assert changes == [Transition.OPENED, Transition.RESOLVED]
    resolved_at = next(now for now, _, c in states if c is Transition.RESOLVED)
    cleared = recovery + 300  # the 5 m window has forgotten the outage
    settle = int(policy.resolve_after.total_seconds())
    assert cleared + settle - INTERVAL <= resolved_at <= cleared + settle + INTERVAL
    at_resolution = evaluate(policy, 0.999, timeline.counts(resolved_at, policy))
    assert Severity.TICKET in at_resolution.holding
    assert at_resolution.firing is not None  # by the memory of the long windows only:
    assert at_resolution.opening is None


def test_without_resolve_after_the_long_windows_hold_the_alert_as_a_ticket(policy):
    outage, recovery = 3 * DAY, 3 * DAY + 600
    timeline = Timeline(4 * DAY)
    timeline.fail(outage, recovery)
    states = timeline.replay(legacy(policy), 0.999, outage, recovery + 7 * HOUR)
    paging = [now for now, s, _ in states if s.severity is Severity.PAGE]
    # The longest short window of a paging rule is 30 minutes.
    assert recovery < paging[-1] <= recovery + 1800
    changes = [c for _, _, c in states if c is not Transition.NONE]
    assert changes == [Transition.OPENED, Transition.DEESCALATED, Transition.RESOLVED]
    resolved_at = next(now for now, _, c in states if c is Transition.RESOLVED)
    assert resolved_at <= recovery + 6 * HOUR + INTERVAL  # the ticket rule's 6 h short window


def test_an_outage_that_stops_is_recovering_within_5_minutes_until_it_resolves(policy):
    outage, recovery = 3 * DAY, 3 * DAY + 600
    timeline = Timeline(4 * DAY)
    timeline.fail(outage, recovery)
    state = AlertState()
    marks = []
    for now in range(outage, recovery + 7 * HOUR, INTERVAL):
        evaluation = evaluate(policy, 0.999, timeline.counts(now, policy))
        state, _ = step(state, evaluation, T0 + timedelta(seconds=now))
        if state.active:
            marks.append((now, recovered(policy, evaluation, state.severity)))
            assert (state.recovering_since is not None) == marks[-1][1]
    burning = [now for now, r in marks if not r]
    assert burning[0] == outage + 60
    # The symptom is gone once the 5 m window has forgotten the outage; the alert is
    # recovering from then until it resolves, ``resolve_after`` later.
    assert recovery <= burning[-1] <= recovery + 300
    assert all(r for now, r in marks if now > burning[-1])
    settle = int(policy.resolve_after.total_seconds())
    assert burning[-1] + settle - INTERVAL <= marks[-1][0] <= burning[-1] + settle
    assert recovered(policy, evaluate(policy, 0.999, timeline.counts(outage + 60, policy)), None)


def test_a_young_store_s_five_minute_outage_resolves_within_20_minutes_of_clearing(policy):
    # Half an hour of history: the 2 h, 6 h, 1 d and 3 d windows hold only that half hour, so
    # each remembers the outage at several times the ticket rates for hours.
    outage, recovery = 1800, 1800 + 300
    timeline = Timeline(4 * HOUR)
    timeline.fail(outage, recovery, share=0.1)  # 100× at 99.9 %
    states = timeline.replay(policy, 0.999, 60, 4 * HOUR)
    changes = [(now, c) for now, _, c in states if c is not Transition.NONE]
    # A ticket first (the 3 d / 6 h rule), a page a minute later; one resolution, no reopening.
    assert [c for _, c in changes] == [
        Transition.OPENED, Transition.ESCALATED, Transition.RESOLVED
    ]  # fmt: skip
    assert changes[-1][0] <= recovery + 1200
    # Without resolve_after the memory holds it all afternoon.
    held = timeline.replay(legacy(policy), 0.999, 60, 4 * HOUR)
    assert held[-1][1].active


def test_a_burn_that_returns_while_recovering_keeps_the_alert_open(policy):
    # The second begins 3 minutes after the first has cleared (its 5 m window forgot it).
    first, second = 3 * DAY, 3 * DAY + 780
    timeline = Timeline(4 * DAY)
    timeline.fail(first, first + 300)
    timeline.fail(second, second + 300)
    states = timeline.replay(policy, 0.999, first, second + 2 * HOUR)
    changes = [c for _, _, c in states if c is not Transition.NONE]
    assert changes == [Transition.OPENED, Transition.RESOLVED]
    marks = [(now, s.recovering_since) for now, s, _ in states if s.active]
    # Recovering between the two burns, burning again during the second, then recovering
    # anew (its clock restarted): it resolves resolve_after after the second has cleared.
    assert any(since is not None and now < second for now, since in marks)
    assert any(since is None and second < now < second + 300 for now, since in marks)
    resolved_at = next(now for now, _, c in states if c is Transition.RESOLVED)
    assert resolved_at >= second + 300 + 300 + int(policy.resolve_after.total_seconds()) - INTERVAL


def test_the_1h_page_clears_after_its_5_minute_short_window(policy):
    # Only the 14.4×/1 h rule pages for a 90-second outage; its 5 m window clears first.
    outage, recovery = 3 * DAY, 3 * DAY + 90
    timeline = Timeline(4 * DAY)
    timeline.fail(outage, recovery)
    states = timeline.replay(policy, 0.999, outage, recovery + HOUR)
    fired = evaluate(policy, 0.999, timeline.counts(recovery, policy)).fired_rules
    assert {r.long_window for r in fired} == {timedelta(hours=1)}
    paging = [now for now, s, _ in states if s.severity is Severity.PAGE]
    assert recovery < paging[-1] <= recovery + 300


def test_a_trickle_of_3_failed_requests_out_of_5_in_a_quiet_hour_does_not_page(policy):
    timeline = Timeline(4 * DAY, rps=0)
    quiet_hour = 3 * DAY
    for i, second in enumerate(range(quiet_hour, quiet_hour + HOUR, HOUR // 5)):
        timeline.total[second] = 1
        timeline.bad[second] = 1 if i < 3 else 0
    states = timeline.replay(policy, 0.999, quiet_hour, quiet_hour + HOUR)
    assert all(not s.active for _, s, _ in states)
    # It is the minimum-events guard that holds it back: without it this would page.
    unguarded = Policy(policy.windows, policy.rules, min_events=0)
    assert timeline.replay(unguarded, 0.999, quiet_hour, quiet_hour + HOUR)[-1][1].active


def at_burn(policy: Policy, rate: float) -> dict[timedelta, EventCounts]:
    """Counts that burn at ``rate`` (99.9 % objective) up to 1 h and at 0.5× beyond."""
    return {
        w: EventCounts(100_000, round((rate if w <= timedelta(hours=1) else 0.5) * 100))
        for w in policy.windows
    }


def test_a_burn_rate_hovering_at_the_threshold_does_not_flap(policy):
    # The burn rate alternates just above and just below the 14.4× page threshold.
    rates = [15.0 if i % 2 == 0 else 14.0 for i in range(20)]

    def replay(p: Policy) -> list[Transition]:
        state, changes = AlertState(), []
        for i, rate in enumerate(rates):
            state, change = step(
                state, evaluate(p, 0.999, at_burn(p, rate)), T0 + i * timedelta(seconds=30)
            )
            changes.append(change)
        return changes

    changes = replay(policy)
    assert changes.count(Transition.OPENED) == 1
    assert Transition.RESOLVED not in changes
    # Without hysteresis the same burn rates open and close the page again and again.
    strict = Policy(policy.windows, policy.rules, policy.min_events, resolve_ratio=1.0)
    assert replay(strict).count(Transition.OPENED) == 10


def test_evaluation_needs_counts_for_every_window(policy):
    with pytest.raises(InvalidInput, match="missing"):
        evaluate(policy, 0.999, {timedelta(hours=1): EventCounts(10, 0)})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"version": 2, "windows": [], "rules": []}, "version"),
        ({"version": 1, "windows": ["5m", "1h"], "rules": []}, "at least one rule"),
        (
            {"version": 1, "windows": ["1h"], "rules": [
                {"severity": "page", "burn_rate": 2, "long_window": "1h", "short_window": "5m"}]},
            "policy.s windows",
        ),
        ({"version": 1, "windows": ["5m"], "rules": [{"severity": "loud"}]}, "invalid"),
    ],
)  # fmt: skip
def test_a_malformed_policy_is_rejected_with_a_reason(data, message):
    with pytest.raises(InvalidInput, match=message):
        policy_from_mapping(data)


def test_a_rule_short_window_must_be_shorter():
    with pytest.raises(InvalidInput, match="shorter"):
        Rule(Severity.PAGE, 2.0, timedelta(minutes=5), timedelta(hours=1))


def test_a_trickle_that_fails_every_time_is_never_seen_to_recover(policy):
    # One request every 12 minutes after a 10-minute outage, each failing: the 5 m window is
    # empty most of the time, which is no evidence of recovery, so the alert stays one alert.
    outage = 3 * DAY
    timeline = Timeline(4 * DAY)
    timeline.fail(outage, outage + 600)
    timeline.total[outage + 600 :] = 0
    timeline.total[outage + 600 :: 720] = 1
    timeline.bad[outage + 600 :: 720] = 1
    states = timeline.replay(policy, 0.999, outage, outage + 2 * HOUR)
    changes = [c for _, _, c in states if c is not Transition.NONE]
    assert changes.count(Transition.OPENED) == 1
    assert all(s.recovering_since is None for _, s, _ in states)
