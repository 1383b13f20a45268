"""A short-lived cache of the dashboard's page computations (issue 16).

It lives beside ``api.context`` (which builds one per app), not in ``api.dashboard``: the JSON
routes, which reach the context, stay independent of the dashboard.

A page over 30 days costs tens to hundreds of milliseconds of queries even when its sketches
are cached (``storage.sketch_cache``); a dashboard left open on a wall auto-refreshes, several
people look at the same overview, and a browser's back button asks again. For
``dashboard_answer_ttl_s`` seconds (5 by default; 0 turns the cache off) the same page with the
same query string answers the view-model computed the first time.

The key is the page, its query string (range or start/end, filters, chart options) and the
app clock's time rounded down to the TTL: a relative range ("last 30 days") computed at
12:00:03 serves until 12:00:05 by the clock, and an entry also expires ``ttl_s`` seconds after
it was computed by the monotonic clock, so no answer is ever older than the TTL — even under a
clock that stands still (tests) or jumps. Concurrent requests for a missing key compute it
once: the later ones wait for the first. At most ``max_entries`` answers are kept (the oldest
go first), and expired ones are dropped as new ones come: memory holds the last TTL's pages.

Computations take turns (issue 35, item 4): at most ``concurrency`` answers are computed at
once (``INFERSIGHT_ANSWER_CONCURRENCY``), the others wait in the order they came
(``TurnGate``), whether the cache is on or off (a kept answer does not wait). An answer's
computation is Python holding the GIL between the store's queries; sixteen at once share one
core, so each takes sixteen times its own time and the heaviest page (a 70 ms Baselines view)
took over a second. Taking turns, an answer waits for the ones ahead of it and then runs at its
own speed: the throughput is the same and the heaviest page no longer pays the most for the
crowd. Two at once keep one answer in Python while another waits on the store. The wait for a
turn, with the wait for the same key's computation before it, lasts at most ``turn_timeout_s``
(the store's pool timeout: waiting for a turn stands in for waiting for a pooled connection),
then the answer is a 503 ``unavailable`` with ``details.reason`` ``busy``: behind a stuck
store the line does not grow without bound. Threads waiting their turn still occupy the
server's thread pool (40 threads), as threads waiting on the store did before.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from infersight.core.errors import Unavailable

DEFAULT_MAX_ENTRIES: Final = 256

Key = tuple[Any, ...]

#: Every cache made, so tests can empty them all between cases (``clear_all``).
_ALL: weakref.WeakSet[AnswerCache] = weakref.WeakSet()


@dataclass
class AnswerStats:
    hits: int = 0
    misses: int = 0
    waited: int = 0
    """Computations that waited for their turn (``TurnGate``)."""


class Busy(Unavailable):
    """An answer waited longer than its bound for a turn to be computed."""

    def __init__(self, waited_s: float) -> None:
        super().__init__(
            f"the server is computing as many answers as it may and this one waited "
            f"{waited_s:.1f} s for its turn; retry later",
            details={"reason": "busy", "waited_s": round(waited_s, 3)},
        )


class TurnGate:
    """At most ``slots`` holders at once; the others wait their turn in arrival order.

    ``threading.Semaphore`` lets a newcomer take a freed slot before a thread that has waited
    (whichever the scheduler runs first), so under a steady crowd one request can wait many
    turns. Here a leaving holder hands its slot to the longest waiter directly.
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError("a turn gate needs at least one slot")
        self.slots = slots
        self._lock = threading.Lock()
        self._free = slots
        self._waiting: deque[threading.Lock] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def acquire(self, timeout_s: float | None = None) -> bool:
        """Take a slot, waiting in line for one if none is free; whether it waited. A wait
        longer than ``timeout_s`` (``None``: no bound) raises ``Busy`` and leaves the line."""
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                return False
            mine = threading.Lock()
            mine.acquire()
            self._waiting.append(mine)
        started = time.monotonic()
        # Released by the holder that hands its slot to this thread.
        if not mine.acquire(timeout=-1 if timeout_s is None else timeout_s):
            with self._lock:
                still_waiting = mine in self._waiting
                if still_waiting:
                    self._waiting.remove(mine)
            if still_waiting:
                raise Busy(time.monotonic() - started)
            mine.acquire()  # handed the slot as the wait ran out: it is this thread's
        return True

    def release(self) -> None:
        """Give a slot back: to the longest waiter, else to the free ones."""
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()
            else:
                self._free += 1

    @contextmanager
    def turn(self, timeout_s: float | None = None) -> Iterator[bool]:
        """A slot held for the ``with`` block (``acquire``); yields whether it waited."""
        waited = self.acquire(timeout_s)
        try:
            yield waited
        finally:
            self.release()


