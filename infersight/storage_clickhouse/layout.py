"""Where the ClickHouse tables go and how long they keep rows (``Layout``): one server, or a
sharded, replicated cluster (``schema`` says what each table is; this module is what every
table's DDL shares, so that the schema modules import it and not each other)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.storage_clickhouse.transport import quote

#: The sharding key of every table: a series stays on one shard.
SHARDING_KEY: Final = "cityHash64(model, instance)"
#: Blocks whose insert tokens a single server remembers (replays within them are no-ops).
DEDUP_WINDOW: Final = 100_000

#: The longest retention kept by a ``TTL`` (50 years); a longer one keeps rows for good.
MAX_TTL_DAYS: Final = 18_250


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the tables go and how long they keep rows."""

    database: str = "infersight"
    #: The cluster's name in the servers' ``remote_servers`` (``None``: one server).
    cluster: str | None = None
    raw_days: int = 14
    minute_days: int = 14
    hour_days: int = 180
    day_days: int = 1095

    def __post_init__(self) -> None:
        for name in (self.database, self.cluster or "x"):
            if not name.replace("_", "").isalnum():
                raise InvalidInput(f"not a ClickHouse identifier: {name!r}")

    @property
    def on_cluster(self) -> str:
        return f" ON CLUSTER {quote(self.cluster)}" if self.cluster else ""

    def local(self, table: str) -> str:
        """The name of the table that holds the rows (``_local`` on a cluster)."""
        return f"{self.database}.{table}_local" if self.cluster else f"{self.database}.{table}"

    def table(self, table: str) -> str:
        """The name reads and writes use (the ``Distributed`` one on a cluster)."""
        return f"{self.database}.{table}"

    def engine(self, family: str, table: str) -> str:
        if not self.cluster:
            return f"{family}()"
        path = quote(f"/clickhouse/tables/{{shard}}/{self.database}/{table}_local")
        return f"Replicated{family}({path}, '{{replica}}')"

    def ttl(self, column: str, days: int) -> str:
        """The ``TTL`` clause keeping ``days`` days; none past ``MAX_TTL_DAYS`` (ClickHouse's
        ``DateTime`` ends in 2106: a longer TTL would wrap around and expire rows at once)."""
        if days > MAX_TTL_DAYS:
            return ""
        return f"\nTTL {column} + INTERVAL {days} DAY"

    def settings(self) -> str:
        """Expired days go as whole parts (no rewrite); a single server remembers its insert
        tokens (replicated tables do by default: ``replicated_deduplication_window``)."""
        out = " SETTINGS ttl_only_drop_parts = 1"
        if not self.cluster:
            out += f", non_replicated_deduplication_window = {DEDUP_WINDOW}"
        return out

    def distributed(self, table: str) -> list[str]:
        """The ``Distributed`` table over ``table``'s local ones (nothing on one server)."""
        if not self.cluster:
            return []
        return [
            f"CREATE TABLE IF NOT EXISTS {self.table(table)}{self.on_cluster}"
            f" AS {self.local(table)} ENGINE = Distributed({quote(self.cluster)},"
            f" {quote(self.database)}, {quote(table + '_local')}, {SHARDING_KEY})"
        ]


__all__ = ["DEDUP_WINDOW", "MAX_TTL_DAYS", "SHARDING_KEY", "Layout"]
