"""The store's URL and retention for the commands that only read, without pydantic (#16).

``infersight slo list``, ``baseline list`` and ``db current`` need two things of the settings:
the store URL and the retention policy (``finest_for``). Building ``cli.settings.Settings``
imports pydantic and pydantic-settings, which costs more than the rest of ``slo list``'s own
imports on a loaded machine. ``read`` answers them from the environment itself when the only
``INFERSIGHT_*`` store variable set is ``INFERSIGHT_DATABASE_URL`` (a plain string, read as
pydantic-settings reads it: by its name in any case); when any other store variable is set, it
builds ``Settings`` after all, so that its values are validated (and refused) exactly as every
other command validates them. ``tests/test_store_settings.py`` checks that the two agree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Final

from infersight.core.retention import RetentionPolicy

#: ``config.parts.PREFIX`` and ``config.parts.DEFAULT_DATABASE_URL``, repeated here so that
#: reading them needs no pydantic (the test checks that they agree).
PREFIX: Final = "INFERSIGHT_"
DEFAULT_DATABASE_URL: Final = "sqlite:///infersight.db"
#: ``config.parts.StorePart``'s fields other than ``database_url`` (and the unread ones below):
#: when one is set in the environment, ``read`` validates the settings with pydantic.
OTHER_STORE_FIELDS: Final = (
    "database_url_file",  # the URL is read from the file (and checked) by the settings
    "raw_retention_days",
    "minute_rollup_retention_days",
    "hour_rollup_retention_days",
    "day_rollup_retention_days",
    "profile_retention_days",
    "partition_ahead_days",
    "max_future_skew_s",
    "exact_max_rows",
)
#: ``StorePart``'s fields that no command that only reads needs (``serve`` alone reads the
#: standby's URL; the reading commands keep the store's default call bounds):
#: ``read`` neither answers nor validates them.
UNREAD_STORE_FIELDS: Final = (
    "database_read_url",
    # ClickHouse beside the store (issue #36): the commands that read alone read state (SLOs,
    # baselines, the schema's revision), which the store keeps whatever holds the telemetry
    "telemetry_url",
    "telemetry_cluster",
    "telemetry_sql_copy",
    "database_connect_timeout_s",
    "database_statement_timeout_s",
    "database_lock_timeout_s",
    "database_idle_in_transaction_timeout_s",
    "database_pool_timeout_s",
    "sqlite_busy_timeout_s",
)


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """The store URL and its retention policy."""

    database_url: str
    policy: RetentionPolicy | None = field(default=None, repr=False)
    """``None``: the defaults (``RetentionPolicy()``, the same as ``StorePart``'s)."""

    def retention(self) -> RetentionPolicy:
        return self.policy if self.policy is not None else RetentionPolicy()


def read(store: str | None = None) -> StoreSettings:
    """The store settings of the environment, ``store`` (``--store``) replacing its URL."""
    env = {k.upper(): v for k, v in os.environ.items()}
    if any(PREFIX + name.upper() in env for name in OTHER_STORE_FIELDS):
        from infersight.cli.settings import Settings  # noqa: PLC0415 (validates them)

        settings = Settings()
        return StoreSettings(store or settings.database_url, settings.retention())
    return StoreSettings(store or env.get(PREFIX + "DATABASE_URL", DEFAULT_DATABASE_URL))