@dataclass(slots=True)
class _SameKey:
    """The computation of one key: its lock and the threads holding or waiting for it."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0


@dataclass
class _Entry:
    value: Any
    expires: float


class AnswerCache:
    """Answers by key for ``ttl_s`` seconds; thread-safe, bounded."""

    def __init__(
        self,
        ttl_s: float,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        monotonic: Callable[[], float] = time.monotonic,
        concurrency: int = 0,
        turn_timeout_s: float | None = None,
    ) -> None:
        """``concurrency``: answers computed at once, the others wait their turn (0: no
        limit), each at most ``turn_timeout_s`` (``None``: no bound)."""
        if ttl_s < 0 or not math.isfinite(ttl_s):
            raise ValueError("the answer cache's TTL must be a finite number of seconds ≥ 0")
        if max_entries < 1:
            raise ValueError("the answer cache needs room for at least one answer")
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.monotonic = monotonic
        self.stats = AnswerStats()
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Key, _SameKey] = {}
        if concurrency < 0:
            raise ValueError("answers computed at once must be 0 (no limit) or more")
        self.gate = TurnGate(concurrency) if concurrency else None
        self.turn_timeout_s = turn_timeout_s
        _ALL.add(self)

    @property
    def enabled(self) -> bool:
        return self.ttl_s > 0

    def __len__(self) -> int:
        return len(self._entries)

    def key(self, page: str, query: Mapping[str, str], now: datetime) -> Key:
        """The key of ``page`` asked with ``query`` at ``now`` (the app's clock)."""
        slot = math.floor(now.timestamp() / self.ttl_s) if self.enabled else 0
        return (page, tuple(sorted(query.items())), slot)

    def _fresh(self, key: Key) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and self.monotonic() >= entry.expires:
            del self._entries[key]
            return None
        return entry

    def get_or_compute(self, key: Key, compute: Callable[[], Any]) -> Any:
        """The answer kept for ``key``, else ``compute()`` (kept; an exception is not). The
        wait for the key's computation and for a turn together last at most
        ``turn_timeout_s`` (then ``Busy``)."""
        started = time.monotonic()
        if not self.enabled:
            return self._computed(compute, started)
        with self._lock:
            entry = self._fresh(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.stats.hits += 1
                return entry.value
            # One computation per key; the others wait and take its answer. The key's lock
            # stays while anyone holds or waits for it, so a newcomer never starts a second.
            same = self._computing.get(key)
            if same is None:
                same = self._computing[key] = _SameKey()
            same.users += 1
        try:
            if not same.lock.acquire(timeout=self._left(started)):
                raise Busy(time.monotonic() - started)
            try:
                with self._lock:
                    entry = self._fresh(key)
                    if entry is not None:
                        self.stats.hits += 1
                        return entry.value
                    self.stats.misses += 1
                value = self._computed(compute, started)
                with self._lock:
                    self._keep(key, value)
                return value
            finally:
                same.lock.release()
        finally:
            with self._lock:
                same.users -= 1
                if not same.users:
                    del self._computing[key]

    def _left(self, started: float) -> float:
        """Seconds left to wait of ``turn_timeout_s`` since ``started`` (-1: no bound)."""
        if self.turn_timeout_s is None:
            return -1
        return max(0.0, self.turn_timeout_s - (time.monotonic() - started))

    def _computed(self, compute: Callable[[], Any], started: float) -> Any:
        """``compute()`` in its turn, waited for within what is left since ``started``."""
        if self.gate is None:
            return compute()
        left = self._left(started)
        try:
            waited = self.gate.acquire(None if left < 0 else left)
        except Busy:  # the whole wait, the key's included
            raise Busy(time.monotonic() - started) from None
        try:
            if waited:
                with self._lock:
                    self.stats.waited += 1
            return compute()
        finally:
            self.gate.release()

    def _keep(self, key: Key, value: Any) -> None:
        """Keep ``value`` (under the lock). Expired answers go as soon as a new one comes
        (oldest first), so what is kept is the last TTL's pages, never over ``max_entries``."""
        now = self.monotonic()
        self._entries[key] = _Entry(value, now + self.ttl_s)
        self._entries.move_to_end(key)
        while self._entries:
            oldest = next(iter(self._entries.values()))
            if len(self._entries) <= self.max_entries and oldest.expires > now:
                break
            self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def clear_all() -> None:
    """Empty every answer cache of this process (the tests' fixture calls it per test)."""
    for cache in list(_ALL):
        cache.clear()
