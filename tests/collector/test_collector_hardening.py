"""Issue 14 on the sidecar: tokens of 16+ characters, the --token flag refused, and an
HTTP receiver that closes connections which never complete their headers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from infersight.collector.assembly import Reassembly
from infersight.collector.auth import MIN_TOKEN_CHARS, check_bind
from infersight.collector.http_receiver import HttpServer, create_app
from infersight.collector.ingest import Ingestor
from infersight.collector.mapping import MappingContext
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.otlp import Limits
from infersight.collector.sidecar import SidecarConfig
from infersight.collector.spool import Spool, SpoolConfig
from infersight.core.errors import ConfigurationError
from infersight.httpd import ConnectionLimits

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("token", ["s3cret", "x" * (MIN_TOKEN_CHARS - 1), "  short-token  "])
def test_a_sidecar_token_shorter_than_the_apis_minimum_is_refused(token, tmp_path):
    with pytest.raises(ConfigurationError, match="shorter than 16"):
        check_bind("127.0.0.1", token, insecure_no_auth=False)
    with pytest.raises(ConfigurationError, match="shorter than 16"):
        SidecarConfig(instance="i", spool_dir=tmp_path, token=token)
    SidecarConfig(instance="i", spool_dir=tmp_path, token="x" * MIN_TOKEN_CHARS)


def _sidecar(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from infersight.cli.commands_sidecar import sidecar; sidecar()",
         "--otlp-http", "127.0.0.1:0", "--otlp-grpc", "127.0.0.1:0", "--gpu-source", "none",
         "--store", "sqlite:///:memory:", *args],
        check=False, capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )  # fmt: skip


def test_a_token_on_the_command_line_is_refused_with_the_ways_to_give_it(tmp_path):
    # Issue 32: any local user reads /proc/PID/cmdline, so --token is refused, not warned about.
    token = "a-long-enough-token-0123"
    result = _sidecar("--token", token, "--spool-dir", str(tmp_path / "s"))
    assert result.returncode == 2
    assert "--token is refused" in result.stderr
    assert "--token-file" in result.stderr
    assert "INFERSIGHT_OTLP_TOKEN" in result.stderr
    assert token not in result.stderr + result.stdout  # the token is not echoed
    assert not (tmp_path / "s").exists()  # refused before anything started
    # The ways it names are read (a short token makes the sidecar exit once it has read one).
    from_env = _sidecar("--spool-dir", str(tmp_path / "e"), env={"INFERSIGHT_OTLP_TOKEN": "tiny"})
    assert from_env.returncode != 0
    assert "shorter than 16" in from_env.stderr + from_env.stdout
    assert "--token is refused" not in from_env.stderr
    (tmp_path / "token").write_text("tiny\n")
    from_file = _sidecar(
        "--spool-dir", str(tmp_path / "f"), "--token-file", str(tmp_path / "token")
    )
    assert from_file.returncode != 0
    assert "shorter than 16" in from_file.stderr + from_file.stdout


@pytest.mark.e2e
def test_the_http_receiver_closes_idle_and_slowloris_connections(tmp_path):
    spool = Spool(SpoolConfig(tmp_path / "spool"))
    ingestor = Ingestor(spool, MappingContext("n"), CollectorMetrics(), Limits(), Reassembly(0.0))
    limits = ConnectionLimits(header_timeout_s=1.0, keep_alive_s=1, max_connections=4)
    server = HttpServer(create_app(ingestor), "127.0.0.1", 0, limits=limits).start()
    try:
        idle = socket.create_connection(("127.0.0.1", server.port))
        idle.settimeout(None)
        assert idle.recv(1024) == b""  # closed by the server, with nothing sent
        slow = socket.create_connection(("127.0.0.1", server.port))
        slow.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        slow.settimeout(0.2)
        closed = False
        while not closed:
            try:
                slow.sendall(b"X")
                closed = slow.recv(1024) == b""
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
        held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        held[0].settimeout(None)
        assert held[0].recv(1024).startswith(b"HTTP/1.1 200")
        for s in (idle, slow, *held):
            s.close()
    finally:
        server.stop()
        spool.close()


def test_the_simulators_otlp_token_is_refused_on_the_command_line_and_read_from_the_env():
    from click.testing import CliRunner

    from infersight.cli.commands_simulate import simulate

    token = "a-long-enough-token-0123"
    argv = CliRunner().invoke(simulate, ["--list", "--otlp-token", token])
    assert argv.exit_code == 2
    assert "--otlp-token is refused" in argv.output
    assert "INFERSIGHT_OTLP_TOKEN" in argv.output
    assert token not in argv.output
    env = CliRunner().invoke(simulate, ["--list"], env={"INFERSIGHT_OTLP_TOKEN": token})
    assert env.exit_code == 0, env.output
