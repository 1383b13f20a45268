"""The tables of attribution in ClickHouse (schema step 7; ``attribution`` writes them).

* ``attributions``: what gateway and client spans named of their traces (the SQL store's
  ``trace_attributions``), ``ReplacingMergeTree`` ordered by trace id first (the writer looks
  spans up by trace), a span's variants (the same span named twice with other values) kept
  apart and merged when read, the first value written of each dimension winning.
* ``request_moves``: one row per stored request whose labels its trace's spans filled after
  it was stored: the request's row under its attributed labels and, in ``was_<dimension>``,
  the labels it was stored (and rolled up) under. A state, not a delta (``ReplacingMergeTree``
  by the request's key, the newest row kept): a replay or a second writer writes the same
  row again and changes nothing.
* ``request_marks``: each series a moved request passed through and left again (filled by one
  span, moved again when another span filled more): its latency values, which that series'
  minimum and maximum keep, as the SQL store's do.
* ``requests_attributed``: a view of ``requests`` with each moved request's labels replaced
  by its move's — what raw-row reads read.
* ``request_moves_1m`` / ``_1h`` / ``_1d``: views turning each move into two rollup rows of
  that resolution: the request taken out of the series it was rolled up in (``-1``, its
  counts, buckets and sum; its minimum and maximum left, as the SQL store's
  ``QuantileSketch.subtract`` leaves them) and added to its attributed series (``+1``, with
  its minimum and maximum), and each mark as a row of no requests with its values' minimum
  and maximum. Counters are ``UInt64`` as the rollups' are: ``-1`` wraps, and
  ClickHouse's ``sum`` and ``sumMap`` wrap back, so a rollup read ``UNION ALL`` these rows
  adds up to the corrected rollups (``reads``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from infersight.core.attribution import DIMENSIONS
from infersight.core.records import DURATION_FIELDS, GROUP_LABELS, RECORD_FIELDS
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.transport import quote

_METRICS: Final = tuple(name.removesuffix("_s") for name in DURATION_FIELDS)
#: The columns of a request row as the writer stores it (``writer.STORED_FIELDS``).
ROW_COLUMNS: Final = (*RECORD_FIELDS, *(f"{m}_key" for m in _METRICS), "insert_token")
#: The floor of a minute bucket to each rollup resolution.
_FLOORS: Final = {"1m": "", "1h": "toStartOfHour", "1d": "toStartOfDay"}
_LABEL = "LowCardinality(String)"
#: A parameterised view's range: the rows that started in [low, high) (``reads`` gives them).
_RANGE: Final = "start >= {low:DateTime64(6, 'UTC')} AND start < {high:DateTime64(6, 'UTC')}"
RequestTable = Callable[[Layout, str, Sequence[str]], list[str]]


def _attributions(layout: Layout) -> list[str]:
    dims = ",\n    ".join(f"{d} {_LABEL}" for d in DIMENSIONS)
    name = "attributions"
    out = [
        f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
        "    trace_id String,\n"
        "    start DateTime64(6, 'UTC'),\n"
        "    span_id String,\n"
        "    duration_s Float64,\n"
        f"    {dims},\n"
        f"    source {_LABEL},\n"
        "    written DateTime64(6, 'UTC')\n"
        f") ENGINE = {layout.engine('ReplacingMergeTree', name)}\n"
        "PARTITION BY toDate(start)\n"
        f"ORDER BY (trace_id, start, span_id, {', '.join(DIMENSIONS)})"
        + layout.ttl("toDateTime(start)", layout.raw_days)
        + layout.settings()
    ]
    if layout.cluster:
        out.append(
            f"CREATE TABLE IF NOT EXISTS {layout.table(name)}{layout.on_cluster}"
            f" AS {layout.local(name)} ENGINE = Distributed({quote(layout.cluster)},"
            f" {quote(layout.database)}, {quote(name + '_local')}, cityHash64(trace_id))"
        )
    return out


def _moves(layout: Layout, request_table: RequestTable) -> list[str]:
    """``request_moves``: the columns, key, partitions and ``TTL`` of ``requests``, the bucket
    keys and token, the labels it was stored under and the move's version."""
    extra = [f"{m}_key Nullable(Int32)" for m in _METRICS]
    extra += ["insert_token String", *(f"was_{d} {_LABEL}" for d in DIMENSIONS)]
    extra.append("version UInt64")
    return request_table(layout, "request_moves", extra)


