"""The systemd units of deploy/systemd (#33): ``systemd-analyze verify`` finds nothing to say
about them (an unknown or misspelt option is only a warning there, so any output fails), their
hardening scores as systemd rates it, and the sidecar's command line, expanded as systemd would
expand it from its environment file, starts a real sidecar that receives spans, with its token
read from the credential file and never on its command line. (These machines run no systemd
as PID 1, so the units themselves cannot be started here.)"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.collector.harness import encoded, vllm_spans
from tests.peers import free_port
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
BINARY = "/opt/infersight/bin/infersight"
INFERSIGHT = str(Path(sys.executable).with_name("infersight"))
TOKEN = "otlp-token-of-the-systemd-test"


def analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        missing = "systemd-analyze is not installed (Debian package: systemd)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    return found


def installed(tmp_path: Path) -> dict[str, Path]:
    """The units copied into ``tmp_path``, their ExecStart naming this venv's ``infersight``
    (verify checks that the binary exists), and the sidecar template's instance ``vllm-0``."""
    units = {}
    for unit in UNITS.glob("*.service"):
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text().replace(BINARY, INFERSIGHT))
        units[unit.name] = copy
    instance = tmp_path / "infersight-sidecar@vllm-0.service"
    instance.symlink_to(units["infersight-sidecar@.service"].name)
    units[instance.name] = instance
    return units


@pytest.mark.parametrize("unit", ["infersight-serve.service", "infersight-sidecar@vllm-0.service"])
def test_systemd_analyze_verifies_the_units_without_a_word(unit: str, tmp_path: Path) -> None:
    tool = analyze()
    path = installed(tmp_path)[unit]
    done = subprocess.run(
        [tool, "verify", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == "", done.stdout + done.stderr
    security = subprocess.run(
        [tool, "security", "--offline=yes", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    level = re.search(r"Overall exposure level for \S+: ([\d.]+)", security.stdout)
    assert level is not None, security.stdout + security.stderr
    # systemd rates 0 to 10; under 2 is its "OK" band (the sidecar keeps the GPUs' devices)
    assert float(level.group(1)) < 2.0, security.stdout


def exec_start(unit: Path) -> list[str]:
    """The ExecStart line, its continuation lines joined."""
    text = unit.read_text().replace("\\\n", " ")
    [line] = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def expand(words: list[str], env: dict[str, str], specifiers: dict[str, str]) -> list[str]:
    """Expanded as systemd expands a command line: specifiers, ``${VAR}`` as one word,
    ``$VAR`` alone split on white space."""
    argv: list[str] = []
    for raw in words:
        word = raw
        for key, value in specifiers.items():
            word = word.replace(f"%{key}", value)
        alone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if alone:
            argv += env.get(alone.group(1), "").split()
        else:
            argv.append(re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), word))
    return argv


def test_the_sidecar_units_command_line_starts_a_sidecar_with_its_token_from_a_file(
    tmp_path: Path,
) -> None:
    http_port, grpc_port = free_port(), free_port()
    # The instance's environment file as docs/deploy.md shows it (SQLite here: the store is
    # not what this test is about).
    env = {
        "INFERSIGHT_DATABASE_URL": f"sqlite:///{tmp_path / 'store.db'}",
        "OTLP_HTTP": f"127.0.0.1:{http_port}",
        "OTLP_GRPC": f"127.0.0.1:{grpc_port}",
        "SIDECAR_OPTIONS": "--gpu-source none --model llama-3.1-8b --window 0",
    }
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "otlp-token").write_text(TOKEN + "\n")
    state = tmp_path / "state"
    (state / "infersight" / "sidecar-vllm-0").mkdir(parents=True)
    words = exec_start(UNITS / "infersight-sidecar@.service")
    assert words[0] == BINARY
    specifiers = {"i": "vllm-0", "H": socket.gethostname(), "S": str(state), "d": str(credentials)}
    argv = [INFERSIGHT, *expand(words[1:], env, specifiers)]
    assert TOKEN not in " ".join(argv)
    subprocess.run(
        [INFERSIGHT, "db", "upgrade", "--store", env["INFERSIGHT_DATABASE_URL"]],
        check=True,
        capture_output=True,
        timeout=120,
    )
    process = subprocess.Popen(
        argv,
        env={**os.environ, **env},
        cwd=state / "infersight" / "sidecar-vllm-0",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{http_port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=10).status_code == 200
        except httpx.TransportError:
            return False

    try:
        until(healthy, "the sidecar answers /healthz", process=process)
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode()
        assert TOKEN not in cmdline
        body = encoded(vllm_spans(3))
        headers = {"content-type": "application/x-protobuf"}
        refused = httpx.post(f"{base}/v1/traces", content=body, headers=headers, timeout=30)
        assert refused.status_code == 401
        headers["authorization"] = f"Bearer {TOKEN}"
        accepted = httpx.post(f"{base}/v1/traces", content=body, headers=headers, timeout=30)
        assert accepted.status_code == 200, accepted.text
        # the spool lies in the unit's state directory
        assert any((state / "infersight" / "sidecar-vllm-0").iterdir())
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, out
