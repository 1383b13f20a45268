"""``storage.profiles`` and ``service.profiles`` on SQLite and PostgreSQL: requests, claims,
results, the stale running profile, and the trigger for host-side incidents."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from infersight.alerts.dispatch import deliver_due
from infersight.alerts.notifiers.slack import SlackNotifier
from infersight.core.burn import AlertState, Incident, Severity, Transition
from infersight.core.errors import Conflict, InvalidInput, NotFound
from infersight.core.profile import ProfileState
from infersight.service.notifications import Announcer
from infersight.service.profiles import ProfileTrigger, request_profile
from infersight.storage import incidents, signals
from infersight.storage import profiles as profile_store
from infersight.storage.outbox import Outbox
from infersight.storage.sql_store import SqlStore
from tests.conftest import Store
from tests.doubles import Endpoint

T0 = datetime(2026, 12, 6, 9, tzinfo=UTC)
SUMMARY = {
    "samples": 300, "busy_samples": 200, "idle_samples": 100, "native": True,
    "shares": {"tokenizer": 0.05, "gil": 0.0, "lock": 0.0, "logging": 0.71},
    "measured": ["tokenizer", "logging", "gil", "lock"], "top": [], "self": [], "modules": [],
}  # fmt: skip


def _claim(request: Any) -> dict[str, str]:
    """The claim's instance and nonce, as ``complete`` takes them."""
    return {"instance": request.instance, "nonce": request.nonce}


def test_request_claim_complete(store: Store) -> None:
    engine = store.engine
    asked = request_profile(SqlStore(engine), "i-0", T0, seconds=3, rate=20, requested_by="me")
    assert asked.state is ProfileState.PENDING
    with pytest.raises(Conflict, match="already pending"):
        request_profile(SqlStore(engine), "i-0", T0)
    with pytest.raises(InvalidInput):
        request_profile(SqlStore(engine), "i-1", T0, seconds=3600)
    assert (
        profile_store.claim(engine, "i-1", T0) is None
    )  # another instance's request is not handed out
    claimed = profile_store.claim(engine, "i-0", T0 + timedelta(seconds=1))
    assert claimed is not None
    assert (claimed.id, claimed.seconds, claimed.rate) == (asked.id, 3.0, 20)
    assert profile_store.claim(engine, "i-0", T0) is None  # it runs: nothing more is handed out
    assert profile_store.complete(
        engine, claimed.id, SUMMARY, "", T0 + timedelta(seconds=5), **_claim(claimed)
    )
    assert not profile_store.complete(
        engine, claimed.id, None, "late", T0, **_claim(claimed)
    )  # once only
    done = profile_store.get(engine, asked.id)
    assert done.state is ProfileState.DONE
    assert done.result == SUMMARY
    assert done.to_dict()["finished_at"] == "2026-12-06T09:00:05Z"
    with pytest.raises(NotFound):
        profile_store.get(engine, asked.id + 100)
    with pytest.raises(InvalidInput):
        profile_store.complete(engine, asked.id, None, "", T0, **_claim(claimed))


def test_a_sidecar_that_never_answers_does_not_block_the_next(store: Store) -> None:
    engine = store.engine
    first = request_profile(SqlStore(engine), "i-0", T0, seconds=5)
    assert profile_store.claim(engine, "i-0", T0) is not None
    later = T0 + timedelta(seconds=5) + profile_store.STALE_AFTER + timedelta(seconds=1)
    second = request_profile(SqlStore(engine), "i-0", later)
    failed = profile_store.get(engine, first.id)
    assert failed.state is ProfileState.FAILED
    assert "did not return" in failed.error
    again = profile_store.claim(engine, "i-0", later)
    assert again is not None
    assert again.id == second.id
    assert profile_store.complete(engine, second.id, None, "not permitted: no ptrace", later,
                                  **_claim(again))  # fmt: skip
    assert profile_store.get(engine, second.id).error == "not permitted: no ptrace"


def _incident(store: Store, diagnosis: dict[str, Any]) -> Incident:
    with store.engine.begin() as connection:
        opened = incidents.apply_step(
            connection, "ttft", "model=m", AlertState(Severity.PAGE, T0), Transition.OPENED,
            {"5m": 20.0}, T0,
        )  # fmt: skip
    assert opened is not None
    signals.save_diagnosis(store.engine, opened.id, {"slo": "ttft"}, diagnosis, T0)
    return opened


