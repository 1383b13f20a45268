"""An address that cannot be listened on is a clear one-line error and exit status 2, not a
traceback (issue #33): the sidecar's two receivers and the API, one worker or several."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from infersight.cli import main; main()"]


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port another program listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def _assert_refused(done: subprocess.CompletedProcess[str], port: int) -> None:
    assert done.returncode == 2, done.stderr
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("receiver", ["--otlp-http", "--otlp-grpc"])
def test_a_sidecar_whose_port_is_taken_says_so(taken: int, receiver: str, tmp_path: Path) -> None:
    ports = {"--otlp-http": "127.0.0.1:0", "--otlp-grpc": "127.0.0.1:0"}
    ports[receiver] = f"127.0.0.1:{taken}"
    done = _run(
        "--store", f"sqlite:///{tmp_path / 'store.db'}", "sidecar",
        *(item for pair in ports.items() for item in pair),
        "--spool-dir", str(tmp_path / "spool"), "--gpu-source", "none",
    )  # fmt: skip
    _assert_refused(done, taken)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_whose_port_is_taken_says_so_before_it_starts(
    taken: int, workers: str, tmp_path: Path
) -> None:
    store = tmp_path / "store.db"
    done = _run(
        "--store", f"sqlite:///{store}", "serve", "--listen", f"127.0.0.1:{taken}",
        "--workers", workers,
    )  # fmt: skip
    _assert_refused(done, taken)
    assert "Application startup" not in done.stderr  # refused before the app started
