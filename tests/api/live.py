"""``infersight serve`` as a real process for the API's end-to-end tests: a free port, a
store URL, the environment given; its output is kept in a file for the test to read."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.peers import free_port

READ_TOKEN = "read-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789"
TOKENS = f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}"


@dataclass
class Served:
    url: str
    port: int
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def serve(store_url: str, tmp_path: Path, **env: str) -> Iterator[Served]:
    """``infersight serve`` on a free loopback port over ``store_url``, until it answers."""
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    environ = {
        **os.environ,
        "INFERSIGHT_DATABASE_URL": store_url,
        "INFERSIGHT_RUN_JOBS": "false",
        **env,
    }
    code = (
        f"from infersight.cli.commands_serve import serve; serve(['--listen', '127.0.0.1:{port}'])"
    )
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", code], env=environ, stdout=sink, stderr=subprocess.STDOUT
        )
    served = Served(f"http://127.0.0.1:{port}", port, log)
    try:
        deadline = time.monotonic() + 120  # a guard against a hang, not a budget
        while True:
            assert process.poll() is None, f"serve exited:\n{served.output()}"
            try:
                if httpx.get(f"{served.url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"serve did not answer:\n{served.output()}"
            time.sleep(0.1)
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
