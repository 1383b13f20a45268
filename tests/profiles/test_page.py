"""The incident page's profile section and the profile routes' scopes (SQLite, PostgreSQL),
through the app over a real store: none, pending, "no profile: not permitted", and a profile
that names the tokenizer in the headline."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from infersight.alerts.diagnose import Diagnosis, Evidence
from infersight.alerts.rules import Cause
from infersight.api import answers
from infersight.core.burn import AlertState, Severity, Transition
from infersight.core.profile import parse_folded, summarise
from infersight.service.profiles import ProfileTrigger
from infersight.storage import incidents, signals
from infersight.storage import profiles as profile_store
from tests.api.conftest import Api
from tests.conftest import Store

T0 = datetime(2026, 12, 6, 9, tzinfo=UTC)
ADMIN = "admin-token-0123456789"
READ = "read-token-0123456789"
INGEST = "ingest-token-0123456789"
FOLDED = "\n".join([
    "thread (0x1): MainThread;serve (app.py:1);encode (tokenizers/implementations/base.py:9) 62",
    "thread (0x1): MainThread;serve (app.py:1);emit (logging/__init__.py:1100) 18",
    "thread (0x1): MainThread;serve (app.py:1) 20",
    "thread (0x2): loop;run (app.py:5);epoll_wait (libc.so.6) 400",
])  # fmt: skip


def _incident(store: Store, instance: str = "vllm-0") -> int:
    with store.engine.begin() as connection:
        opened = incidents.apply_step(
            connection, "ttft", f"instance={instance}", AlertState(Severity.PAGE, T0),
            Transition.OPENED, {"5m": 20.0, "1h": 15.0}, T0,
        )  # fmt: skip
    assert opened is not None
    evidence = (Evidence("util_gpu", 0.3, 0.8, 0.375, instance),)
    diagnosis = Diagnosis(Cause.HOST_BOUND, 0.7, instance, evidence, ()).to_dict()
    symptom = {"slo": "ttft", "scope": "model=m", "severity": "page", "sli": None,
               "burn_rates": {"5m": 20.0}, "peak_burn_rate": 20.0, "signals": []}  # fmt: skip
    signals.save_diagnosis(store.engine, opened.id, symptom, diagnosis, T0)
    return opened.id


def _page(api: Api, incident: int) -> str:
    """The page as it is now (the dashboard's answer cache emptied first)."""
    answers.clear_all()
    page = api.get(f"/ui/incidents/{incident}")
    assert page.status_code == 200
    return page.text


def _text(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_incident_page_shows_the_profile_in_each_state(api: Api, store: Store) -> None:
    incident = _incident(store)
    assert 'id="profile"' not in _page(api, incident)  # none asked yet
    trigger = ProfileTrigger(store.sql, seconds=2, rate=20)
    assert trigger(T0) == 1
    assert "waiting for the sidecar of vllm-0" in _text(_page(api, incident))
    (asked,) = profile_store.list_profiles(store.engine, incident_id=incident)
    claimed = profile_store.claim(store.engine, "vllm-0", T0)
    assert claimed is not None
    error = "not permitted: py-spy cannot attach to process 42 (the sidecar needs SYS_PTRACE …)"
    profile_store.complete(store.engine, asked.id, None, error, T0, instance="vllm-0",
                           nonce=claimed.nonce)  # fmt: skip
    assert trigger(T0 + timedelta(seconds=5)) == 1
    text = _text(_page(api, incident))
    assert "No profile: not permitted: py-spy cannot attach" in text
    assert "The profile names it" not in text

    second = _incident(store, "vllm-1")
    summary = summarise(parse_folded(FOLDED), native=True, rate=50, seconds=3)
    trigger(T0)
    (asked,) = profile_store.list_profiles(store.engine, incident_id=second)
    claimed = profile_store.claim(store.engine, "vllm-1", T0)
    assert claimed is not None
    profile_store.complete(store.engine, asked.id, summary, "", T0, instance="vllm-1",
                           nonce=claimed.nonce)  # fmt: skip
    trigger(T0 + timedelta(seconds=5))
    text = _text(_page(api, second))
    assert "The profile names it: 62 % of samples in the tokenizer" in text
    assert "profile: share of busy samples in the tokenizer" in text  # the evidence row
    assert "tokenizers.implementations.base:encode" in text
    assert re.search(r"tokenizer 62 %.*logging 18 %", text)
    answer = api.get(f"/api/v1/incidents/{second}").json()
    assert answer["diagnosis"]["detail"] == "tokenizer"


def test_the_routes_check_their_scopes(make_api: Callable[..., Api], store: Store) -> None:
    api = make_api(api_tokens=f"read:{READ},admin:{ADMIN},ingest:{INGEST}")

    def bearer(token: str) -> dict[str, str]:
        return {"authorization": f"Bearer {token}"}

    body = {"instance": "vllm-0", "seconds": 2}
    assert api.request("POST", "/api/v1/profiles", json=body).status_code == 401
    assert api.request("POST", "/api/v1/profiles", json=body,
                       headers=bearer(READ)).status_code == 403  # fmt: skip
    assert api.request("POST", "/api/v1/profiles", json=body,
                       headers=bearer(INGEST)).status_code == 403  # fmt: skip
    too_long = {"instance": "vllm-0", "seconds": 600}
    assert api.request("POST", "/api/v1/profiles", json=too_long,
                       headers=bearer(ADMIN)).status_code == 400  # fmt: skip
    asked = api.request("POST", "/api/v1/profiles", json=body, headers=bearer(ADMIN))
    assert asked.status_code == 202
    profile_id = asked.json()["id"]
    claim = {"instance": "vllm-0"}
    assert api.request("POST", "/api/v1/ingest/profiles/claim", json=claim,
                       headers=bearer(READ)).status_code == 403  # fmt: skip
    got = api.request("POST", "/api/v1/ingest/profiles/claim", json=claim, headers=bearer(INGEST))
    request = got.json()["request"]
    nonce = request.pop("nonce")
    assert len(nonce) >= 16
    assert request == {"id": profile_id, "instance": "vllm-0", "seconds": 2.0, "rate": 50}
    empty = api.request("POST", f"/api/v1/ingest/profiles/{profile_id}", json={},
                        headers=bearer(INGEST))  # fmt: skip
    assert empty.status_code == 400
    gone = {"error": "process not found: gone", "instance": "vllm-0", "nonce": nonce}
    done = api.request("POST", f"/api/v1/ingest/profiles/{profile_id}", json=gone,
                       headers=bearer(INGEST))  # fmt: skip
    assert done.json() == {"stored": True}
    read = api.get(f"/api/v1/profiles/{profile_id}", headers=bearer(READ)).json()
    assert (read["state"], read["error"]) == ("failed", "process not found: gone")
    listed = api.get("/api/v1/profiles?instance=vllm-0", headers=bearer(READ)).json()
    assert [p["id"] for p in listed["profiles"]] == [profile_id]
    assert api.get("/api/v1/profiles/999999", headers=bearer(READ)).status_code == 404
