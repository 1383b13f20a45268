"""Real processes for the profile tests: the real-time simulator with a host-side limit, a
client that keeps it busy, and the sidecar with ``--profile-target``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.waiting import until

CLI = [sys.executable, "-c", "from infersight.cli import main; main()"]
SCENARIO = """
apiVersion: infersight/v1
kind: Scenario
metadata: {name: host-limit}
spec:
  start: "2026-02-01T10:00:00Z"
  duration: 1h
  seed: 5
  sample_interval: 10s
  fleet:
    - profile: llama-3.1-8b-h200x1
      instances: 1
      name_prefix: host
      arrival: {process: poisson, rate: 0.01}
      mix:
        input: {median: 300, sigma: 0.5}
        output: {median: 60, sigma: 0.5}
"""
PROMPT = " ".join(["the rain in spain stays mainly on the plain"] * 60)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def simulator(limit: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``infersight simulate --realtime --host-limit LIMIT`` (one instance, ``host-0``): the
    process and its base URL."""
    scenario = tmp_path / "host.yaml"
    scenario.write_text(SCENARIO)
    log = tmp_path / f"simulate-{limit}.log"
    args = ["simulate", "--scenario", str(scenario), "--realtime", "--listen", "127.0.0.1:0",
            "--quiet", "--host-limit", limit,
            "--host-log", str(tmp_path / "requests.log")]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen([*CLI, *args], stdout=sink, stderr=subprocess.STDOUT)
    try:

        def url() -> str | None:
            found = re.search(r"host-0: (http://[\d.:]+)/v1", log.read_text(errors="replace"))
            return found.group(1) if found else None

        yield process, until(url, "the simulator's URL", process=process)
    finally:
        stop(process)


@contextmanager
def busy(url: str, clients: int = 3) -> Iterator[list[int]]:
    """Clients streaming chat completions with long prompts until the block ends; the list
    counts the completed requests."""
    done = [0]
    halt = threading.Event()
    body = json.dumps({
        "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 32, "stream": True,
    }).encode()  # fmt: skip

    def client() -> None:
        while not halt.is_set():
            request = urllib.request.Request(
                url + "/v1/chat/completions", data=body,
                headers={"content-type": "application/json"},
            )  # fmt: skip
            try:
                with urllib.request.urlopen(request, timeout=120) as reply:
                    reply.read()
                done[0] += 1
            except OSError:
                if halt.is_set():
                    return

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    try:
        until(lambda: done[0] >= 2, "the simulator serving requests")
        yield done
    finally:
        halt.set()
        for thread in threads:
            thread.join(timeout=150)


@contextmanager
def sidecar(
    target: int, tmp_path: Path, extra: Sequence[str], instance: str = "host-0"
) -> Iterator[subprocess.Popen[bytes]]:
    """``infersight sidecar --profile-target PID`` polling every 0.2 s."""
    log = tmp_path / "sidecar.log"
    args = ["sidecar", "--instance", instance, "--otlp-http", "127.0.0.1:0",
            "--otlp-grpc", "127.0.0.1:0", "--gpu-source", "none",
            "--spool-dir", str(tmp_path / "spool"), "--profile-target", str(target),
            "--profile-poll", "0.2", "--profile-rate", "50", *extra]  # fmt: skip
    with log.open("wb") as sink:
        process = subprocess.Popen([*CLI, *args], stdout=sink, stderr=subprocess.STDOUT)
    try:
        until(lambda: "infersight sidecar" in log.read_text(errors="replace"),
              "the sidecar listening", process=process)  # fmt: skip
        yield process
    finally:
        stop(process)
