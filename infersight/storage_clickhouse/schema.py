"""The ClickHouse schema, as versioned migrations, for one server or a sharded cluster.

Tables (``Layout.single``; a cluster's are described below):

* ``requests``: one row per user request, ``ReplacingMergeTree`` ordered by
  ``(model, instance, start, trace_id, span_id)`` — the queries' own order (a model, an
  instance, a time range), ending in today's request key so that a row written twice is one
  row after merges — partitioned by day, with a ``TTL`` that is the raw retention. The writer
  stores each key once (``writer``); reads of raw rows use ``FINAL`` so that they are right
  even before a merge, should two writers race on one key.
* ``request_rollups_1m`` / ``_1h`` / ``_1d``: per series (the group labels) and bucket, the
  counts and, per latency metric, infersight's own sketch as columns ClickHouse merges itself
  (``SimpleAggregateFunction``: the buckets as ``sumMap`` of a ``Map(Int64, UInt64)``, the zero
  count and sum as ``sum``, ``min`` and ``max``), in ``AggregatingMergeTree``. Reads aggregate
  with the same functions, so they are right before merges too, and rebuild the sketch with
  ``QuantileSketch.from_buckets``: the very sketch PostgreSQL's rollups hold.
  Since step 4 the minute rows are a materialized view over ``requests``: each request row
  carries its values' bucket keys (``ttft_key``, …, computed by ``core.sketch`` in the writer,
  so the keys equal PostgreSQL's to the bit) and its insert's token, and one insert stores
  the rows and their rollups under one dedup token (``writer``). The hour and day rows are
  materialized views over the minute table — the database aggregates the aggregates.
* ``request_parts`` (step 6): the prefill legs of disaggregated requests, kept apart from the
  users' requests as the SQL store keeps them: the columns, key, partitions and ``TTL`` of
  ``requests`` (and the insert's token), never rolled up.
* ``schema_migrations``: the versions applied.

A cluster (``Layout.cluster``) has each table as ``<name>_local`` on every node, made
``ON CLUSTER`` with ``Replicated*MergeTree`` engines (ZooKeeper/Keeper paths with the
``{shard}`` and ``{replica}`` macros), and ``<name>`` as a ``Distributed`` table over them
sharded by ``cityHash64(model, instance)``: a series (a model on an instance) lives on one
shard, so its rollups merge there and a per-instance query reads one shard. The materialized
views run on each shard's local tables. Generated and checked as text: no cluster ran here.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final

from infersight.core.records import DURATION_FIELDS, GROUP_LABELS
from infersight.storage_clickhouse.attribution_schema import attribution_tables
from infersight.storage_clickhouse.clients_schema import client_tables
from infersight.storage_clickhouse.cost_schema import good_token_tables
from infersight.storage_clickhouse.gpu_rollups_schema import gpu_rollup_tables
from infersight.storage_clickhouse.layout import DEDUP_WINDOW, MAX_TTL_DAYS, SHARDING_KEY, Layout
from infersight.storage_clickhouse.samples_schema import gpu_sample_tables, server_sample_tables
from infersight.storage_clickhouse.sequences_schema import sequence_tables
from infersight.storage_clickhouse.transport import Transport, quote

#: The latency metrics a rollup row keeps a sketch of (``ttft`` for ``ttft_s``, …).
METRICS: Final = tuple(name.removesuffix("_s") for name in DURATION_FIELDS)
#: Rollup resolutions and the function that floors a minute bucket to each.
RESOLUTIONS: Final = {"1m": "", "1h": "toStartOfHour", "1d": "toStartOfDay"}
_LABEL = "LowCardinality(String)"


def _requests(layout: Layout) -> list[str]:
    return _request_table(layout, "requests")


def _request_table(layout: Layout, name: str, extra: Sequence[str] = ()) -> list[str]:
    """A table of request rows (``requests``; ``request_parts`` with ``extra`` columns)."""
    durations = ",\n    ".join(f"{name} Nullable(Float64)" for name in DURATION_FIELDS)
    labels = ",\n    ".join(
        f"{name} {_LABEL}"
        for name in ("instance", "service", "engine", "model", "tenant", "priority", "operation")
    )
    tail = ",\n    ".join(
        f"{name} {_LABEL}"
        for name in (
            "status",
            "error_type",
            "finish_reason",
            "adapter",
            "role",
            "peer",
            "team",
            "workload",
        )
    )
    extras = "".join(f",\n    {column}" for column in extra)
    return [
        f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
        "    start DateTime64(6, 'UTC'),\n"
        "    trace_id String,\n"
        "    span_id String,\n"
        f"    {labels},\n"
        f"    {durations},\n"
        "    input_tokens Nullable(UInt32),\n"
        "    output_tokens Nullable(UInt32),\n"
        "    cached_tokens Nullable(UInt32),\n"
        f"    {tail}{extras}\n"
        f") ENGINE = {layout.engine('ReplacingMergeTree', name)}\n"
        "PARTITION BY toDate(start)\n"
        "ORDER BY (model, instance, start, trace_id, span_id)"
        + layout.ttl("toDateTime(start)", layout.raw_days)
        + layout.settings(),
        *layout.distributed(name),
    ]


def rollup_columns() -> list[tuple[str, str]]:
    """(name, type) of a rollup table's columns, labels and bucket first."""
    out = [("bucket", "DateTime('UTC')"), *((n, _LABEL) for n in GROUP_LABELS)]
    out += [
        (name, "SimpleAggregateFunction(sum, UInt64)")
        for name in ("requests", "errors", "input_tokens", "output_tokens", "cached_tokens")
    ]
    for metric in METRICS:
        out += [
            (f"{metric}_buckets", "SimpleAggregateFunction(sumMap, Map(Int64, UInt64))"),
            (f"{metric}_zero", "SimpleAggregateFunction(sum, UInt64)"),
            (f"{metric}_sum", "SimpleAggregateFunction(sum, Float64)"),
            (f"{metric}_min", "SimpleAggregateFunction(min, Nullable(Float64))"),
            (f"{metric}_max", "SimpleAggregateFunction(max, Nullable(Float64))"),
        ]
    return out


