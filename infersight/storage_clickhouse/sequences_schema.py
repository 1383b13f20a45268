"""The tables of late-sequence folding in ClickHouse (schema step 11; ``sequences`` writes them).

With parallel sampling a request's sequence that arrives after the request was stored is
folded into the stored row (``core.sequences.fold_late_sequence``). The SQL store rewrites the
row and corrects its rollups; a ClickHouse row cannot be rewritten (the minute view would count
it again) nor taken back out of the ``SimpleAggregateFunction`` rollups (``min``, ``max``), so,
as attribution's moves do, the fold is kept as a *state* and read in by views:

* ``request_folds``: one row per stored request that late sequences were folded into (or
  claimed for): the request's row as folded (the columns of ``requests`` with its bucket keys),
  in ``was_<column>`` the values it was stored (and rolled up) with, in ``members`` every
  sequence span id claimed for it (each folded once: a replay finds its members there), and
  ``folded`` (0: members claimed, nothing folded, as the SQL store's ``request_sequences``
  keeps a partly replayed record's claims). ``ReplacingMergeTree(version)`` by the request's
  key: state and claims are one row, written at once, so a fold is stored once or not at all.
* ``request_fold_marks``: each folded value set a request held, in the series it was in then
  (``at_<dimension>``: its labels as attributed at that time; the group labels: as stored): a
  series keeps the minimum and maximum of every value set a request had in it, as the SQL
  store's rollups do (``QuantileSketch.subtract`` leaves them; ``sequences`` says where they
  can differ).
* ``requests_folded`` / ``requests_current``: parameterised views of ``requests`` (``FINAL``)
  with each folded request's values replaced by its fold's; ``requests_current`` also with each
  moved request's labels as attributed (``attribution_schema``'s ``requests_attributed``,
  plus the folds) — what raw-row reads read.
* ``request_folds_<res>`` / ``request_folds_attributed_<res>``: views turning each folded
  request into two rollup rows of that resolution: ``-1`` with the values it was rolled up
  with (counts, tokens, sketch buckets, zero count and sum; no minimum or maximum) and ``+1``
  with its folded values (with them), and each mark as a row of no requests with its values'
  minimum and maximum. The first in the labels as stored (for reads that name no attributed
  label), the second in its labels as attributed (the move's, which takes the stored row out of
  its stored series, ``request_moves_<res>``): added to the rollups and the moves, a request
  moved and folded counts once, with its folded values, in its attributed series.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from infersight.core.attribution import DIMENSIONS
from infersight.core.records import DURATION_FIELDS, GROUP_LABELS, TOKEN_FIELDS
from infersight.core.sequences import KEPT
from infersight.storage_clickhouse.attribution_schema import ROW_COLUMNS
from infersight.storage_clickhouse.layout import Layout

_METRICS: Final = tuple(name.removesuffix("_s") for name in DURATION_FIELDS)
_KEYS: Final = tuple(f"{m}_key" for m in _METRICS)
#: The columns a fold changes' stored values the rollups hold (``was_<name>``).
WAS_COLUMNS: Final = ("status", *TOKEN_FIELDS, *DURATION_FIELDS, *_KEYS)
#: The columns of ``request_folds`` the writer fills (``version`` last).
FOLD_COLUMNS: Final = (
    *ROW_COLUMNS,
    *(f"was_{c}" for c in WAS_COLUMNS),
    "members",
    "folded",
    "version",
)
#: The columns of ``request_fold_marks``.
FOLD_MARK_COLUMNS: Final = (
    "start",
    "trace_id",
    "span_id",
    *GROUP_LABELS,
    *(f"at_{d}" for d in DIMENSIONS),
    *DURATION_FIELDS,
    "version",
)
_FLOORS: Final = {"1m": "", "1h": "toStartOfHour", "1d": "toStartOfDay"}
_LABEL = "LowCardinality(String)"
_RANGE: Final = "start >= {low:DateTime64(6, 'UTC')} AND start < {high:DateTime64(6, 'UTC')}"
_KEY_JOIN: Final = "r.start = {0}.start AND r.trace_id = {0}.trace_id AND r.span_id = {0}.span_id"
RequestTable = Callable[[Layout, str, Sequence[str]], list[str]]


def _was_type(column: str) -> str:
    if column == "status":
        return _LABEL
    if column in TOKEN_FIELDS:
        return "Nullable(UInt32)"
    if column in DURATION_FIELDS:
        return "Nullable(Float64)"
    return "Nullable(Int32)"


def _versioned(layout: Layout, name: str, statement: str) -> str:
    engine = layout.engine("ReplacingMergeTree", name)
    versioned = engine[:-1] + ("version)" if engine.endswith("()") else ", version)")
    return statement.replace(f"ENGINE = {engine}", f"ENGINE = {versioned}", 1)


def _folds(layout: Layout, request_table: RequestTable) -> list[str]:
    """``request_folds``: the columns, key, partitions, ``TTL`` and shards of ``requests``,
    the bucket keys and token, the stored values, the claimed sequences, whether folded, and
    the version (the newest state wins)."""
    extra = [f"{k} Nullable(Int32)" for k in _KEYS]
    extra.append("insert_token String")
    extra += [f"was_{c} {_was_type(c)}" for c in WAS_COLUMNS]
    extra += ["members Array(String)", "folded UInt8", "version UInt64"]
    name = "request_folds"
    statements = request_table(layout, name, extra)
    return [_versioned(layout, name, statements[0]), *statements[1:]]


def _marks(layout: Layout) -> list[str]:
    name = "request_fold_marks"
    labels = ",\n    ".join(f"{n} {_LABEL}" for n in GROUP_LABELS)
    at = ",\n    ".join(f"at_{d} {_LABEL}" for d in DIMENSIONS)
    durations = ",\n    ".join(f"{n} Nullable(Float64)" for n in DURATION_FIELDS)
    return [
        f"CREATE TABLE IF NOT EXISTS {layout.local(name)}{layout.on_cluster} (\n"
        "    start DateTime64(6, 'UTC'),\n"
        "    trace_id String,\n"
        "    span_id String,\n"
        f"    {labels},\n"
        f"    {at},\n"
        f"    {durations},\n"
        "    version UInt64\n"
        f") ENGINE = {layout.engine('ReplacingMergeTree', name)}\n"
        "PARTITION BY toDate(start)\n"
        "ORDER BY (model, instance, start, trace_id, span_id, version)"
        + layout.ttl("toDateTime(start)", layout.raw_days)
        + layout.settings(),
        *layout.distributed(name),
    ]


def _moved(layout: Layout) -> str:
    """The moved requests in range, their attributed labels (``attribution_schema``)."""
    return (
        f"(SELECT start, trace_id, span_id, {', '.join(DIMENSIONS)}, toUInt8(1) AS moved"
        f" FROM {layout.table('request_moves')} FINAL WHERE {_RANGE}) AS m"
    )


def _folded(layout: Layout) -> str:
    """The folded requests in range, their folded values."""
    values = [c for c in ROW_COLUMNS if c not in ("start", "trace_id", "span_id")]
    return (
        f"(SELECT start, trace_id, span_id, {', '.join(values)}, folded"
        f" FROM {layout.table('request_folds')} FINAL WHERE {_RANGE} AND folded = 1) AS f"
    )


def _raw_view(layout: Layout, name: str, attributed: bool) -> str:
    columns = []
    for c in ROW_COLUMNS:
        if attributed and c in DIMENSIONS:
            columns.append(f"if(m.moved = 1, m.{c}, r.{c}) AS {c}")
        elif c in KEPT or c == "insert_token":  # a fold keeps these (``core.sequences``)
            columns.append(f"r.{c} AS {c}")
        else:
            columns.append(f"if(f.folded = 1, f.{c}, r.{c}) AS {c}")
    moves = f" LEFT ANY JOIN {_moved(layout)} ON {_KEY_JOIN.format('m')}" if attributed else ""
    return (
        f"CREATE VIEW IF NOT EXISTS {layout.table(name)}{layout.on_cluster}"
        f" AS SELECT {', '.join(columns)} FROM {layout.table('requests')} AS r FINAL{moves}"
        f" LEFT ANY JOIN {_folded(layout)} ON {_KEY_JOIN.format('f')}"
        f" WHERE {_RANGE.replace('start', 'r.start')}"
    )


def _bucket(resolution: str) -> str:
    minute = "toDateTime(toStartOfMinute(start), 'UTC')"
    floor = _FLOORS[resolution]
    return f"toDateTime({floor}({minute}), 'UTC')" if floor else minute


def _folded_rollups(layout: Layout, resolution: str, attributed: bool) -> str:
    def pick(column: str) -> str:
        return f"if(sign < 0, was_{column}, {column})"

    values = [
        "toUInt64(sign) AS requests",
        f"toUInt64(sign * ({pick('status')} = 'error')) AS errors",
        *(f"toUInt64(sign * ifNull({pick(n)}, 0)) AS {n}" for n in TOKEN_FIELDS),
    ]
    marks = ["toUInt64(0) AS requests", "toUInt64(0) AS errors"]
    marks += [f"toUInt64(0) AS {n}" for n in TOKEN_FIELDS]
    for metric, field in zip(_METRICS, DURATION_FIELDS, strict=True):
        key, value = pick(f"{metric}_key"), pick(field)
        values += [
            f"if({key} IS NULL, CAST(map(), 'Map(Int64, UInt64)'),"
            f" map(toInt64(assumeNotNull({key})), toUInt64(sign))) AS {metric}_buckets",
            f"toUInt64(sign * ({value} IS NOT NULL AND {key} IS NULL)) AS {metric}_zero",
            f"sign * ifNull({value}, 0) AS {metric}_sum",
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
    table = layout.table("request_folds")
    if attributed:
        # The fold's rows in the series the request is in: its move's, if it was moved.
        columns = ", ".join(
            f"if(m.moved = 1, m.{c}, r.{c}) AS {c}" if c in DIMENSIONS else f"r.{c} AS {c}"
            for c in FOLD_COLUMNS
        )
        source = (
            f"(SELECT {columns} FROM {table} AS r FINAL LEFT ANY JOIN {_moved(layout)}"
            f" ON {_KEY_JOIN.format('m')} WHERE {_RANGE.replace('start', 'r.start')}"
            " AND r.folded = 1)"
        )
        mark_labels = ", ".join(f"at_{n} AS {n}" if n in DIMENSIONS else n for n in GROUP_LABELS)
        name = f"request_folds_attributed_{resolution}"
    else:
        source = f"(SELECT * FROM {table} FINAL WHERE {_RANGE} AND folded = 1)"
        mark_labels = ", ".join(GROUP_LABELS)
        name = f"request_folds_{resolution}"
    bucket = _bucket(resolution)
    return (
        f"CREATE VIEW IF NOT EXISTS {layout.table(name)}{layout.on_cluster}"
        f" AS SELECT {bucket} AS bucket, {', '.join(GROUP_LABELS)}, {', '.join(values)}"
        f" FROM {source} ARRAY JOIN [toInt8(-1), toInt8(1)] AS sign"
        f" UNION ALL SELECT {bucket} AS bucket, {mark_labels}, {', '.join(marks)}"
        f" FROM {layout.table('request_fold_marks')} FINAL WHERE {_RANGE}"
    )


def sequence_tables(layout: Layout, request_table: RequestTable) -> list[str]:
    """Schema step 11's statements (``request_table``: ``schema``'s maker of a table of
    request rows, given so that this module need not import ``schema``)."""
    return [
        *_folds(layout, request_table),
        *_marks(layout),
        _raw_view(layout, "requests_folded", attributed=False),
        _raw_view(layout, "requests_current", attributed=True),
        *(_folded_rollups(layout, r, attributed=False) for r in _FLOORS),
        *(_folded_rollups(layout, r, attributed=True) for r in _FLOORS),
    ]


__all__ = ["FOLD_COLUMNS", "FOLD_MARK_COLUMNS", "WAS_COLUMNS", "sequence_tables"]
