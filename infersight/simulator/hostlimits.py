"""Real host-side limits for the real-time simulator: CPU, the GIL and I/O, not labels.

The simulated engine's model runs on the event loop of a real Python process
(``simulator.realtime``); these limits make that process do what a real serving process
does when its host is the bottleneck, so that a profiler finds it there:

* ``tokenizer`` — every request's prompt is encoded by ``simulator.tokenizer.encode`` on the
  serving thread, in pure Python, with a cost proportional to the prompt's length;
* ``gil`` — ``gil_threads`` background Python threads run CPU-bound loops all the time and
  compete with the serving thread for the GIL;
* ``logging`` — a logger writes a line for every request and every token it streams through a
  handler that flushes and ``fsync``\\ s the file after each record, synchronously, on the
  serving thread.

None of them changes the simulated engine's timings: they slow the real process, so its
requests' latencies (measured by clients and in its spans) carry the real cost.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.simulator import tokenizer


class HostLimit(StrEnum):
    TOKENIZER = "tokenizer"
    GIL = "gil"
    LOGGING = "logging"


#: The logger of the ``logging`` limit (it does not propagate to the root's handlers).
REQUEST_LOG: Final = "infersight.simulator.requestlog"


class SyncFileHandler(logging.FileHandler):
    """A file handler that flushes and fsyncs after every record (what makes logging a
    synchronous I/O on the serving path)."""

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if self.stream is not None:
            self.stream.flush()
            os.fsync(self.stream.fileno())


def _spin(stop: threading.Event) -> None:
    """CPU-bound Python work, holding the GIL between the interpreter's switches."""
    while not stop.is_set():
        total = 0
        for i in range(20_000):
            total += i * i % 7


class HostLimits:
    """The limits of one simulated server; ``start`` / ``stop`` bracket its serving."""

    def __init__(
        self,
        limits: Iterable[HostLimit | str],
        *,
        tokenizer_repeat: int = 3,
        gil_threads: int = 3,
        log_path: Path | None = None,
    ) -> None:
        try:
            self.limits = frozenset(HostLimit(x) for x in limits)
        except ValueError as exc:
            choices = ", ".join(k.value for k in HostLimit)
            raise InvalidInput(f"unknown host limit: {exc} (one of {choices})") from None
        if not 1 <= tokenizer_repeat <= 1000 or not 1 <= gil_threads <= 32:
            raise InvalidInput("tokenizer_repeat must be 1 … 1000 and gil_threads 1 … 32")
        self.tokenizer_repeat = tokenizer_repeat
        self.gil_threads = gil_threads
        self.log_path = log_path
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._handler: SyncFileHandler | None = None
        self._log = logging.getLogger(REQUEST_LOG)

    def __bool__(self) -> bool:
        return bool(self.limits)

    def start(self) -> None:
        self._stop.clear()
        if HostLimit.GIL in self.limits:
            for i in range(self.gil_threads):
                thread = threading.Thread(
                    target=_spin, args=(self._stop,), name=f"host-limit-gil-{i}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        if HostLimit.LOGGING in self.limits:
            path = self.log_path
            if path is None:
                fd, name = tempfile.mkstemp(prefix="infersight-sim-requests-", suffix=".log")
                os.close(fd)
                path = self.log_path = Path(name)
            self._handler = SyncFileHandler(path, encoding="utf-8")
            self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            self._log.addHandler(self._handler)
            self._log.setLevel(logging.INFO)
            self._log.propagate = False

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
        if self._handler is not None:
            self._log.removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    def on_request(self, request_id: str, prompt: str) -> None:
        """Called on the serving thread when a request arrives."""
        if HostLimit.TOKENIZER in self.limits:
            tokenizer.encode(prompt, self.tokenizer_repeat)
        if self._handler is not None:
            self._log.info("request %s: %d prompt characters", request_id, len(prompt))

    def on_token(self, request_id: str, index: int) -> None:
        """Called on the serving thread for each token streamed."""
        if self._handler is not None:
            self._log.info("request %s: token %d sent", request_id, index)
