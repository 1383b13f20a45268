"""Answers the dashboard derives from whole hours that have ended, kept while fresh.

The purchasing advice of a week or a month is computed from the hour rollups of whole past
hours: a page range ending now covers the same whole hours until the next hour begins, and
those hours change only by late data (a spool's backlog, within the accept window). Before,
every view of the Cost or Scaling page over 30 days read 30 days of GPU hours and priced a
month of requests; now one view computes the advice and the views after it reuse it while
it is younger than the money job's reuse age (``Jobs.reuse_age``: the freshness the pages
already show the money job's judgements at), saying when it was judged.

One computation per key runs at a time: views that ask meanwhile wait for it instead of
computing the same hours again (sixteen clients opening the page at once compute it once).
Bounded: at most ``max_entries`` keys, least recently used first out. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from datetime import datetime, timedelta
from typing import Any, Final, TypeVar

T = TypeVar("T")

DEFAULT_MAX_ENTRIES: Final = 64
_MISSING: Final = object()


class HourlyMemo:
    """Answers by key with the time each was computed (``get``)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[Any, datetime]] = OrderedDict()
        self._flights: dict[Hashable, threading.Lock] = {}
        self._lock = threading.Lock()
        #: How many answers were reused and how many computed (``/metrics`` may show them).
        self.hits = 0
        self.misses = 0

    def _fresh(self, key: Hashable, now: datetime, max_age: timedelta) -> tuple[Any, datetime]:
        with self._lock:
            found = self._entries.get(key)
            if found is not None and timedelta(0) <= now - found[1] < max_age:
                self._entries.move_to_end(key)
                self.hits += 1
                return found
        return _MISSING, now

    def get(
        self,
        key: Hashable,
        now: datetime,
        max_age: timedelta,
        compute: Callable[[], T],
        *,
        keep: Callable[[T], bool] = lambda _value: True,
    ) -> tuple[T, datetime]:
        """The answer for ``key`` computed less than ``max_age`` before ``now`` and the time it
        was computed, else ``compute()``'s, kept unless ``keep`` says no (an answer that
        depends on more than whole past hours)."""
        value, at = self._fresh(key, now, max_age)
        if value is not _MISSING:
            return value, at
        with self._lock:
            flight = self._flights.setdefault(key, threading.Lock())
        with flight:
            value, at = self._fresh(key, now, max_age)  # computed while this view waited
            if value is not _MISSING:
                return value, at
            computed = compute()
            with self._lock:
                self.misses += 1
                if keep(computed):
                    self._entries[key] = (computed, now)
                    self._entries.move_to_end(key)
                    while len(self._entries) > self.max_entries:
                        old, _ = self._entries.popitem(last=False)
                        self._flights.pop(old, None)
                else:
                    self._flights.pop(key, None)
            return computed, now
