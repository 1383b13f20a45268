"""How long the store keeps each resolution (``RetentionPolicy``), and so the finest rollups
a query over a window may read.

The one declaration of the retention defaults: ``storage.maintenance`` applies it, the settings
read it (``INFERSIGHT_*_RETENTION_DAYS``), and ``core.store_capacity`` sizes a store with it.
Pure, so a command that only reads — ``infersight slo list`` — learns ``finest_for`` without
importing SQLAlchemy.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from infersight.core.errors import InvalidInput
from infersight.core.window import Resolution, Window


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    raw_days: int = 14
    minute_days: int = 14
    hour_days: int = 180
    day_days: int = 1095
    partition_ahead_days: int = 3
    #: Finished profiles (``storage.profiles``) are kept this many days.
    profile_days: int = 30

    def __post_init__(self) -> None:
        for name in ("raw_days", "minute_days", "hour_days", "day_days", "profile_days"):
            if not 1 <= getattr(self, name) <= 36500:
                raise InvalidInput(f"{name} must be between 1 and 36500")
        if not 0 <= self.partition_ahead_days <= 60:
            raise InvalidInput("partition_ahead_days must be between 0 and 60")
        if not self.minute_days <= self.hour_days <= self.day_days:
            raise InvalidInput("rollup retention must grow with resolution: minute ≤ hour ≤ day")

    def days_of(self, resolution: str) -> int:
        """Days kept of a rollup resolution by its label (``1m``, ``1h``, ``1d``)."""
        return {"1m": self.minute_days, "1h": self.hour_days, "1d": self.day_days}[resolution]

    def finest_for(self, window: Window, now: datetime) -> Resolution:
        """The finest rollup resolution still kept for all of ``window``."""
        if window.start >= now - timedelta(days=self.minute_days):
            return Resolution.MINUTE
        if window.start >= now - timedelta(days=self.hour_days):
            return Resolution.HOUR
        return Resolution.DAY
