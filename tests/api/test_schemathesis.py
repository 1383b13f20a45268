"""schemathesis against a live ``infersight serve``, on SQLite and PostgreSQL.

Every check schemathesis has (server errors, status codes, content types, response schemas,
schema-valid data accepted, schema-invalid data refused, Allow headers, undeclared methods,
auth, stateful sequences), all four phases, a fixed seed and a few examples per operation, as
an admin; ``schemathesis.toml`` beside this file says the one thing relaxed and why. Any
failure fails the test with schemathesis' own report, and so does a traceback in the server's
log (a 500 that the checks might not reach).

A longer search runs the same test with more arguments for ``schemathesis run``, e.g.
``INFERSIGHT_TEST_SCHEMATHESIS_ARGS="--max-time 300 --max-examples 10 --seed 11"``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.live import ADMIN_TOKEN, TOKENS, serve
from tests.conftest import Store

CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.mark.e2e
@pytest.mark.slow
def test_schemathesis_finds_no_failure(store: Store, tmp_path: Path):
    # ignored_auth sends one unknown token to every operation: a client may send 10 a minute
    # before its token checks are answered 429 (api.auth), so the run raises that limit.
    limit = {"INFERSIGHT_AUTH_FAILURES_PER_CLIENT": "1000000"}
    with serve(store.url, tmp_path, INFERSIGHT_API_TOKENS=TOKENS, **limit) as api:
        result = subprocess.run(
            [
                sys.executable, "-m", "schemathesis.cli",
                "--config-file", str(CONFIG),
                "run", f"{api.url}/openapi.json",
                "--header", f"Authorization: Bearer {ADMIN_TOKEN}",
                "--workers", "1",
                "--report", "junit", "--report-dir", str(tmp_path / "report"),
                *shlex.split(os.environ.get("INFERSIGHT_TEST_SCHEMATHESIS_ARGS", "")),
            ],
            check=False, capture_output=True, text=True, timeout=1800, cwd=tmp_path,
        )  # fmt: skip
        server_output = api.output()
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[-20000:]
    assert "passed" in report
    assert " 0 passed" not in report
    assert "Traceback" not in server_output, server_output[-5000:]
