"""The time window inside which a record's timestamp is plausible enough to be stored.

A client's clock decides a span's start, and every day a timestamp names becomes a daily
partition on PostgreSQL: accepting any start from 2000 to 2199 let a handful of exports create
thousands of partitions. The sidecar refuses spans outside this window (per span, through
``partial_success``) and the store writer refuses records outside it again, so no client
clock, and no replay of an old spool, can grow the store's catalog without bound.

- the past: as far back as raw rows are kept (``INFERSIGHT_RAW_RETENTION_DAYS``): an older
  record would be dropped by the next retention run anyway;
- the future: a small clock skew (``INFERSIGHT_MAX_FUTURE_SKEW_S``, 5 minutes by default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from infersight.core.errors import ConfigurationError

#: The largest future skew a window may allow: one day, so that at most one partition ahead
#: of today's can ever receive rows.
MAX_FUTURE_SKEW_S: Final = 86_400.0
TOO_OLD: Final = "start_too_old"
IN_FUTURE: Final = "start_in_future"


@dataclass(frozen=True, slots=True)
class AcceptWindow:
    """Starts in ``[now − past_s, now + future_s]`` are accepted."""

    past_s: float
    future_s: float = 300.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.past_s) and self.past_s > 0):
            raise ConfigurationError("the accepted past must be a positive number of seconds")
        if not 0.0 <= self.future_s <= MAX_FUTURE_SKEW_S:
            raise ConfigurationError(
                f"the accepted future skew must be in [0, {MAX_FUTURE_SKEW_S:g}] seconds"
            )

    @classmethod
    def of_days(cls, past_days: int, future_s: float = 300.0) -> AcceptWindow:
        return cls(past_days * 86_400.0, future_s)

    def refusal(self, start_s: float, now_s: float) -> str | None:
        """Why a start (Unix seconds) is refused at ``now_s``, or ``None`` when accepted."""
        if start_s < now_s - self.past_s:
            return TOO_OLD
        if start_s > now_s + self.future_s:
            return IN_FUTURE
        return None

    def bounds(self, now: datetime) -> tuple[datetime, datetime]:
        return now - timedelta(seconds=self.past_s), now + timedelta(seconds=self.future_s)
