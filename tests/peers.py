"""Real servers for tests: an ASGI app under uvicorn in a thread, or a Debian binary
(Prometheus, Alertmanager), each on a free loopback port, waited on until it answers and
stopped afterwards."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def ready_server(command: Sequence[str], url: str) -> Iterator[str]:
    """Run ``command`` until it answers ``{url}/-/ready`` (Prometheus' and Alertmanager's
    readiness endpoint); yields ``url``. No deadline of its own (a loaded machine only waits
    longer): it fails as soon as the process exits, and pytest-timeout stops a hang."""
    name = command[0].rsplit("/", 1)[-1]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, f"{name} exited"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def serving_app(app: Any) -> Iterator[str]:
    """``app`` under uvicorn on a free loopback port in a thread; yields its base URL and
    checks on the way out that the server thread stopped. Waits for the start with no deadline
    of its own (it fails as soon as the thread dies; pytest-timeout stops a hang)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="none"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "the server could not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        assert not thread.is_alive()
