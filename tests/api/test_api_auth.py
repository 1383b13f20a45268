"""Bearer tokens with read and admin scopes, exposure rules, and request limits."""

from __future__ import annotations

import logging

import pytest

from infersight.api import create_app
from infersight.api.auth import Scope, check_exposure, parse_tokens
from infersight.api.settings import ApiSettings
from infersight.core.errors import ConfigurationError
from infersight.core.net import is_loopback
from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN
from tests.waiting import until

TOKENS = f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}"
SLO = """apiVersion: infersight/v1
kind: SLO
metadata: {name: avail}
spec: {sli: {availability: {}}, window: 28d, objective: 0.999}
"""


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_on_loopback_without_tokens_the_api_is_open(api):
    assert api.get("/api/v1/throughput").status_code == 200
    assert api.put("/api/v1/slos/avail", content=SLO).status_code == 201


def test_with_tokens_a_request_needs_one(make_api):
    api = make_api(api_tokens=TOKENS)
    missing = api.get("/api/v1/latency")
    assert missing.status_code == 401
    assert missing.json()["error"]["code"] == "unauthorized"
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = api.get("/api/v1/latency", headers=bearer("not-a-known-token-at-all"))
    assert wrong.status_code == 401
    assert api.get("/metrics").status_code == 401
    # Health stays open ("starting" while the first store probe is out, then ok).
    assert until(lambda: api.get("/healthz").status_code == 200, "healthz")


def test_a_read_token_reads_but_cannot_change_slos(make_api):
    api = make_api(api_tokens=TOKENS)
    assert api.get("/api/v1/slos", headers=bearer(READ_TOKEN)).status_code == 200
    refused = api.put("/api/v1/slos/avail", content=SLO, headers=bearer(READ_TOKEN))
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "forbidden"
    assert (
        api.put("/api/v1/slos/avail", content=SLO, headers=bearer(ADMIN_TOKEN)).status_code == 201
    )
    assert api.get("/api/v1/slos/avail", headers=bearer(ADMIN_TOKEN)).status_code == 200
    assert api.delete("/api/v1/slos/avail", headers=bearer(READ_TOKEN)).status_code == 403


def test_tokens_come_from_a_secrets_file_too(tmp_path, make_api):
    secrets = tmp_path / "tokens"
    secrets.write_text(f"# scope token\nadmin {ADMIN_TOKEN}\n\nread {READ_TOKEN}  # ci\n")
    tokens = parse_tokens("", str(secrets))
    assert tokens.scope_of(ADMIN_TOKEN) is Scope.ADMIN
    assert tokens.scope_of(READ_TOKEN) is Scope.READ
    api = make_api(api_tokens_file=str(secrets))
    assert api.get("/api/v1/slos", headers=bearer(READ_TOKEN)).status_code == 200
    assert api.get("/api/v1/slos").status_code == 401


@pytest.mark.parametrize(
    ("env", "message"),
    [("root:0123456789abcdefgh", "unknown token scope"), ("read:short", "shorter"), ("x", "SCOPE")],
)
def test_malformed_token_settings_are_a_configuration_error(env, message):
    with pytest.raises(ConfigurationError, match=message):
        parse_tokens(env)


def test_a_missing_token_file_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read"):
        parse_tokens("", str(tmp_path / "absent"))


def test_beyond_loopback_tokens_are_required_unless_the_operator_insists(store, caplog):
    with pytest.raises(ConfigurationError, match="insecure-no-auth"):
        create_app(ApiSettings(listen="0.0.0.0:8080", run_jobs=False), store.engine)
    with caplog.at_level(logging.WARNING, logger="infersight.api.auth"):
        create_app(
            ApiSettings(listen="0.0.0.0:8080", run_jobs=False, insecure_no_auth=True),
            store.engine,
        )
    assert "WITHOUT authentication" in caplog.text
    create_app(ApiSettings(listen="10.0.0.5:8080", api_tokens=TOKENS, run_jobs=False), store.engine)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("0.0.0.0", False), ("10.1.2.3", False), ("example.org", False)],
)  # fmt: skip
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback
    if loopback:
        check_exposure(host, parse_tokens(""), insecure_no_auth=False)


def test_an_oversized_body_is_refused_with_413(make_api):
    api = make_api(max_body_bytes=2048)
    response = api.put("/api/v1/slos/avail", content=SLO + "#" * 4096)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"

    async def chunks():
        for _ in range(4):
            yield b"#" * 1024

    streamed = api.put("/api/v1/slos/avail", content=chunks())
    assert streamed.status_code == 413
