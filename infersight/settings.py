"""Settings, read once in ``main()`` from the environment (``INFERSIGHT_*``) and passed down.

Every field here is documented in the README's settings table; a test fails when the two differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.accept import MAX_FUTURE_SKEW_S, AcceptWindow

if TYPE_CHECKING:  # the sidecar reads these settings and must not wait for SQLAlchemy
    from storage.maintenance import RetentionPolicy


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERSIGHT_", extra="ignore", frozen=True)

    database_url: str = Field(
        "sqlite:///infersight.db", description="Store URL: PostgreSQL or SQLite."
    )
    raw_retention_days: int = Field(14, ge=1, description="Days of raw requests and samples kept.")
    minute_rollup_retention_days: int = Field(14, ge=1, description="Days of minute rollups kept.")
    hour_rollup_retention_days: int = Field(180, ge=1, description="Days of hour rollups kept.")
    day_rollup_retention_days: int = Field(1095, ge=1, description="Days of day rollups kept.")
    partition_ahead_days: int = Field(
        3, ge=0, le=60, description="Daily partitions created ahead of time (PostgreSQL)."
    )
    max_future_skew_s: float = Field(
        300.0,
        ge=0,
        le=MAX_FUTURE_SKEW_S,
        description="Seconds a span may start after the sidecar's clock and still be accepted.",
    )
    exact_max_rows: int = Field(
        200_000, ge=0, description="Above this many requests, quantiles come from sketches."
    )

    cost_model: str = Field(
        "default",
        max_length=128,
        description="Name of the stored cost model to use (example list prices when absent).",
    )
    report_timezone: str = Field(
        "UTC", description="IANA time zone of weekly report periods and their schedule."
    )

    def accept_window(self) -> AcceptWindow:
        """Starts a sidecar and the store accept: raw retention back, the skew ahead."""
        return AcceptWindow.of_days(self.raw_retention_days, self.max_future_skew_s)

    def retention(self) -> RetentionPolicy:
        from storage.maintenance import RetentionPolicy  # noqa: PLC0415 (see the import)

        return RetentionPolicy(
            raw_days=self.raw_retention_days,
            minute_days=self.minute_rollup_retention_days,
            hour_days=self.hour_rollup_retention_days,
            day_days=self.day_rollup_retention_days,
            partition_ahead_days=self.partition_ahead_days,
        )
