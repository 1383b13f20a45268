"""Token checks are rate limited, and read tokens may be limited to tenants (#32, defect 8).

Unknown tokens from one client are answered 401 up to the limit, then 429 with
``Retry-After`` for every check from that client (its right token too) until the window ends,
on the JSON API and the dashboard's login form alike; the limiter's memory is a fixed-size
table. A token limited to tenants reads only its tenants: a tenant outside them is 403, no
tenant means its tenants (the union of several: ``test_tenant_union``), and answers that
cannot be limited to a tenant are 403."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import numpy as np
import pytest

from infersight.api.auth import FailureLimiter, parse_tokens
from infersight.core.errors import ConfigurationError
from infersight.storage.writer import open_writer
from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN, Api
from tests.doubles import NOW
from tests.factories import make_records

ACME_TOKEN = "acme-token-0123456789"
BOTH_TOKEN = "both-token-0123456789"
TOKENS = (
    f"read:{READ_TOKEN},admin:{ADMIN_TOKEN},read@acme:{ACME_TOKEN},read@acme|globex:{BOTH_TOKEN}"
)
LIMIT = 10  # FailureLimiter's per-client default


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
def secured(make_api: Callable[..., Api]) -> Api:
    return make_api(api_tokens=TOKENS)


@pytest.fixture
def records(store):
    rows = make_records(
        np.random.default_rng(5), NOW - timedelta(hours=1), 600, span=timedelta(hours=1)
    )
    open_writer(store.engine).write_requests(rows)
    return rows


def test_wrong_tokens_are_401_up_to_the_limit_then_429_for_every_check(secured: Api) -> None:
    for _ in range(LIMIT):
        answer = secured.get("/api/v1/slos", headers=bearer("wrong-token-0123456789"))
        assert answer.status_code == 401
    refused = secured.get("/api/v1/slos", headers=bearer("wrong-token-0123456789"))
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    # The right token from the same client waits too (no oracle while limited).
    assert secured.get("/api/v1/slos", headers=bearer(READ_TOKEN)).status_code == 429
    health = secured.get("/healthz")  # health is never limited (503 "starting" at first)
    assert health.status_code == 200 or health.json()["store"] == "unknown"


def test_the_login_form_is_limited_too(secured: Api) -> None:
    form = {"headers": {"origin": "http://localhost", "sec-fetch-site": "same-origin"}}
    for _ in range(LIMIT):
        answer = secured.request(
            "POST", "/ui/login", data={"token": "wrong-token-0123456789"}, **form
        )
        assert answer.status_code == 401
    refused = secured.request("POST", "/ui/login", data={"token": READ_TOKEN}, **form)
    assert refused.status_code == 429
    assert refused.headers["retry-after"]


def test_the_limiter_forgets_the_least_recent_clients_and_ends_its_window() -> None:
    now = [0.0]
    limiter = FailureLimiter(per_client=2, overall=10**9, window_s=60, capacity=100,
                             clock=lambda: now[0])  # fmt: skip
    for client in range(10_000):
        limiter.failed(f"10.0.{client // 256}.{client % 256}")
    assert len(limiter._clients) == 100
    limiter.failed("192.0.2.1")
    limiter.failed("192.0.2.1")
    assert limiter.wait_s("192.0.2.1") == 60
    assert limiter.wait_s("192.0.2.2") == 0
    now[0] = 60.0
    assert limiter.wait_s("192.0.2.1") == 0


def test_too_many_failures_from_all_clients_limit_everyone() -> None:
    limiter = FailureLimiter(per_client=100, overall=5, window_s=30)
    for client in range(5):
        limiter.failed(f"198.51.100.{client}")
    assert limiter.wait_s("203.0.113.9") > 0


def test_a_tenant_scope_is_for_read_tokens_and_names_tenants() -> None:
    tokens = parse_tokens(f"read@acme|globex:{BOTH_TOKEN}")
    assert tokens.tenants_of(BOTH_TOKEN) == frozenset({"acme", "globex"})
    with pytest.raises(ConfigurationError):
        parse_tokens(f"admin@acme:{ADMIN_TOKEN}")
    with pytest.raises(ConfigurationError):
        parse_tokens(f"read@:{READ_TOKEN}")


def test_a_scoped_token_reads_only_its_tenant(secured: Api, records) -> None:
    acme = bearer(ACME_TOKEN)
    # No tenant given: the answer is its tenant's alone.
    body = secured.get("/api/v1/throughput", params={"group_by": "tenant"}, headers=acme).json()
    assert [g["labels"]["tenant"] for g in body["groups"]] == ["acme"]
    assert body["groups"][0]["requests"] == sum(
        r.tenant == "acme" and r.start >= NOW - timedelta(hours=1) for r in records
    )
    for path in ("/api/v1/latency", "/api/v1/throughput", "/api/v1/breakdown"):
        assert secured.get(path, params={"tenant": "acme"}, headers=acme).status_code == 200
        other = secured.get(path, params={"tenant": "globex"}, headers=acme)
        assert other.status_code == 403, path
        assert other.json()["error"]["details"]["tenants"] == ["acme"]
    # Answers that cannot be limited to a tenant are refused, saying why.
    for path in ("/api/v1/latency/gap", "/api/v1/silences", "/api/v1/cost/model"):
        refused = secured.get(path, headers=acme)
        assert refused.status_code == 403, path
        assert "cannot be limited to a tenant" in refused.json()["error"]["message"]
    # Cost, SLOs and incidents are limited to its tenants (tests/api/test_tenant_union.py).
    for path in ("/api/v1/cost", "/api/v1/slos", "/api/v1/incidents"):
        assert secured.get(path, headers=acme).status_code == 200, path
    assert secured.get("/metrics", headers=acme).status_code == 403
    # An unscoped read token still sees every tenant.
    every = secured.get(
        "/api/v1/throughput", params={"group_by": "tenant"}, headers=bearer(READ_TOKEN)
    ).json()
    assert {g["labels"]["tenant"] for g in every["groups"]} == {"acme", "globex"}


def test_a_token_of_several_tenants_reads_their_union_or_names_one(secured: Api, records) -> None:
    both = bearer(BOTH_TOKEN)
    unnamed = secured.get("/api/v1/throughput", headers=both)  # the union (test_tenant_union)
    assert unnamed.status_code == 200
    assert unnamed.json()["groups"][0]["requests"] == sum(
        r.start >= NOW - timedelta(hours=1) for r in records
    )
    assert secured.get("/api/v1/throughput", params={"tenant": "globex"}, headers=both).is_success
    assert (
        secured.get("/api/v1/throughput", params={"tenant": "x"}, headers=both).status_code == 403
    )


def test_a_scoped_token_on_the_dashboard(secured: Api, records) -> None:
    acme = {**bearer(ACME_TOKEN), "accept": "text/html"}
    page = secured.get("/ui/latency", headers=acme)
    assert page.status_code == 200
    assert "acme" in page.text
    assert "globex" not in page.text  # not even in the tenant menu
    assert secured.get("/ui/latency", params={"tenant": "globex"}, headers=acme).status_code == 403
    assert secured.get("/ui/overview", headers=acme).status_code == 403
    every = secured.get("/ui/latency", headers=bearer(READ_TOKEN))
    assert every.status_code == 200
    assert "globex" in every.text