def _rollups(layout: Layout) -> list[str]:
    columns = ",\n    ".join(f"{name} {kind}" for name, kind in rollup_columns())
    keys = ", ".join(GROUP_LABELS)
    days = {"1m": layout.minute_days, "1h": layout.hour_days, "1d": layout.day_days}
    out = []
    for resolution in RESOLUTIONS:
        name = f"request_rollups_{resolution}"
        out += [
            f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
            f"    {columns}\n"
            f") ENGINE = {layout.engine('AggregatingMergeTree', name)}\n"
            f"PARTITION BY toYYYYMM(bucket)\n"
            f"ORDER BY ({keys}, bucket)"
            + layout.ttl("bucket", days[resolution])
            + layout.settings(),
            *layout.distributed(name),
        ]
    values = ", ".join(name for name, _ in rollup_columns()[1:])
    for resolution, floor in RESOLUTIONS.items():
        if not floor:
            continue
        out.append(
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS"
            f" {layout.local(f'request_rollups_{resolution}_mv')}{layout.on_cluster}"
            f" TO {layout.local(f'request_rollups_{resolution}')}"
            f" AS SELECT {floor}(bucket) AS bucket, {values}"
            f" FROM {layout.local('request_rollups_1m')}"
        )
    return out


def key_columns() -> list[str]:
    """The columns of a request row holding each latency metric's sketch bucket key
    (``ttft_key``, …: ``QuantileSketch.keys_for`` of the value; NULL for no value or one below
    ``core.sketch.MIN_VALUE``, which the sketch counts as zero)."""
    return [f"{metric}_key" for metric in METRICS]


