"""Issue 32 (defect 9): a token URL-encoded inside another parameter, once or several times,
never reaches the access log of the API (a real ``infersight serve``) or of the sidecar's
receiver; what holds no secret is logged as it came."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote, unquote_plus

import httpx
import pytest

from infersight.httpd.redact import MAX_DECODINGS, REDACTED, Redactor, RedactSecrets
from tests.api.live import ADMIN_TOKEN, READ_TOKEN, TOKENS, serve
from tests.conftest import Store

SECRET = "opaque-secret-value-42"


@pytest.mark.parametrize(
    "target",
    [
        f"/ui/login?next=/x%3Ftoken%3D{SECRET}",  # the reported case
        f"/ui/login?next=/x%253Ftoken%253D{SECRET}",  # encoded twice
        f"/ui/login?next=%252Fx%25253Fapi_key%25253D{SECRET}",  # three times
        f"/ui/login?next=token%3D{SECRET}&a=1",  # a bare name=value inside the value
        f"/ui/login?%74oken={SECRET}",  # the secret parameter's own name encoded
        f"/ui/login?next=/x%3Fa%3D1%26password%3D{SECRET}",  # behind another parameter
        f"/ui/login?next=/x?session={SECRET}",  # not encoded at all
        f"/x%3Ftoken%3D{SECRET}",  # in the path
        f"/ui/login?next=/a%2F{SECRET}",  # a known token, encoded inside a value
        f"/ui/login?next=%2F{SECRET.replace('-', '%2D')}",  # a known token, its bytes encoded
    ],
)
def test_nested_encodings_of_a_secret_are_redacted(target):
    redactor = Redactor([SECRET])
    cleaned = redactor.target(target)
    assert SECRET not in cleaned
    for level in range(MAX_DECODINGS + 1):
        decoded = cleaned
        for _ in range(level):
            decoded = unquote_plus(decoded)
        assert SECRET not in decoded, (target, cleaned)
    assert REDACTED in cleaned


def test_what_holds_no_secret_is_logged_as_it_came():
    redactor = Redactor(["t" * 20])
    for target in ("/api/v1/latency?model=m&window=1h", "/ui/login?next=/ui/overview%3Fa%3D1",
                   "/healthz", "/x?a=%2541&b", "/x?"):  # fmt: skip
        assert redactor.target(target) == target
    assert redactor.target("/q?token=abc&model=m") == f"/q?token={REDACTED}&model=m"


def test_a_part_encoded_deeper_than_decoding_looks_is_redacted_whole():
    # The separator encoded 50 times hides the name, while the value itself stays in clear.
    deep = f"token={SECRET}"
    for _ in range(50):
        deep = quote(deep, safe="")
    assert SECRET in deep
    cleaned = Redactor().target(f"/x?next={deep}&model=m")
    assert cleaned == f"/x?next={REDACTED}&model=m"
    assert Redactor().target(f"/x?{deep}") == f"/x?{REDACTED}"


def test_the_filter_cleans_access_records():
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", f"/ui/login?next=/x%3Ftoken%3D{SECRET}", "1.1", 303), None,
    )  # fmt: skip
    assert RedactSecrets().filter(record)
    assert SECRET not in record.getMessage()


@pytest.mark.e2e
def test_an_encoded_token_inside_a_parameter_never_reaches_the_apis_log(
    store: Store, tmp_path: Path
):
    with serve(store.url, tmp_path, INFERSIGHT_API_TOKENS=TOKENS) as api:
        httpx.get(f"{api.url}/ui/login?next=/x%3Ftoken%3D{SECRET}", timeout=10)
        httpx.get(f"{api.url}/ui/login?next=/x%253Fapi_key%253D{SECRET}", timeout=10)
        httpx.get(f"{api.url}/ui/login?next=/ui/overview%3Fa%3D{ADMIN_TOKEN}", timeout=10)
        httpx.get(f"{api.url}/api/v1/slos?next=%2F{READ_TOKEN}", timeout=10)
        marker = httpx.get(f"{api.url}/healthz?done=1", timeout=10)
        assert marker.status_code == 200
        log = ""
        while "done=1" not in log:  # the access line of the last request is written
            log = api.output()
    assert "/ui/login?next=" in log  # the requests were logged, their secrets not
    for secret in (SECRET, ADMIN_TOKEN, READ_TOKEN):
        assert secret not in log
