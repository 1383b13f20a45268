"""A client that monopolises a server's connections the way issue 32 reported: it holds
``count`` sockets open without sending a byte (or, given a ``request``, after sending only
that: the headers of a POST whose body never comes) and reopens each one as soon as the
server closes it. It runs in a process of its own, as an attacker would (in the test's process it
would also hold the interpreter's lock between a real client's connect and its request)."""

from __future__ import annotations

import selectors
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def hog(host: str, port: int, count: int, request: bytes = b"") -> None:  # pragma: no cover
    """Hold ``count`` sockets to ``host:port`` until standard input closes, each silent or,
    given a ``request``, having sent only that; print how many the server closed (each
    reopened at once), every 0.1 s. (Runs in the child process.)"""
    selector = selectors.DefaultSelector()

    def open_one() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex((host, port))
        selector.register(sock, selectors.EVENT_WRITE if request else selectors.EVENT_READ)

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    for _ in range(count):
        open_one()
    reopened, reported = 0, time.monotonic()
    while not stop.is_set():
        for key, events in selector.select(timeout=0.1):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                if events & selectors.EVENT_WRITE:  # connected: the request, then wait
                    sock.sendall(request)
                    selector.modify(sock, selectors.EVENT_READ)
                    continue
                if sock.recv(4096):  # a "100 Continue", or a 408 before the close
                    continue
            except BlockingIOError:
                continue
            except OSError:
                pass
            selector.unregister(sock)
            sock.close()
            reopened += 1
            open_one()
        if time.monotonic() - reported > 0.1:
            print(reopened, flush=True)
            reported = time.monotonic()


class Hog:
    """``hog`` in a child process while the block runs; ``reopened``: the sockets the server
    closed so far."""

    def __init__(self, host: str, port: int, count: int, request: bytes = b"") -> None:
        self.args = [host, str(port), str(count), request.hex()]
        self.reopened = 0
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.reopened = int(line)

    def __enter__(self) -> Hog:
        code = (
            "import sys; from tests.connection_hog import hog; "
            "hog(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), bytes.fromhex(sys.argv[4]))"
        )
        self._process = subprocess.Popen(
            [sys.executable, "-c", code, *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self._reader = threading.Thread(target=self._read, args=(self._process,), daemon=True)
        self._reader.start()
        return self

    def __exit__(self, *_: object) -> None:
        process = self._process
        if process is None:
            return
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
