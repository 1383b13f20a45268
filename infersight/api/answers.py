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
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

DEFAULT_MAX_ENTRIES: Final = 256

Key = tuple[Any, ...]

#: Every cache made, so tests can empty them all between cases (``clear_all``).
_ALL: weakref.WeakSet[AnswerCache] = weakref.WeakSet()


@dataclass
class AnswerStats:
    hits: int = 0
    misses: int = 0


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
    ) -> None:
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
        self._computing: dict[Key, threading.Lock] = {}
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
        """The answer kept for ``key``, else ``compute()`` (kept; an exception is not)."""
        if not self.enabled:
            return compute()
        with self._lock:
            entry = self._fresh(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self.stats.hits += 1
                return entry.value
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:  # one computation per key; the others wait and take its answer
            with self._lock:
                entry = self._fresh(key)
                if entry is not None:
                    self.stats.hits += 1
                    return entry.value
                self.stats.misses += 1
            try:
                value = compute()
                with self._lock:
                    self._keep(key, value)
            finally:
                with self._lock:
                    self._computing.pop(key, None)
            return value

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
