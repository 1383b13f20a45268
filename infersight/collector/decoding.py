"""Decoding OTLP bodies in child processes, so that the receivers never wait on it.

Inflating, parsing (upb, orjson) and mapping a large export is CPU work that holds the GIL,
much of it in single C calls of tens of milliseconds; in the receiver's process that made
``/healthz`` wait hundreds of milliseconds behind a large or hostile export. It also left
the heap fragmented after every large one (the sidecar stayed 60 MB above idle after one
10,000-span export). Here each decode slot owns one child process (``python -m
collector.decoding``) that does all of it: the body goes down a pipe, the spool entries and
tallies (``collector.ingest.Prepared``) come back, and the receiver's process only reads
bodies, appends entries and answers. Work in a child is bounded like before (the limits, one
core per slot), and its memory is bounded as well: after an export that left it more than
``TRIM_SLACK_BYTES`` above its size after its first export it hands its free heap back to
the OS, and a child more than ``retire_growth_bytes`` above its size at start retires
(exits) and is replaced. Between those, an export's heap and buffers (up to
``MMAP_THRESHOLD_BYTES`` each) are reused by the next export instead of being mapped, faulted
in and given back each time: with 128 KiB mmap and trim thresholds and a trim after every
export, that cost a thousand page faults per 500-span export, a seventh of the child's CPU,
all of it in the kernel.

The pipes carry pickles, between the receiver and children it started itself; bodies travel
as raw bytes and are parsed only by the decoders.

A child that dies mid-export (killed, out of memory) costs that export a 503 / UNAVAILABLE
(``DecoderFailed``, so the client retries) and is replaced; nothing acknowledged is lost.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import math
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Final

from infersight.collector.assembly import Reassembly
from infersight.collector.body import UnsupportedEncoding
from infersight.collector.ingest import Prepared, prepare_body
from infersight.collector.mapping import MappingContext
from infersight.collector.otlp import Limits
from infersight.core.accept import AcceptWindow
from infersight.core.errors import InfersightError, InvalidInput, TooLarge, Unavailable
from infersight.core.records import Role

log = logging.getLogger(__name__)

_FRAME: Final = struct.Struct("<Q")
#: Errors a child may report, by name (anything else is a failure of the child).
_ERRORS: Final[dict[str, type[InfersightError]]] = {
    cls.__name__: cls for cls in (UnsupportedEncoding, TooLarge, InvalidInput)
}
#: Seconds one export may take in a child before the child is killed (a bounded decode
#: takes a few seconds at worst on a loaded machine).
JOB_TIMEOUT_S: Final = 120.0
#: Pipe capacity asked for (Linux): fewer wake-ups to move a large body.
_PIPE_BYTES: Final = 1 << 20
_F_SETPIPE_SZ: Final = 1031


class DecoderFailed(Unavailable):
    """The decoder process died or hung during an export (503 / UNAVAILABLE: retry)."""


@dataclass(frozen=True, slots=True)
class Setup:
    """What a child needs to decode and map exports like the receiver's own ingestor."""

    limits: Limits
    context: MappingContext
    accept: AcceptWindow | None
    reassembly: Reassembly
    retire_growth_bytes: int


def _write_frame(out: IO[bytes], payload: bytes | bytearray | memoryview) -> None:
    out.write(_FRAME.pack(len(payload)))
    view = memoryview(payload)
    while view:
        written = out.write(view)  # unbuffered: may be partial; the GIL is released meanwhile
        view = view[written or 0 :]


def _read_exact(source: IO[bytes], size: int) -> bytearray:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        count = source.readinto(view[got:])  # type: ignore[attr-defined]
        if not count:
            raise EOFError
        got += count
    return buffer


def _read_frame(source: IO[bytes]) -> bytearray:
    (size,) = _FRAME.unpack(_read_exact(source, _FRAME.size))
    return _read_exact(source, size)


def _portable(context: MappingContext) -> MappingContext:
    """The context without its callables (evaluated per export in the receiver's process)."""
    return MappingContext(
        context.instance,
        context.model,
        dict(context.service_models),
        role=context.role,
        adapters=context.adapters,
    )