def test_the_trigger_profiles_a_host_side_incident_once_and_applies_it(store: Store) -> None:
    engine = store.engine
    announced: list[dict[str, Any]] = []

    def announce(incident: Any, transition: Any, symptom: Any, diagnosis: Any, **_: Any) -> None:
        announced.append(diagnosis)

    trigger = ProfileTrigger(SqlStore(engine), announce=announce, seconds=2, rate=20)
    opened = _incident(store, {"cause": "host_bound", "instance": "i-0", "evidence": []})
    assert trigger(T0) == 1
    assert trigger(T0 + timedelta(seconds=10)) == 0  # pending: not asked again
    (asked,) = profile_store.list_profiles(engine, incident_id=opened.id)
    assert (asked.reason, asked.seconds, asked.rate) == ("incident", 2.0, 20)
    claimed = profile_store.claim(engine, "i-0", T0)
    assert claimed is not None
    profile_store.complete(
        engine, claimed.id, SUMMARY, "", T0 + timedelta(seconds=3), **_claim(claimed)
    )
    assert trigger(T0 + timedelta(seconds=20)) == 1
    assert trigger(T0 + timedelta(seconds=30)) == 0  # applied once
    note = signals.notes(engine, [opened.id])[opened.id]
    assert note.diagnosis is not None
    assert note.diagnosis["detail"] == "logging"
    assert note.diagnosis["profile"]["sentence"] == "71 % of samples in logging"
    assert note.diagnosed_at == T0  # the re-diagnosis schedule is not moved
    assert [d["detail"] for d in announced] == ["logging"]


def test_the_trigger_leaves_other_causes_and_rate_limits_an_instance(store: Store) -> None:
    engine = store.engine
    trigger = ProfileTrigger(SqlStore(engine), min_interval=timedelta(minutes=10))
    _incident(store, {"cause": "overload", "instance": "i-0", "evidence": []})
    assert trigger(T0) == 0
    assert profile_store.list_profiles(engine) == []
    request_profile(SqlStore(engine), "i-1", T0)  # a manual one, just taken
    claimed = profile_store.claim(engine, "i-1", T0)
    assert claimed is not None
    profile_store.complete(engine, claimed.id, SUMMARY, "", T0, **_claim(claimed))
    with store.engine.begin() as connection:
        incidents.apply_step(
            connection, "ttft", "model=n", AlertState(Severity.PAGE, T0), Transition.OPENED,
            {"5m": 20.0}, T0,
        )  # fmt: skip
    second = incidents.list_incidents(engine, "firing")[0]
    diagnosis = {"cause": "preprocessing_slow", "instance": "i-1", "evidence": []}
    signals.save_diagnosis(engine, second.id, {"slo": "ttft"}, diagnosis, T0)
    assert trigger(T0 + timedelta(minutes=1)) == 0  # i-1 was profiled a minute ago
    assert trigger(T0 + timedelta(minutes=11)) == 1


def test_the_open_alert_is_updated_with_the_profile(store: Store) -> None:
    """The page goes out before the profile exists; the follow-up carries it to Slack (an
    update of the open alert, with the profile's sentence and the incident page's link)."""
    hook = Endpoint()
    slack = SlackNotifier("https://hooks.slack.test/x", hook.client())
    now = [T0]
    announce = Announcer(store.sql, {"slack": slack}, lambda: now[0],
                         dashboard_url="https://slo.example.com")  # fmt: skip
    opened = _incident(store, {"cause": "host_bound", "instance": "i-0", "evidence": []})
    note = signals.notes(store.engine, [opened.id])[opened.id]
    assert note.diagnosis is not None
    announce(opened, Transition.OPENED, {"slo": "ttft"}, note.diagnosis)
    deliver_due(Outbox(store.engine), {"slack": slack}, T0)
    trigger = ProfileTrigger(store.sql, announce=announce)
    trigger(T0)
    claimed = profile_store.claim(store.engine, "i-0", T0)
    assert claimed is not None
    profile_store.complete(
        store.engine, claimed.id, SUMMARY, "", T0 + timedelta(seconds=6), **_claim(claimed)
    )
    now[0] = T0 + timedelta(seconds=10)
    assert trigger(now[0]) == 1
    deliver_due(Outbox(store.engine), {"slack": slack}, now[0] + timedelta(minutes=1))
    assert len(hook.accepted) == 2
    update = json.dumps(hook.accepted[1])
    assert "profile: 71 % of samples in logging" in update
    # The incident's own page, where the profile is shown, as every message links to.
    assert f'"url": "https://slo.example.com/ui/incidents/{opened.id}"' in update
    assert "profile:" not in json.dumps(hook.accepted[0])
