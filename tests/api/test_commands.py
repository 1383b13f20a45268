"""``infersight slo apply|list`` and ``infersight serve`` (a real uvicorn in a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import httpx
import pytest
from click.testing import CliRunner

from infersight.cli.commands_serve import split_listen
from infersight.cli.commands_slo import slo
from infersight.cli.settings import Settings
from infersight.core.errors import InvalidInput
from tests.api.test_api_slos import OPENSLO_LATENCY, TTFT_SLO
from tests.peers import free_port
from tests.waiting import until


@dataclass
class Obj:
    settings: Settings


def test_slo_apply_then_list(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    files = tmp_path / "slos.yaml"
    files.write_text(TTFT_SLO + "\n---\n" + json.dumps(OPENSLO_LATENCY))
    obj = Obj(Settings(database_url=url))
    runner = CliRunner()
    first = runner.invoke(slo, ["apply", str(files)], obj=obj)
    assert first.exit_code == 0, first.output
    assert first.output.splitlines() == ["created chat-ttft", "created tpot-openslo"]
    again = runner.invoke(slo, ["apply", str(files)], obj=obj)
    assert again.output.splitlines() == ["updated chat-ttft", "updated tpot-openslo"]
    table = runner.invoke(slo, ["list"], obj=obj)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split()[:3] == ["NAME", "SLI", "OBJECTIVE"]
    assert lines[1].split()[:4] == ["chat-ttft", "ttft≤0.15s", "99.0000%", "28d"]
    as_json = json.loads(runner.invoke(slo, ["list", "--json"], obj=obj).output)
    assert [row["metadata"]["name"] for row in as_json] == ["chat-ttft", "tpot-openslo"]
    assert as_json[0]["status"]["events"] == 0
    assert as_json[0]["status"]["error_budget_remaining"] == 1.0


def test_slo_apply_refuses_a_bad_file_and_stores_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    bad = tmp_path / "bad.yaml"
    bad.write_text(TTFT_SLO + "\n---\n" + TTFT_SLO.replace("window: 28d", "window: forever"))
    result = CliRunner().invoke(slo, ["apply", str(bad)], obj=Obj(Settings(database_url=url)))
    assert isinstance(result.exception, InvalidInput)
    assert not (tmp_path / "cli.db").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:8080", ("127.0.0.1", 8080)), ("[::1]:9000", ("::1", 9000)),
     ("0.0.0.0:0", ("0.0.0.0", 0))],
)  # fmt: skip
def test_listen_addresses(text, expected):
    assert split_listen(text) == expected


@pytest.mark.parametrize("text", ["8080", "host:", ":80", "host:http", "host:70000"])
def test_bad_listen_addresses_are_refused(text):
    with pytest.raises(InvalidInput):
        split_listen(text)


def evaluated(port: int) -> httpx.Response | None:
    """``/healthz`` once the scheduler inside serve has evaluated at least once."""
    try:
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    except httpx.TransportError:
        return None
    return health if health.json()["jobs"]["evaluate"] >= 1 else None


@pytest.mark.e2e
def test_serve_answers_over_http_and_stops_cleanly(tmp_path):
    port = free_port()
    env = {**os.environ, "INFERSIGHT_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}",
           "INFERSIGHT_EVALUATION_INTERVAL_S": "0.2"}  # fmt: skip
    code = (
        f"from infersight.cli.commands_serve import serve; serve(['--listen', '127.0.0.1:{port}'])"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        health = until(lambda: evaluated(port), "serve evaluated its SLOs", process=process)
        assert health.status_code == 200
        assert health.json()["jobs"]["evaluate"] >= 1  # the scheduler runs inside serve
        latency = httpx.get(f"http://127.0.0.1:{port}/api/v1/latency", timeout=5)
        assert latency.json()["groups"] == []
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert metrics.headers["content-type"].startswith("text/plain")
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=20)
    # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells why.
    assert process.returncode in (0, -15), output.decode()
    assert b"Application shutdown complete" in output


def test_serve_refuses_an_open_api_beyond_loopback(tmp_path):
    env = {**os.environ, "INFERSIGHT_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    code = "from infersight.cli.commands_serve import serve; serve(['--listen', '0.0.0.0:1'])"
    result = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "insecure-no-auth" in result.stderr
