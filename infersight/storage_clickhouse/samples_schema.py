"""ClickHouse tables of the servers' scrapes and the GPUs' samples (issue #36):
``server_samples`` (one row per scrape of an instance), ``server_engine_samples`` (one row per
data-parallel engine of a scrape) and ``gpu_samples`` (one row per GPU and sample).

Each is a ``ReplacingMergeTree`` whose sorting key is the SQL store's primary key, instance
first — ``(instance, ts)``, ``(instance, ts, rank)``, ``(instance, gpu_index, ts)``: the reads
pin instances (or a model, which a few instances serve) and a time range — so a row stored twice
is one row after merges; the writer (``storage_clickhouse.samples``) stores each key once and
reads use ``FINAL``. Partitioned by day, with the raw retention as ``TTL`` (``Layout.raw_days``).
On a cluster each is ``<name>_local`` (``Replicated*``) under a ``Distributed`` table sharded by
``cityHash64(instance)``: an instance's scrapes, engines and GPUs live on one shard.
"""

from __future__ import annotations

from typing import Final

from infersight.core.samples import SERVER_METRIC_FIELDS
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.transport import quote

#: The sharding key of the sample tables: an instance stays on one shard.
SAMPLES_SHARDING_KEY: Final = "cityHash64(instance)"

_LABEL: Final = "LowCardinality(String)"

#: Columns of ``server_samples`` in insert order (the SQL table's).
SERVER_COLUMNS: Final = (
    "ts",
    "instance",
    "engine",
    "model",
    *SERVER_METRIC_FIELDS,
    "kv_cache_usage_max",
)
#: Columns of ``server_engine_samples`` in insert order.
ENGINE_COLUMNS: Final = ("ts", "instance", "rank", *SERVER_METRIC_FIELDS)


def _distributed(layout: Layout, table: str) -> list[str]:
    if not layout.cluster:
        return []
    return [
        f"CREATE TABLE IF NOT EXISTS {layout.table(table)}{layout.on_cluster}"
        f" AS {layout.local(table)} ENGINE = Distributed({quote(layout.cluster)},"
        f" {quote(layout.database)}, {quote(table + '_local')}, {SAMPLES_SHARDING_KEY})"
    ]


def server_sample_tables(layout: Layout) -> list[str]:
    """``server_samples`` and ``server_engine_samples`` (a ``schema.Step``'s statements)."""
    metrics = ",\n    ".join(f"{name} Nullable(Float64)" for name in SERVER_METRIC_FIELDS)
    tables = (
        (
            "server_samples",
            f"    engine {_LABEL},\n    model {_LABEL},\n    {metrics},\n"
            "    kv_cache_usage_max Nullable(Float64)\n",
            "(instance, ts)",
        ),
        ("server_engine_samples", f"    rank String,\n    {metrics}\n", "(instance, ts, rank)"),
    )
    out: list[str] = []
    for name, columns, order in tables:
        out += [
            f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
            "    ts DateTime64(6, 'UTC'),\n"
            f"    instance {_LABEL},\n"
            f"{columns}"
            f") ENGINE = {layout.engine('ReplacingMergeTree', name)}\n"
            "PARTITION BY toDate(ts)\n"
            f"ORDER BY {order}" + layout.ttl("toDateTime(ts)", layout.raw_days) + layout.settings(),
            *_distributed(layout, name),
        ]
    return out


#: Columns of ``gpu_samples`` in insert order (the SQL table's).
GPU_COLUMNS: Final = (
    "ts",
    "instance",
    "gpu_index",
    "uuid",
    "name",
    "util_gpu",
    "util_memory",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_w",
    "power_limit_w",
    "energy_j",
    "temperature_c",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "throttle_reasons",
    "ecc_sbe_total",
    "ecc_dbe_total",
    "xid_last",
    "sm_occupancy",
    "dram_bw_util",
    "tensor_util",
    "gpu_slice",
    "parent_uuid",
    "gpu_instance_id",
)
_GPU_TYPES: Final = {
    "ts": "DateTime64(6, 'UTC')",
    "instance": _LABEL,
    "gpu_index": "UInt16",
    "uuid": _LABEL,
    "name": _LABEL,
    "throttle_reasons": _LABEL,
    "xid_last": "Nullable(Int64)",
    "gpu_slice": _LABEL,
    "parent_uuid": _LABEL,
    "gpu_instance_id": "Nullable(Int32)",
}


def gpu_sample_tables(layout: Layout) -> list[str]:
    """``gpu_samples``, one row per GPU and sample, ordered ``(instance, gpu_index, ts)`` (the
    SQL store's key, instance first). Its rollups stay the SQL store's: a sample's share of GPU
    time depends on the GPU's next sample (``storage.gpu_rollup``), which a materialized view,
    seeing one insert's rows, cannot know."""
    columns = ",\n    ".join(f"{c} {_GPU_TYPES.get(c, 'Nullable(Float64)')}" for c in GPU_COLUMNS)
    return [
        f"CREATE TABLE IF NOT EXISTS {layout.local('gpu_samples')}{layout.on_cluster} (\n"
        f"    {columns}\n"
        f") ENGINE = {layout.engine('ReplacingMergeTree', 'gpu_samples')}\n"
        "PARTITION BY toDate(ts)\n"
        "ORDER BY (instance, gpu_index, ts)"
        + layout.ttl("toDateTime(ts)", layout.raw_days)
        + layout.settings(),
        *_distributed(layout, "gpu_samples"),
    ]
