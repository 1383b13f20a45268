"""What a profile's result may be and who may write it (SQLite, PostgreSQL, through the app):
the claim's instance and nonce, the strict summary, malformed summaries stored by an older
version, requests nobody takes, cancelling, incidents of another instance, the fleet-wide cap
of automatic profiles, a crashing profiler, and retention."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from infersight.alerts.diagnose import with_profile
from infersight.api import answers
from infersight.cli.commands_profile import render
from infersight.collector.profiling import (
    Outcome,
    ProfilePoller,
    Profiler,
    ProfilerConfig,
    ProfileTarget,
)
from infersight.core.burn import AlertState, Severity, Transition
from infersight.core.errors import Conflict, InvalidInput
from infersight.core.profile import Limit, ProfileState, Share, check_summary, dominant
from infersight.service.profiles import ProfileTrigger, StoreChannel, request_profile
from infersight.storage import incidents, signals
from infersight.storage import profiles as profile_store
from infersight.storage.maintenance import RetentionPolicy, maintain
from infersight.storage.sql_store import SqlStore
from infersight.storage.tables import profiles
from tests.api.conftest import Api
from tests.conftest import Store
from tests.profiles.test_page import ADMIN, INGEST, READ, T0, _incident, _text

TOKENS = f"read:{READ},admin:{ADMIN},ingest:{INGEST}"
GOOD = {
    "samples": 300, "busy_samples": 200, "idle_samples": 100, "threads": 2, "native": True,
    "rate": 20, "seconds": 2.0, "measured": ["tokenizer", "logging", "gil", "lock"],
    "shares": {"tokenizer": 0.62, "logging": 0.1, "gil": 0.0, "lock": 0.0},
    "top": [{"frame": "app:serve", "samples": 200, "share": 1.0}],
    "self": [{"frame": "tokenizers:encode", "samples": 124, "share": 0.62}],
    "modules": [], "stacks": [], "pid": 42, "truncated": False,
}  # fmt: skip


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def _post_result(api: Api, profile_id: int, body: Any, token: str = INGEST) -> Any:
    return api.request("POST", f"/api/v1/ingest/profiles/{profile_id}", json=body,
                       headers=bearer(token))  # fmt: skip


def _claim(api: Api, instance: str) -> dict[str, Any]:
    got = api.request("POST", "/api/v1/ingest/profiles/claim", json={"instance": instance},
                      headers=bearer(INGEST))  # fmt: skip
    request = got.json()["request"]
    assert request is not None
    return dict(request)


def test_only_the_claim_can_write_the_result(make_api: Any, store: Store) -> None:
    api = make_api(api_tokens=TOKENS)
    incident = _incident(store)
    assert ProfileTrigger(store.sql, seconds=2, rate=20)(T0) == 1
    (asked,) = profile_store.list_profiles(store.engine, incident_id=incident)
    forged = {"result": {**GOOD, "shares": {"logging": 0.99}}, "instance": "vllm-0",
              "nonce": "x" * 32}  # fmt: skip
    # Never claimed: refused whatever it says, and the row stays pending.
    assert _post_result(api, asked.id, forged).status_code == 409
    assert _post_result(api, asked.id, {"result": GOOD}).status_code == 400  # no claim at all
    assert profile_store.get(store.engine, asked.id).state is ProfileState.PENDING
    request = _claim(api, "vllm-0")
    assert request["id"] == asked.id
    assert _post_result(api, asked.id, forged).status_code == 409  # a guessed nonce
    other = {**forged, "nonce": request["nonce"], "instance": "vllm-1"}
    assert _post_result(api, asked.id, other).status_code == 409  # another instance
    read = api.get(f"/api/v1/profiles/{asked.id}", headers=bearer(READ)).json()
    assert read["state"] == "running"
    assert read["error"] is None  # the nonce is never shown
    assert request["nonce"] not in json.dumps(read)
    mine = {"result": GOOD, "instance": "vllm-0", "nonce": request["nonce"]}
    assert _post_result(api, asked.id, mine).json() == {"stored": True}
    assert _post_result(api, asked.id, mine).status_code == 409  # once only
    done = profile_store.get(store.engine, asked.id)
    assert done.state is ProfileState.DONE
    assert done.result == GOOD


@pytest.mark.parametrize(
    ("result", "fault"),
    [
        ({"x": 1}, "x"),
        ({**GOOD, "shares": {"logging": "x"}}, "shares.logging"),
        ({**GOOD, "shares": {"logging": 1.5}}, "shares.logging"),
        ({**GOOD, "shares": {"logging": -0.1}}, "shares.logging"),
        ({**GOOD, "shares": {"disk": 0.5}}, "shares.disk"),
        ({**GOOD, "busy_samples": -1}, "busy_samples"),
        ({**GOOD, "self": [{"frame": "f" * 5000, "samples": 1, "share": 0.1}]}, "self.0.frame"),
        ({**GOOD, "top": [{"frame": "f", "samples": 1, "share": 0.1}] * 26}, "top"),
        ({**GOOD, "measured": ["tokenizer"] * 5}, "measured"),
    ],
)
def test_a_malformed_summary_is_refused_whole(result: dict[str, Any], fault: str) -> None:
    with pytest.raises(InvalidInput, match=f"malformed at {fault}"):
        check_summary(result)


def test_non_finite_numbers_are_400_not_500(make_api: Any, store: Store) -> None:
    api = make_api(api_tokens=TOKENS)
    _incident(store)
    ProfileTrigger(store.sql, seconds=2, rate=20)(T0)
    request = _claim(api, "vllm-0")
    for result in ('{"x": NaN}', '{"shares": {"gil": Infinity}, "busy_samples": 100}'):
        body = f'{{"instance": "vllm-0", "nonce": "{request["nonce"]}", "result": {result}}}'
        answer = api.request("POST", f"/api/v1/ingest/profiles/{request['id']}",
                             content=body.encode(),
                             headers={**bearer(INGEST),
                                      "content-type": "application/json"})  # fmt: skip
        assert answer.status_code == 400, answer.text
        assert "malformed" in answer.json()["error"]["message"]
    assert profile_store.get(store.engine, request["id"]).state is ProfileState.RUNNING


def _store_raw(store: Store, profile_id: int, text: str) -> None:
    """A summary as a version before validation could have stored it."""
    with store.engine.begin() as connection:
        connection.execute(
            update(profiles)
            .where(profiles.c.id == profile_id)
            .values(state="done", result=text, error="", finished_at=T0)
        )


BAD_SUMMARY = json.dumps({
    "busy_samples": 500, "samples": 500, "measured": "gil",
    "shares": {"logging": "x", "gil": float("inf"), "tokenizer": 0.4, "lock": float("nan")},
    "self": [{"frame": "a", "share": "y"}, "junk", {"frame": "b", "share": 0.3}],
    "modules": {"not": "a list"},
})  # fmt: skip


def test_a_malformed_stored_summary_is_read_defensively(make_api: Any, store: Store) -> None:
    api = make_api(api_tokens=TOKENS)
    incident = _incident(store)
    ProfileTrigger(store.sql, seconds=2, rate=20)(T0)
    (asked,) = profile_store.list_profiles(store.engine, incident_id=incident)
    _store_raw(store, asked.id, BAD_SUMMARY)
    answers.clear_all()
    page = api.get(f"/ui/incidents/{incident}", headers=bearer(READ))
    assert page.status_code == 200, page.text[:500]
    shown = _text(page.text)
    assert "tokenizer 40 % not measured" in shown  # the malformed shares left out
    assert "? samples a second" in shown
    assert "Share of busy samples b 30 %" in shown
    text = render(profile_store.get(store.engine, asked.id).to_dict())
    assert "tokenizer   40.0 %" in text
    assert "logging" not in text.split("hottest")[0]
    assert "b" in text.split("hottest functions")[1]
    assert dominant(json.loads(BAD_SUMMARY)) == Share(Limit.TOKENIZER, 200, 0.4)
    assert Share(Limit.GIL, 1, float("inf")).sentence == "0 % of samples waiting on the GIL"


def _firing(store: Store, instance: str, scope: str) -> int:
    with store.engine.begin() as connection:
        opened = incidents.apply_step(
            connection, "ttft", scope, AlertState(Severity.PAGE, T0), Transition.OPENED,
            {"5m": 20.0}, T0,
        )  # fmt: skip
    assert opened is not None
    diagnosis = {"cause": "host_bound", "instance": instance, "evidence": []}
    signals.save_diagnosis(store.engine, opened.id, {"slo": "ttft"}, diagnosis, T0)
    return opened.id


def test_one_bad_incident_does_not_stop_the_others(store: Store) -> None:
    """A summary stored before validation with an infinite share (its sentence overflowed)
    is applied without it, and the incident after it is served in the same pass."""
    first = _firing(store, "i-0", "model=a")
    second = _firing(store, "i-1", "model=b")
    trigger = ProfileTrigger(store.sql, seconds=2, rate=20)
    assert trigger(T0) == 2
    by_incident = profile_store.for_incidents(store.engine, [first, second])
    _store_raw(store, by_incident[first].id, json.dumps({
        "busy_samples": 500, "shares": {"gil": float("inf")}, "measured": ["gil"],
    }))  # fmt: skip
    _store_raw(store, by_incident[second].id, json.dumps(GOOD))
    assert trigger(T0 + timedelta(seconds=10)) == 2
    notes = signals.notes(store.engine, [first, second])
    assert notes[second].diagnosis is not None
    assert notes[second].diagnosis["detail"] == "tokenizer"
    assert notes[first].diagnosis is not None
    assert "detail" not in notes[first].diagnosis


def test_a_request_nobody_claims_expires(make_api: Any, store: Store) -> None:
    engine = store.engine
    first = request_profile(SqlStore(engine), "vllm-typo", T0)
    with pytest.raises(Conflict):
        request_profile(SqlStore(engine), "vllm-typo", T0 + timedelta(minutes=5))
    later = T0 + profile_store.PENDING_AFTER + timedelta(seconds=1)
    second = request_profile(SqlStore(engine), "vllm-typo", later)
    failed = profile_store.get(engine, first.id)
    assert failed.state is ProfileState.FAILED
    assert "no sidecar took the request" in failed.error
    assert "--profile-target" in failed.error
    # A read fails an overdue request too, and the trigger asks again after one expired.
    api = make_api(api_tokens=TOKENS)
    api.clock.now = later + profile_store.PENDING_AFTER + timedelta(seconds=1)
    read = api.get(f"/api/v1/profiles/{second.id}", headers=bearer(READ)).json()
    assert read["state"] == "failed"
    incident = _firing(store, "i-0", "model=c")
    trigger = ProfileTrigger(SqlStore(engine), min_interval=timedelta(minutes=1))
    assert trigger(T0) == 1
    assert trigger(T0 + timedelta(minutes=5)) == 0  # pending, not expired yet
    # Expired by the pass itself, and its reason goes into the diagnosis (the page says why).
    assert trigger(T0 + profile_store.PENDING_AFTER + timedelta(minutes=1)) == 1
    note = signals.notes(engine, [incident])[incident]
    assert note.diagnosis is not None
    assert "no sidecar took the request" in note.diagnosis["profile"]["error"]
    # The instance is not blocked: another incident of it is profiled.
    other = _firing(store, "i-0", "model=c2")
    assert trigger(T0 + profile_store.PENDING_AFTER + timedelta(minutes=3)) == 1
    assert [p.state for p in profile_store.list_profiles(engine, incident_id=other)] == [
        ProfileState.PENDING
    ]


def test_a_dead_sidecars_running_profile_expires_on_read(make_api: Any, store: Store) -> None:
    api = make_api(api_tokens=TOKENS)
    asked = request_profile(store.sql, "vllm-0", T0, seconds=5)
    assert profile_store.claim(store.engine, "vllm-0", T0) is not None
    api.clock.now = T0 + timedelta(seconds=5) + profile_store.STALE_AFTER + timedelta(seconds=1)
    listed = api.get("/api/v1/profiles?instance=vllm-0", headers=bearer(READ)).json()
    (read,) = listed["profiles"]
    assert (read["id"], read["state"]) == (asked.id, "failed")
    assert read["error"] == "failed: the sidecar did not return the profile"


def test_an_admin_cancels_an_open_profile(make_api: Any, store: Store) -> None:
    api = make_api(api_tokens=TOKENS)
    asked = request_profile(store.sql, "vllm-0", T0)
    path = f"/api/v1/profiles/{asked.id}"
    assert api.request("DELETE", path, headers=bearer(READ)).status_code == 403
    assert api.request("DELETE", path, headers=bearer(INGEST)).status_code == 403
    request = _claim(api, "vllm-0")
    cancelled = api.request("DELETE", path, headers=bearer(ADMIN))
    assert cancelled.status_code == 200
    assert (cancelled.json()["state"], cancelled.json()["error"]) == ("failed", "failed: cancelled")
    assert api.request("DELETE", path, headers=bearer(ADMIN)).status_code == 409
    assert (
        api.request("DELETE", "/api/v1/profiles/999999", headers=bearer(ADMIN)).status_code == 404
    )
    late = {"result": GOOD, "instance": "vllm-0", "nonce": request["nonce"]}
    assert _post_result(api, asked.id, late).status_code == 409  # the sidecar's late answer
    assert request_profile(store.sql, "vllm-0", T0).state is ProfileState.PENDING


def test_a_profile_is_only_for_its_incidents_instance(make_api: Any, store: Store) -> None:
    api = make_api(api_tokens=TOKENS)
    incident = _incident(store, "vllm-0")
    other = {"instance": "vllm-1", "seconds": 2, "incident_id": incident}
    answer = api.request("POST", "/api/v1/profiles", json=other, headers=bearer(ADMIN))
    assert answer.status_code == 409
    assert "is about instance vllm-0, not vllm-1" in answer.json()["error"]["message"]
    missing = {"instance": "vllm-0", "seconds": 2, "incident_id": incident + 100}
    answer = api.request("POST", "/api/v1/profiles", json=missing, headers=bearer(ADMIN))
    assert answer.status_code == 400
    assert f"no incident {incident + 100}" in answer.json()["error"]["message"]
    same = {"instance": "vllm-0", "seconds": 2, "incident_id": incident}
    assert api.request("POST", "/api/v1/profiles", json=same,
                       headers=bearer(ADMIN)).status_code == 202  # fmt: skip
    diagnosis = {"cause": "host_bound", "instance": "vllm-0", "evidence": []}
    with pytest.raises(InvalidInput, match="is of vllm-1"):
        with_profile(diagnosis, {"id": 7, "instance": "vllm-1", "result": GOOD})


def test_a_mismatched_profile_stored_earlier_is_not_applied(store: Store) -> None:
    incident = _firing(store, "i-0", "model=d")
    wrong = profile_store.insert_request(store.engine, "i-9", 2, 20, T0, reason="incident",
                                         incident_id=incident)  # fmt: skip
    _store_raw(store, wrong, json.dumps(GOOD))
    assert ProfileTrigger(store.sql)(T0) == 0
    note = signals.notes(store.engine, [incident])[incident]
    assert note.diagnosis is not None
    assert "profile" not in note.diagnosis


def test_automatic_profiles_are_capped_fleet_wide(store: Store) -> None:
    for n in range(4):
        _firing(store, f"i-{n}", f"model=m{n}")
    trigger = ProfileTrigger(store.sql, seconds=2, rate=20, max_open=2)
    assert trigger(T0) == 2
    assert trigger(T0 + timedelta(seconds=10)) == 0  # two open: the others wait
    assert profile_store.open_automatic(store.engine) == 2
    first = profile_store.list_profiles(store.engine)[-1]
    claimed = profile_store.claim(store.engine, first.instance, T0)
    assert claimed is not None
    profile_store.complete(store.engine, claimed.id, GOOD, "", T0, instance=first.instance,
                           nonce=claimed.nonce)  # fmt: skip
    assert trigger(T0 + timedelta(seconds=20)) == 2  # the done one applied, one more asked
    assert profile_store.open_automatic(store.engine) == 2
    # 0: none asked (the open two expire unclaimed; their reasons are applied, no new one).
    ProfileTrigger(store.sql, max_open=0)(T0 + timedelta(minutes=30))
    assert profile_store.open_automatic(store.engine) == 0
    assert len(profile_store.list_profiles(store.engine)) == 3


class _Crashing(Profiler):
    """A profiler with a bug: its run raises."""

    def run(self, seconds: float, rate: int) -> Outcome:
        raise RuntimeError("boom")


def test_a_crashing_profiler_still_answers_its_claim(store: Store) -> None:
    asked = request_profile(store.sql, "vllm-0", T0)
    profiler = _Crashing(ProfilerConfig(ProfileTarget("1")))
    channel = StoreChannel(store.sql, clock=lambda: T0)
    poller = ProfilePoller("vllm-0", profiler, channel)
    assert poller.poll_once()
    done = profile_store.get(store.engine, asked.id)
    assert done.state is ProfileState.FAILED
    assert done.error == "failed: RuntimeError: boom"


def test_finished_profiles_are_pruned_with_the_other_retention(store: Store) -> None:
    now = datetime(2026, 12, 6, 12, tzinfo=UTC)
    old = request_profile(store.sql, "i-0", now - timedelta(days=40))
    _store_raw(store, old.id, json.dumps(GOOD))
    kept_open = profile_store.insert_request(store.engine, "i-1", 2, 20, now - timedelta(days=40))
    recent = request_profile(store.sql, "i-2", now - timedelta(days=3))
    _store_raw(store, recent.id, json.dumps(GOOD))
    report = maintain(store.engine, now, RetentionPolicy(profile_days=30))
    assert report.profiles_deleted == 1
    left = {p.id for p in profile_store.list_profiles(store.engine)}
    assert left == {kept_open, recent.id}
