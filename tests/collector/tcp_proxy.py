"""A TCP forwarder the tests can cut and restore: a real network outage between the sidecar
and PostgreSQL without stopping the shared server."""

from __future__ import annotations

import contextlib
import select
import socket
import threading


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self._up = threading.Event()

    def start(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(0.1)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._up.set()
        thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def _accept(self, listener: socket.socket) -> None:
        while self._up.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            pump = threading.Thread(target=self._pump, args=(client, upstream), daemon=True)
            pump.start()
            self._threads.append(pump)
        listener.close()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while self._up.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.1)
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            for sock in (a, b):
                with contextlib.suppress(OSError):
                    sock.close()

    def cut(self) -> None:
        """Refuse new connections and break the open ones."""
        self._up.clear()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
        with self._lock:
            for sock in self._conns:
                with contextlib.suppress(OSError):
                    sock.close()
            self._conns.clear()

    def restore(self) -> None:
        self.start()