class _Watchdog:
    """Runs an action (killing a child) once a deadline passes unless disarmed first: one
    thread for a child's life instead of a ``threading.Timer`` (a thread started and stopped)
    per export. Arming wakes the thread only when it would otherwise wake too late."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._action: Callable[[], object] | None = None
        self._wakes_at = math.inf
        self._stop: threading.Event | None = None

    def arm(self, seconds: float, action: Callable[[], object]) -> None:
        with self._cond:
            self._deadline, self._action = time.monotonic() + seconds, action
            if self._stop is None:
                self._stop = threading.Event()
                self._wakes_at = self._deadline
                threading.Thread(
                    target=self._run, args=(self._stop,), name="otlp-decoder-watchdog", daemon=True
                ).start()
            elif self._deadline < self._wakes_at:
                self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = self._action = None

    def close(self) -> None:
        with self._cond:
            if self._stop is not None:
                self._stop.set()
                self._stop = None
            self._deadline = self._action = None
            self._cond.notify_all()

    def _run(self, stop: threading.Event) -> None:
        with self._cond:
            while not stop.is_set():
                deadline = self._deadline
                if deadline is None:
                    self._wakes_at = math.inf
                    self._cond.wait()
                    continue
                left = deadline - time.monotonic()
                if left > 0:
                    self._wakes_at = deadline
                    self._cond.wait(left)
                    continue
                action, self._deadline, self._action = self._action, None, None
                if action is not None:
                    action()


class _Child:
    """One decoder process and the pipes to it; used by one slot thread at a time."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.watchdog = _Watchdog()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                return
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
            proc = subprocess.Popen(
                [sys.executable, "-m", "infersight.collector.decoding"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                env=env,
                cwd=Path(__file__).resolve().parents[2],
                # Its own process group: a terminal's Ctrl-C (SIGINT to the foreground group)
                # reaches the receiver alone, which stops its children by closing their pipes.
                process_group=0,
            )
            assert proc.stdin is not None
            assert proc.stdout is not None
            for pipe in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    import fcntl  # noqa: PLC0415 (Linux only; the default size works too)

                    fcntl.fcntl(pipe.fileno(), _F_SETPIPE_SZ, _PIPE_BYTES)
            try:
                _write_frame(proc.stdin, pickle.dumps(self.setup))
                if _read_frame(proc.stdout) != b"ready":
                    raise EOFError
            except Exception:
                log.warning("the decoder process did not start", exc_info=True)
                proc.kill()
                proc.wait()
                for pipe in (proc.stdin, proc.stdout):
                    pipe.close()
                raise DecoderFailed(
                    "the decoder process did not start", details={"reason": "decoder_failed"}
                ) from None
            self.proc = proc

    def run(self, raw: bytes | bytearray, encoding: str, media: str, now: float,
            model: str, adapters: frozenset[str] = frozenset(), role: Role | None = None,
            reassembly: Reassembly | None = None) -> Prepared:  # fmt: skip
        self.start()
        with self.lock:
            proc = self.proc
            assert proc is not None
            assert proc.stdin is not None
            assert proc.stdout is not None
            self.watchdog.arm(JOB_TIMEOUT_S, proc.kill)
            try:
                header = (encoding, media, now, model, adapters, role, reassembly)
                _write_frame(proc.stdin, pickle.dumps(header))
                _write_frame(proc.stdin, raw)
                answer = pickle.loads(_read_frame(proc.stdout))  # noqa: S301 (our own child)
            except (OSError, EOFError):
                self._reap()
                raise DecoderFailed(
                    "the decoder process stopped during the export, retry",
                    details={"reason": "decoder_failed"},
                ) from None
            finally:
                self.watchdog.disarm()
            status, result, retiring = answer
            if retiring:
                self._reap()
        if status == "ok":
            prepared: Prepared = result
            return prepared
        name, message, details = result
        raise _ERRORS.get(name, InvalidInput)(message, details=details)

    def _reap(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def stop(self) -> None:
        with self.lock:
            self._reap()  # stdin closed: the child exits at once
            self.watchdog.close()


class DecoderPool:
    """``workers`` decoder processes; ``run`` takes a free one (the decode slots, one
    thread each, never outnumber them)."""

    def __init__(
        self,
        limits: Limits,
        context: MappingContext,
        accept: AcceptWindow | None,
        reassembly: Reassembly,
        workers: int = 1,
        retire_growth_bytes: int = 64 << 20,
    ) -> None:
        setup = Setup(limits, _portable(context), accept, reassembly, retire_growth_bytes)
        self._children = [_Child(setup) for _ in range(workers)]
        self._free: queue.SimpleQueue[_Child] = queue.SimpleQueue()
        for child in self._children:
            self._free.put(child)

    @property
    def pids(self) -> list[int]:
        return [pid for child in self._children if (pid := child.pid) is not None]

    def start(self) -> DecoderPool:
        """Start the children in the background (the first export waits for its own)."""

        def start_all() -> None:
            for child in self._children:
                with contextlib.suppress(DecoderFailed):
                    child.start()

        threading.Thread(target=start_all, name="otlp-decoder-start", daemon=True).start()
        return self

    def run(
        self, raw: bytes | bytearray, encoding: str, media: str, now: float,
        context: MappingContext, reassembly: Reassembly | None = None,
    ) -> Prepared:  # fmt: skip
        child = self._free.get()
        try:
            return child.run(
                raw, encoding, media, now, context.scraped_model(), context.scraped_adapters(),
                context.role, reassembly,
            )  # fmt: skip
        finally:
            self._free.put(child)

    def close(self) -> None:
        for child in self._children:
            child.stop()


# --- the child ------------------------------------------------------------------------------

_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8
#: Allocations from this size on are mapped on their own (and unmapped when freed): the body
#: and buffers of an export of a few thousand spans are below it, reused from the heap.
MMAP_THRESHOLD_BYTES: Final = 4 << 20
#: Bytes a child may hold above its size after its first export before it trims its heap.
TRIM_SLACK_BYTES: Final = 8 << 20


def _libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_PAGE_BYTES: Final = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as statm:  # size resident shared …, in pages
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def _constant(model: str) -> Callable[[], str]:
    return lambda: model


def _constant_set(names: frozenset[str]) -> Callable[[], frozenset[str]]:
    return lambda: names


def _serve(source: IO[bytes], out: IO[bytes]) -> None:
    libc = _libc()
    with contextlib.suppress(AttributeError):
        libc.mallopt(_M_ARENA_MAX, 1)  # one thread: one arena
        # The heap's top is given back past the slack only (and by the trim below), not
        # after every export: shrinking it and growing it again cost a few hundred page
        # faults per export.
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_SLACK_BYTES)
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    setup: Setup = pickle.loads(_read_frame(source))  # noqa: S301 (our own parent)
    started_rss = _rss_bytes()
    settled_rss: int | None = None
    _write_frame(out, b"ready")
    while True:
        try:
            header = _read_frame(source)
        except EOFError:
            return  # the receiver closed the pipe (or died): nothing is left to do
        encoding, media, now, model, adapters, role, reassembly = pickle.loads(header)  # noqa: S301
        raw = _read_frame(source)
        # The role and window are the receiver's at this export (``collector.roles``).
        context = replace(
            setup.context, scraped_model=_constant(model), scraped_adapters=_constant_set(adapters),
            role=setup.context.role if role is None else role,
        )  # fmt: skip
        try:
            result: Any = prepare_body(
                raw, encoding, media, setup.limits, context, now, setup.accept,
                reassembly or setup.reassembly,
            )  # fmt: skip
            del raw
            status = "ok"
        except InfersightError as exc:
            status, result = "error", (type(exc).__name__, exc.message, exc.details)
            del exc
        rss = _rss_bytes()
        if settled_rss is None or rss - settled_rss > TRIM_SLACK_BYTES:
            with contextlib.suppress(AttributeError):
                libc.malloc_trim(0)
            rss = _rss_bytes()
            # The first export's size, trimmed, is the reference: it imported and cached
            # what every export needs (mapping modules, descriptors) for the child's life.
            settled_rss = rss if settled_rss is None else settled_rss
        retiring = rss - started_rss > setup.retire_growth_bytes
        _write_frame(out, pickle.dumps((status, result, retiring), pickle.HIGHEST_PROTOCOL))
        del result
        if retiring:
            return


def main() -> None:
    # Stopped by its parent only (stdin closed): an interrupt is not for a decoder.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The protocol has stdout to itself: anything printed goes to stderr instead.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    source = os.fdopen(os.dup(0), "rb", buffering=0)
    _serve(source, out)


if __name__ == "__main__":
    main()
