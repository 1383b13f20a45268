"""The progress bar: elapsed time against the plan, the phase, requests done and failed.

On a terminal the bar redraws in place (at most ``fps`` times a second); elsewhere (CI logs)
it prints a line every ``log_every_s`` seconds instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TextIO


class Progress(Protocol):
    def update(self, elapsed_s: float, phase: str, done: int, errors: int) -> None: ...

    def close(self) -> None: ...


class NoProgress:
    def update(self, elapsed_s: float, phase: str, done: int, errors: int) -> None:
        pass

    def close(self) -> None:
        pass


class TextProgress:
    def __init__(
        self,
        stream: TextIO,
        total_s: float,
        *,
        width: int = 30,
        fps: float = 5.0,
        log_every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream, self._total, self._width = stream, max(total_s, 1e-9), width
        self._tty = stream.isatty()
        self._every = 1 / fps if self._tty else log_every_s
        self._clock = clock
        self._last = -float("inf")
        self._line = ""

    def update(self, elapsed_s: float, phase: str, done: int, errors: int) -> None:
        now = self._clock()
        if now - self._last < self._every:
            return
        self._last = now
        share = min(1.0, max(0.0, elapsed_s / self._total))
        filled = round(share * self._width)
        self._line = (
            f"[{'#' * filled}{'.' * (self._width - filled)}] {share:4.0%} "
            f"{elapsed_s:6.1f}/{self._total:.0f} s  {phase}  done {done}  errors {errors}"
        )
        if self._tty:
            self._stream.write("\r" + self._line)
        else:
            self._stream.write(self._line + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._tty and self._line:
            self._stream.write("\n")
            self._stream.flush()
