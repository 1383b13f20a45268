"""Real peer servers for interoperability tests: a Debian binary on a free loopback port,
waited on until its ``/-/ready`` answers, and stopped (terminated, then killed) afterwards."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def ready_server(command: Sequence[str], url: str, timeout_s: float) -> Iterator[str]:
    """Run ``command`` until it answers ``{url}/-/ready`` (Prometheus' and Alertmanager's
    readiness endpoint); yields ``url``."""
    name = command[0].rsplit("/", 1)[-1]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, f"{name} exited"
            assert time.monotonic() < deadline, f"{name} did not become ready"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
