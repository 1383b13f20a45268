"""The ``infersight`` command's settings roles, composed of ``config.parts`` and read once in
``main()`` from the environment (``INFERSIGHT_*``), then passed down.

``Settings`` is the store's commands' role (``db``, ``slo``, ``cost``, ``report``…; ``serve`` adds
``api.settings.ApiSettings``); ``SidecarSettings`` is ``infersight sidecar``'s. A role declares no
field of its own (``tests/test_settings.py``).
"""

from __future__ import annotations

from infersight.config.parts import CostReportPart, SidecarPart, StorePart
from infersight.core.retention import RetentionPolicy


class Settings(StorePart, CostReportPart):
    """The store and how its costs are priced and reported."""

    def retention(self) -> RetentionPolicy:
        return RetentionPolicy(
            raw_days=self.raw_retention_days,
            minute_days=self.minute_rollup_retention_days,
            hour_days=self.hour_rollup_retention_days,
            day_days=self.day_rollup_retention_days,
            partition_ahead_days=self.partition_ahead_days,
            profile_days=self.profile_retention_days,
        )


class SidecarSettings(StorePart, SidecarPart):
    """The store the sidecar ships to and accepts for, and its receivers' token."""