def _raw_view(layout: Layout) -> str:
    columns = ", ".join(
        f"if(m.moved = 1, m.{c}, r.{c}) AS {c}" if c in DIMENSIONS else f"r.{c} AS {c}"
        for c in ROW_COLUMNS
    )
    moved = ", ".join(DIMENSIONS)
    return (
        f"CREATE VIEW IF NOT EXISTS {layout.table('requests_attributed')}{layout.on_cluster}"
        f" AS SELECT {columns} FROM {layout.table('requests')} AS r FINAL"
        f" LEFT ANY JOIN (SELECT start, trace_id, span_id, {moved}, toUInt8(1) AS moved"
        f" FROM {layout.table('request_moves')} FINAL WHERE {_RANGE}) AS m"
        " ON r.start = m.start AND r.trace_id = m.trace_id AND r.span_id = m.span_id"
        f" WHERE {_RANGE.replace('start', 'r.start')}"
    )


def _marks(layout: Layout) -> list[str]:
    """``request_marks``: each series a moved request passed through and left again (filled
    by one span, then by another): its latency values, which that series' minimum and maximum
    keep (the SQL store's ``QuantileSketch.subtract`` leaves them)."""
    name = "request_marks"
    labels = ",\n    ".join(f"{n} {_LABEL}" for n in GROUP_LABELS)
    durations = ",\n    ".join(f"{n} Nullable(Float64)" for n in DURATION_FIELDS)
    return [
        f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
        "    start DateTime64(6, 'UTC'),\n"
        "    trace_id String,\n"
        "    span_id String,\n"
        f"    {labels},\n"
        f"    {durations}\n"
        f") ENGINE = {layout.engine('ReplacingMergeTree', name)}\n"
        "PARTITION BY toDate(start)\n"
        f"ORDER BY (model, instance, start, trace_id, span_id, {', '.join(DIMENSIONS)})"
        + layout.ttl("toDateTime(start)", layout.raw_days)
        + layout.settings(),
        *layout.distributed(name),
    ]


def _bucket(resolution: str) -> str:
    minute = "toDateTime(toStartOfMinute(start), 'UTC')"
    floor = _FLOORS[resolution]
    return f"toDateTime({floor}({minute}), 'UTC')" if floor else minute


def _moved_rollups(layout: Layout, resolution: str) -> str:
    labels = ", ".join(
        f"if(sign < 0, was_{name}, {name}) AS {name}" if name in DIMENSIONS else name
        for name in GROUP_LABELS
    )
    counters = ("input_tokens", "output_tokens", "cached_tokens")
    values = [
        "toUInt64(sign) AS requests",
        "toUInt64(sign * (status = 'error')) AS errors",
        *(f"toUInt64(sign * ifNull({name}, 0)) AS {name}" for name in counters),
    ]
    marks = ["toUInt64(0) AS requests", "toUInt64(0) AS errors"]
    marks += [f"toUInt64(0) AS {name}" for name in counters]
    for metric, field in zip(_METRICS, DURATION_FIELDS, strict=True):
        key = f"{metric}_key"
        values += [
            f"if({key} IS NULL, CAST(map(), 'Map(Int64, UInt64)'),"
            f" map(toInt64(assumeNotNull({key})), toUInt64(sign))) AS {metric}_buckets",
            f"toUInt64(sign * ({field} IS NOT NULL AND {key} IS NULL)) AS {metric}_zero",
            f"sign * ifNull({field}, 0) AS {metric}_sum",
            f"if(sign > 0, {field}, NULL) AS {metric}_min",
            f"if(sign > 0, {field}, NULL) AS {metric}_max",
        ]
        marks += [
            f"CAST(map(), 'Map(Int64, UInt64)') AS {metric}_buckets",
            f"toUInt64(0) AS {metric}_zero",
            f"toFloat64(0) AS {metric}_sum",
            f"{field} AS {metric}_min",
            f"{field} AS {metric}_max",
        ]
    bucket = _bucket(resolution)
    return (
        f"CREATE VIEW IF NOT EXISTS {layout.table(f'request_moves_{resolution}')}"
        f"{layout.on_cluster} AS SELECT {bucket} AS bucket, {labels}, {', '.join(values)}"
        f" FROM (SELECT * FROM {layout.table('request_moves')} FINAL WHERE {_RANGE})"
        " ARRAY JOIN [toInt8(-1), toInt8(1)] AS sign"
        f" UNION ALL SELECT {bucket} AS bucket, {', '.join(GROUP_LABELS)}, {', '.join(marks)}"
        f" FROM {layout.table('request_marks')} FINAL WHERE {_RANGE}"
    )


def attribution_tables(layout: Layout, request_table: RequestTable) -> list[str]:
    """Schema step 7's statements (``request_table``: ``schema``'s maker of a table of request
    rows, given so that this module need not import ``schema``, which imports it)."""
    return [
        *_attributions(layout),
        *_moves(layout, request_table),
        *_marks(layout),
        _raw_view(layout),
        *(_moved_rollups(layout, resolution) for resolution in _FLOORS),
    ]


__all__ = ["ROW_COLUMNS", "attribution_tables"]
