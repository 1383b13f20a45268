"""ClickHouse tables of the GPU rollups (issue #36): ``gpu_rollups_1m`` / ``_1h`` / ``_1d``, the
SQL store's ``gpu_rollups`` columns per GPU and bucket, kept by the writer
(``storage_clickhouse.gpu_rollups``)."""

from __future__ import annotations

from typing import Final

from infersight.core.gpu_intervals import COUNT_COLUMNS, MAX_COLUMNS, SUM_COLUMNS, VALUE_COLUMNS
from infersight.core.window import Resolution
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.transport import quote

_LABEL: Final = "LowCardinality(String)"
RESOLUTIONS: Final = {"1m": Resolution.MINUTE, "1h": Resolution.HOUR, "1d": Resolution.DAY}
#: Columns of a rollup row in insert order.
ROLLUP_COLUMNS: Final = (
    "bucket",
    "instance",
    "gpu_index",
    "name",
    "gpu_slice",
    *SUM_COLUMNS,
    *MAX_COLUMNS,
    "version",
)


def _type(column: str) -> str:
    if column in COUNT_COLUMNS:
        return "UInt64"
    if column in VALUE_COLUMNS:
        return "Float64"
    return "Nullable(Int64)" if column == "xid_max" else "Nullable(Float64)"


def gpu_rollup_tables(layout: Layout) -> list[str]:
    """``gpu_rollups_1m`` / ``_1h`` / ``_1d`` (a ``schema.Step``'s statements): one row per GPU
    and bucket, ``ReplacingMergeTree(version)`` ordered ``(instance, gpu_index, bucket)``,
    monthly partitions, each resolution's retention as ``TTL``; sharded by instance on a
    cluster, as the GPU samples are (a GPU's samples and rollups on one shard)."""
    columns = ",\n    ".join(
        [
            "bucket DateTime('UTC')",
            f"instance {_LABEL}",
            "gpu_index UInt16",
            f"name {_LABEL}",
            f"gpu_slice {_LABEL}",
            *(f"{c} {_type(c)}" for c in (*SUM_COLUMNS, *MAX_COLUMNS)),
            "version UInt64",
        ]
    )
    days = {"1m": layout.minute_days, "1h": layout.hour_days, "1d": layout.day_days}
    out: list[str] = []
    for resolution in RESOLUTIONS:
        name = f"gpu_rollups_{resolution}"
        engine = layout.engine("ReplacingMergeTree", name)
        engine = engine[:-1] + ("version)" if engine.endswith("()") else ", version)")
        out.append(
            f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
            f"    {columns}\n"
            f") ENGINE = {engine}\n"
            "PARTITION BY toYYYYMM(bucket)\n"
            "ORDER BY (instance, gpu_index, bucket)"
            + layout.ttl("bucket", days[resolution])
            + layout.settings()
        )
        if layout.cluster:
            out.append(
                f"CREATE TABLE IF NOT EXISTS {layout.table(name)}{layout.on_cluster}"
                f" AS {layout.local(name)} ENGINE = Distributed({quote(layout.cluster)},"
                f" {quote(layout.database)}, {quote(name + '_local')}, cityHash64(instance))"
            )
    return out