def _rolled_from_rows(layout: Layout) -> list[str]:
    """Request rows carry their bucket keys and their insert's token, and the minute rollups
    are a materialized view over ``requests``: one insert stores a request's row and its
    rollups, deduplicated together by the insert's token (``writer``)."""
    columns = [f"{name} Nullable(Int32)" for name in key_columns()]
    columns.append("insert_token String")
    out = []
    for table in dict.fromkeys([layout.local("requests"), layout.table("requests")]):
        adds = ", ".join(f"ADD COLUMN IF NOT EXISTS {c}" for c in columns)
        out.append(f"ALTER TABLE {table}{layout.on_cluster} {adds}")
    labels = ", ".join(GROUP_LABELS)
    metrics = []
    for metric, field in zip(METRICS, DURATION_FIELDS, strict=True):
        key = f"{metric}_key"
        metrics += [
            f"sumMapIf(map(toInt64(ifNull({key}, 0)), toUInt64(1)), {key} IS NOT NULL)"
            f" AS {metric}_buckets",
            f"countIf({field} IS NOT NULL AND {key} IS NULL) AS {metric}_zero",
            f"sum(ifNull({field}, 0)) AS {metric}_sum",
            f"min({field}) AS {metric}_min",
            f"max({field}) AS {metric}_max",
        ]
    out.append(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS"
        f" {layout.local('request_rollups_1m_mv')}{layout.on_cluster}"
        f" TO {layout.local('request_rollups_1m')}"
        f" AS SELECT toDateTime(toStartOfMinute(start), 'UTC') AS bucket, {labels},"
        " count() AS requests, countIf(status = 'error') AS errors,"
        " sum(ifNull(input_tokens, 0)) AS input_tokens,"
        " sum(ifNull(output_tokens, 0)) AS output_tokens,"
        " sum(ifNull(cached_tokens, 0)) AS cached_tokens, "
        + ", ".join(metrics)
        + f" FROM {layout.local('requests')} GROUP BY bucket, {labels}"
    )
    return out


def _request_parts(layout: Layout) -> list[str]:
    """``request_parts``: the prefill legs of disaggregated requests (``Role.PREFILL``), as the
    SQL store keeps them apart from the users' requests so that no request or token is counted
    twice: the columns, sorting key, partitions and ``TTL`` of ``requests`` and the insert's
    token; no bucket keys and no rollups (the pool reads aggregate the raw legs)."""
    return _request_table(layout, "request_parts", ["insert_token String"])


def _attribution(layout: Layout) -> list[str]:
    """Gateway and client spans (``attributions``), the requests their spans filled after they
    were stored (``request_moves``), and the views reads take them in by
    (``attribution_schema``)."""
    return attribution_tables(layout, _request_table)


@dataclass(frozen=True, slots=True)
class Step:
    """One migration: its number, its name and its statements (each idempotent, so that a step
    cut short is finished by running it again)."""

    version: int
    name: str
    statements: Callable[[Layout], list[str]]


#: The migrations, in order. A new one is appended with the next number; none is edited.
STEPS: Final = (
    Step(1, "requests", _requests),
    Step(2, "request rollups (minute by the writer, hour and day by materialized views)", _rollups),
    Step(3, "server samples and their engines", server_sample_tables),
    Step(4, "minute rollups by a materialized view over the rows' bucket keys", _rolled_from_rows),
    Step(5, "GPU samples", gpu_sample_tables),
    Step(6, "prefill legs of disaggregated requests", _request_parts),
    Step(7, "attribution: spans, moved requests and the views reads join them by", _attribution),
    Step(8, "GPU rollups (minute, hour and day; kept by the writer)", gpu_rollup_tables),
    Step(9, "good-token counts per hour and day (kept by cost's reads)", good_token_tables),
    Step(10, "client records", client_tables),
    Step(11, "late sequences folded", lambda x: sequence_tables(x, _request_table)),
)


def _migrations_table(layout: Layout) -> list[str]:
    engine = layout.engine("ReplacingMergeTree", "schema_migrations")
    return [
        f"CREATE DATABASE IF NOT EXISTS {layout.database}{layout.on_cluster}",
        f"CREATE TABLE IF NOT EXISTS {layout.local('schema_migrations')}{layout.on_cluster}"
        " (version UInt32, name String, checksum String, applied_at DateTime('UTC'))"
        f" ENGINE = {engine} ORDER BY version",
        *layout.distributed("schema_migrations"),
    ]


def checksum(step: Step, layout: Layout) -> str:
    """A digest of the statements a step ran, kept with its version."""
    return hashlib.sha256("\n".join(step.statements(layout)).encode()).hexdigest()[:16]


def ddl(layout: Layout, steps: Sequence[Step] = STEPS) -> list[str]:
    """Every statement of the schema, in order (what ``migrate`` runs on an empty database)."""
    out = _migrations_table(layout)
    for step in steps:
        out += step.statements(layout)
    return out


def applied(transport: Transport, layout: Layout) -> list[int]:
    """The versions applied, in order (``[]`` before the first migration)."""
    exists = transport.rows(
        "SELECT count() FROM system.tables WHERE database = "
        f"{quote(layout.database)} AND name = 'schema_migrations'"
    )
    if not exists or not exists[0][0]:
        return []
    rows = transport.rows(
        f"SELECT DISTINCT version FROM {layout.table('schema_migrations')} ORDER BY version"
    )
    return [int(r[0]) for r in rows]


