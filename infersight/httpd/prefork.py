"""Pre-fork workers: one listening socket served by N processes (``infersight serve --workers``).

The parent binds the socket (``listen_socket``), then forks the workers (``run_workers``)
before it has started a thread or connected to anything. Each worker builds its own app and
store engine after the fork (a connection pool must never cross a fork) and serves the
inherited socket; the kernel hands each new connection to one of the workers accepting it.

The parent only supervises:

* **SIGTERM, SIGINT (Ctrl-C) or SIGHUP**: forwarded once to every worker as SIGTERM, on which
  each shuts down gracefully (requests in flight finish, its jobs stop). A worker still running
  ``grace_s`` later is killed. The workers are in a process group of their own, so a terminal's
  Ctrl-C reaches only the parent, which forwards it once. Exit status 0 (1 if one was killed).
* **a worker that exits unasked** (a crash, a kill, a failed start) is reported on standard
  error — its number, pid and exit status or signal — and the others are stopped: the parent
  exits 1, for its service manager (systemd's ``Restart=``, Kubernetes) to start it again.
  Workers are not restarted in place: one that fails at start would only fail again.
* a worker whose parent has gone (killed with SIGKILL) stops itself within a second.

``ProcessLock`` is a lock among the workers of one parent (a POSIX record lock on a file the
parent opened: released by the kernel if its holder dies), for start-up work that must not
run in two workers at once, such as the store's migrations.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Final, TextIO

#: What stops the workers.
STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_WATCHED: Final = {signal.SIGCHLD, *STOP_SIGNALS}
#: How often a worker checks that its parent is still there, s.
_PARENT_CHECK_S: Final = 1.0
#: Seconds a stopping worker has before it is killed.
DEFAULT_GRACE_S: Final = 30.0


class Worker:
    """Who a worker process is (``index`` 1..``count``), and how it is asked to stop."""

    def __init__(self, index: int, count: int) -> None:
        self.index = index
        self.count = count
        self._stopping = threading.Event()
        self._on_stop: list[Callable[[], object]] = []

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def on_stop(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (from a signal handler: keep it to setting a flag) when asked to
        stop; at once if that has already happened."""
        self._on_stop.append(callback)
        if self.stopping:
            callback()

    def stop(self) -> None:
        self._stopping.set()
        for callback in self._on_stop:
            callback()


def listen_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket listening on ``host:port`` (``::1``-style hosts: IPv6) for the workers."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it (Linux): small responses are not held back by Nagle
        # waiting for the client's delayed ACK (a 40 ms stall per keep-alive request).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


class ProcessLock:
    """A lock among processes forked after it was made; the kernel releases a dead holder's."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 (kept open for the lock's life)
        self._threads = threading.Lock()  # record locks are per process, not per thread

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._threads:
            fcntl.lockf(self._file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.lockf(self._file.fileno(), fcntl.LOCK_UN)

    def close(self) -> None:
        self._file.close()


def describe(status: int) -> str:
    """A ``waitpid`` status in words."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = str(number)
        return f"was killed by {name}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"


def run_workers(
    count: int,
    serve: Callable[[Worker], int],
    *,
    grace_s: float = DEFAULT_GRACE_S,
    log: TextIO | None = None,
    on_started: Callable[[dict[int, int]], object] = lambda _pids: None,
) -> int:
    """Fork ``count`` workers, each running ``serve(worker)`` (its exit status), and supervise
    them until they have all stopped (the module's doc); the parent's exit status.
    ``on_started`` receives the workers' pids by index."""
    if count < 1:
        raise ValueError("at least one worker")
    out = log or sys.stderr
    if threading.active_count() > 1:  # a thread's locks would be copied mid-use into the workers
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        raise RuntimeError(f"workers must be forked before any thread starts (running: {names})")
    for stream in (sys.stdout, sys.stderr):  # or the workers would write it again
        stream.flush()
    parent = os.getpid()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)
    children: dict[int, Worker] = {}
    try:
        for index in range(1, count + 1):
            worker = Worker(index, count)
            pid = os.fork()
            if pid == 0:  # pragma: no cover (the child; it never returns)
                _child(worker, serve, old_mask, parent)
            children[pid] = worker
        on_started({w.index: pid for pid, w in children.items()})
        return _supervise(children, grace_s, out)
    except BaseException:
        for pid in children:
            _kill(pid, signal.SIGKILL)
        raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _child(
    worker: Worker, serve: Callable[[Worker], int], mask: set[int | signal.Signals], parent: int
) -> None:  # pragma: no cover (runs in the forked child)
    code = 1
    try:
        os.setpgid(0, 0)  # a terminal's Ctrl-C goes to the parent, which forwards it once
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _sig, _frame: worker.stop())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        threading.Thread(
            target=_watch_parent, args=(parent,), name="parent-watch", daemon=True
        ).start()
        code = serve(worker)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def _watch_parent(parent: int) -> None:  # pragma: no cover (in the child)
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)  # orphaned: stop as if asked to


def _kill(pid: int, sig: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reaped(children: dict[int, Worker]) -> Iterator[tuple[int, int]]:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            yield pid, status


def _supervise(children: dict[int, Worker], grace_s: float, out: TextIO) -> int:
    code = 0
    stopping = False
    deadline: float | None = None

    def say(text: str) -> None:
        print(f"infersight serve: {text}", file=out, flush=True)

    def stop_all() -> None:
        nonlocal stopping, deadline
        stopping = True
        deadline = time.monotonic() + grace_s
        for pid in children:
            _kill(pid, signal.SIGTERM)

    while children:
        if deadline is None:
            sig: int | None = signal.sigwait(_WATCHED)
        else:
            info = signal.sigtimedwait(_WATCHED, max(0.0, deadline - time.monotonic()))
            sig = info.si_signo if info is not None else None
        if sig is None:  # the grace period is over
            for pid, worker in children.items():
                say(f"worker {worker.index} (pid {pid}) did not stop in {grace_s:g} s; killed")
                _kill(pid, signal.SIGKILL)
            code, deadline = 1, None
            continue
        if sig in STOP_SIGNALS:
            if not stopping:
                say(f"{signal.Signals(sig).name}: stopping {len(children)} workers")
                stop_all()
            continue
        for pid, status in list(_reaped(children)):
            worker = children.pop(pid)
            if not stopping:
                say(f"worker {worker.index} (pid {pid}) {describe(status)}; stopping the others")
                code = 1
                stop_all()
            elif status != 0:
                say(f"worker {worker.index} (pid {pid}) {describe(status)} while stopping")
                code = 1
    return code