_CREATED: Final = re.compile(r"CREATE TABLE IF NOT EXISTS ([A-Za-z0-9_]+)\.([A-Za-z0-9_]+)")
_KEPT: Final = re.compile(r"\nTTL (.+?) \+ INTERVAL (\d+) DAY")
_LIVE_TTL: Final = re.compile(r"\bTTL (.+?) \+ toIntervalDay\((\d+)\)")


@dataclass(frozen=True, slots=True)
class Retention:
    """A table's raw or rollup retention as its ``TTL`` keeps it: the time expression and
    the days (``None``: kept for good, ``Layout.ttl`` past ``MAX_TTL_DAYS``)."""

    table: str
    expression: str
    days: int | None


def retention(layout: Layout, steps: Sequence[Step] = STEPS) -> list[Retention]:
    """Every table with a retention, and what ``layout`` keeps it for: read from the
    statements that create it (one source of truth with the schema), each table's expression
    found under a layout that keeps everything for a day."""
    probe = replace(layout, raw_days=1, minute_days=1, hour_days=1, day_days=1)

    def kept(of: Layout) -> dict[str, tuple[str, int | None]]:
        out: dict[str, tuple[str, int | None]] = {}
        for statement in ddl(of, steps):
            created = _CREATED.match(statement)
            if created is None or "ENGINE = Distributed" in statement:
                continue
            found = _KEPT.search(statement)
            out[created.group(2)] = (found.group(1), int(found.group(2))) if found else ("", None)
        return out

    wanted = kept(layout)
    return [
        Retention(table, expression, wanted[table][1])
        for table, (expression, _) in kept(probe).items()
        if expression
    ]


def align_retention(
    transport: Transport, layout: Layout
) -> list[tuple[str, int | None, int | None]]:
    """Give every table the retention ``layout`` asks for (``ALTER TABLE … MODIFY TTL``, or
    ``REMOVE TTL`` for one kept for good), where it differs from what the table has: the
    retention settings changed since the tables were made. Parts already past the new
    retention go when ClickHouse applies it (whole parts: ``ttl_only_drop_parts``). Returns
    (table, days it had, days it has now) for each table changed."""
    live: dict[str, int | None] = {}
    for name, engine in transport.rows(
        f"SELECT name, engine_full FROM system.tables WHERE database = {quote(layout.database)}"
    ):
        found = _LIVE_TTL.search(str(engine))
        live[str(name)] = int(found.group(2)) if found else None
    changed = []
    for kept in retention(layout):
        if kept.table not in live or live[kept.table] == kept.days:
            continue
        target = f"{layout.database}.{kept.table}{layout.on_cluster}"
        if kept.days is None:
            transport.command(f"ALTER TABLE {target} REMOVE TTL")
        else:
            transport.command(
                f"ALTER TABLE {target} MODIFY TTL {kept.expression} + INTERVAL {kept.days} DAY"
            )
        changed.append((kept.table, live[kept.table], kept.days))
    return changed


def migrate(transport: Transport, layout: Layout, steps: Sequence[Step] = STEPS) -> list[int]:
    """Apply the steps not applied yet, in order: the versions applied now. Then every
    table's retention is ``layout``'s (``align_retention``)."""
    for statement in _migrations_table(layout):
        transport.command(statement)
    done = set(applied(transport, layout))
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    ran = []
    for step in steps:
        if step.version in done:
            continue
        for statement in step.statements(layout):
            transport.command(statement)
        transport.command(
            f"INSERT INTO {layout.table('schema_migrations')} VALUES ({step.version},"
            f" {quote(step.name)}, {quote(checksum(step, layout))}, {quote(now)})"
        )
        ran.append(step.version)
    if steps is STEPS:
        align_retention(transport, layout)
    return ran


__all__ = [
    "DEDUP_WINDOW",
    "MAX_TTL_DAYS",
    "METRICS",
    "RESOLUTIONS",
    "SHARDING_KEY",
    "STEPS",
    "Layout",
    "Retention",
    "Step",
    "align_retention",
    "applied",
    "checksum",
    "ddl",
    "key_columns",
    "migrate",
    "retention",
    "rollup_columns",
]
