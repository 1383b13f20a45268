"""Request rollups: per-series, per-bucket counts and sketches, merged as batches arrive.

``deltas_from_batch`` turns a batch of freshly stored records (``storage.batch.Batch``, held as
columns) into one delta per (resolution, bucket, series) at all three resolutions in a few
vectorised passes (``RollupInputs`` converts the rows, a slice at a time if the caller streams
them, and groups them once); ``apply``
merges those deltas into ``request_rollups`` (sketches are merged, never recomputed). Because
the writer only rolls up the records its insert actually stored, a replayed batch changes
nothing. Hour and day rows are maintained directly, so late data lands in every resolution.

Concurrency: several writers may merge into the same rows. ``apply`` first inserts empty rows
for every key (doing nothing on conflict), then locks the keys in primary-key order with
``SELECT … FOR UPDATE`` (PostgreSQL; SQLite has one writer at a time), merges and updates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from operator import is_
from typing import Any, Final

import numpy as np
from sqlalchemy import Connection, and_, bindparam, select, tuple_, update

from infersight.core.records import DURATION_FIELDS, GROUP_LABELS, Status
from infersight.core.sketch import (
    FloatArray,
    IntArray,
    QuantileSketch,
    merge_all,
    sketches_by_group,
)
from infersight.core.window import Resolution
from infersight.storage.batch import Batch
from infersight.storage.sql import insert_for
from infersight.storage.tables import SKETCH_COLUMNS, request_rollups

COUNTERS: Final = ("requests", "errors", "input_tokens", "output_tokens", "cached_tokens")
_SERIES_SHIFT: Final = 1 << 32
_KEY_CHUNK: Final = 500
#: Joins a series' labels into one key (a control character that labels practically never hold).
_SEPARATOR: Final = "\x1f"
#: Separators in a series key joined from its labels.
_JOINS: Final = len(GROUP_LABELS) - 1
#: ``status is Status.ERROR`` (enum members are singletons), in C.
_IS_ERROR: Final = partial(is_, Status.ERROR)
_TOKEN_COUNTERS: Final = ("input_tokens", "output_tokens", "cached_tokens")


@dataclass(frozen=True, slots=True, order=True)
class RollupKey:
    resolution: str
    bucket: datetime
    model: str
    instance: str
    tenant: str
    priority: str
    adapter: str
    team: str
    workload: str


@dataclass(slots=True)
class RollupDelta:
    key: RollupKey
    counters: dict[str, int]
    sketches: dict[str, QuantileSketch] = field(default_factory=dict)
    #: Values to take back out of the stored sketches (a stored request corrected:
    #: ``correction``); counters take back by being negative.
    removed: dict[str, QuantileSketch] = field(default_factory=dict)


def correction(old: Batch, new: Batch) -> list[RollupDelta]:
    """The deltas that turn the rollups of stored rows ``old`` into those of ``new`` (the
    same requests, corrected): ``new``'s values in, ``old``'s out."""
    out: dict[RollupKey, RollupDelta] = {d.key: d for d in deltas_from_batch(new)}
    for gone in deltas_from_batch(old):
        delta = out.setdefault(gone.key, RollupDelta(gone.key, dict.fromkeys(COUNTERS, 0)))
        for name, value in gone.counters.items():
            delta.counters[name] -= value
        delta.removed = gone.sketches
    return list(out.values())


def deltas_from_batch(batch: Batch) -> list[RollupDelta]:
    """One delta per (resolution, bucket, series) that the batch's records touch."""
    inputs = RollupInputs()
    inputs.add(batch.fields())
    return inputs.deltas()


class RollupInputs:
    """A batch's per-row rollup inputs as arrays, converted a slice of columns at a time.

    Converting the rows (timestamps, statuses, token counts, durations, series labels) is the
    per-row part of the deltas; grouping them (``deltas``) is done once for the whole batch.
    The PostgreSQL writer adds each slice while the server inserts the slice it copied before,
    so the conversion costs the writer no wall time; ``deltas_from_batch`` adds one slice.
    Series ids stay the same across slices.
    """

    __slots__ = ("_index", "_labels", "_parts", "_rows")

    def __init__(self) -> None:
        self._index: dict[Any, int] = {}
        self._labels: list[tuple[str, ...]] = []
        self._parts: dict[str, list[Any]] = {}
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, columns: Mapping[str, list[Any]]) -> None:
        """Convert one slice of records, given as columns by field name."""
        n = len(columns["start"])
        if not n:
            return
        # Per-row work stays in C (map over builtins and dict lookups): this runs for every row.
        converted = {
            "series": self._series_ids(columns),
            "epoch": np.fromiter(map(datetime.timestamp, columns["start"]), np.float64, n),
            "errors": np.fromiter(map(_IS_ERROR, columns["status"]), np.bool_, n),
            **{
                name: np.nan_to_num(_floats(columns[name])).astype(np.int64)
                for name in _TOKEN_COUNTERS
            },
            # numpy turns None ("not reported") into NaN, which the sketches skip.
            **{name: _floats(columns[name]) for name in DURATION_FIELDS},
        }
        for name, array in converted.items():
            self._parts.setdefault(name, []).append(array)
        self._rows += n

    def deltas(self) -> list[RollupDelta]:
        """One delta per (resolution, bucket, series) that the rows added so far touch."""
        if not self._rows:
            return []
        arrays = {
            name: parts[0] if len(parts) == 1 else np.concatenate(parts)
            for name, parts in self._parts.items()
        }
        counters = {
            "requests": np.ones(self._rows, dtype=np.int64),
            "errors": arrays["errors"],
            **{name: arrays[name] for name in _TOKEN_COUNTERS},
        }
        minute = Resolution.MINUTE.seconds
        buckets = np.floor(arrays["epoch"] / minute).astype(np.int64)
        first = buckets.min()
        unique, group_ids = np.unique(
            arrays["series"] * _SERIES_SHIFT + (buckets - first), return_inverse=True
        )
        groups = unique.size
        sums = {
            name: np.bincount(group_ids, weights=arr, minlength=groups)
            .round()
            .astype(np.int64)
            .tolist()
            for name, arr in counters.items()
        }
        sketches = {
            column: sketches_by_group(group_ids, arrays[field_name], groups)
            for column, field_name in SKETCH_COLUMNS.items()
        }
        series_of = (unique // _SERIES_SHIFT).tolist()
        bucket_of = (unique % _SERIES_SHIFT + first).tolist()
        minutes = [
            RollupDelta(
                RollupKey(
                    Resolution.MINUTE.value,
                    datetime.fromtimestamp(bucket_of[g] * minute, tz=UTC),
                    *self._labels[series_of[g]],
                ),
                {name: values[g] for name, values in sums.items()},
                {c: sk for c, per in sketches.items() if (sk := per[g]) is not None},
            )
            for g in range(groups)
        ]
        return minutes + _coarsen(minutes, Resolution.HOUR) + _coarsen(minutes, Resolution.DAY)

    def _series_ids(self, columns: Mapping[str, list[Any]]) -> IntArray:
        """Dense series ids of the slice's rows, numbering series not seen before."""
        label_columns = [columns[name] for name in GROUP_LABELS]
        # A series is keyed by its labels joined into one string, not by a tuple: a list of
        # tuples per slice would wake the garbage collector, which then walks every live
        # object. A joined key is unambiguous while it holds exactly the joining separators;
        # the rare row whose labels hold the separator themselves is keyed by its tuple.
        keys: list[Any] = list(map(_SEPARATOR.join, zip(*label_columns, strict=True)))
        if any(_SEPARATOR in value for column in label_columns for value in set(column)):
            keys = [
                key if key.count(_SEPARATOR) == _JOINS else labels
                for key, labels in zip(keys, zip(*label_columns, strict=True), strict=True)
            ]
        index = self._index
        for key in dict.fromkeys(keys):
            if key not in index:
                index[key] = len(self._labels)
                self._labels.append(tuple(key.split(_SEPARATOR)) if isinstance(key, str) else key)
        return np.fromiter(map(index.__getitem__, keys), np.int64, len(keys))


def _floats(column: list[Any]) -> FloatArray:
    """The column as float64, ``None`` ("not reported") as NaN.

    numpy converts a list holding ``None`` element by element through Python objects, ten
    times slower than a list of numbers; a column is usually all numbers or all ``None``
    (a stage the engine never reports). Only a column that starts with ``None`` is counted
    (``list.count`` compares every number with ``None``: as slow as the conversion itself).
    """
    if column and column[0] is None and column.count(None) == len(column):
        return np.full(len(column), np.nan)
    return np.array(column, dtype=np.float64)


def _coarsen(minutes: Sequence[RollupDelta], resolution: Resolution) -> list[RollupDelta]:
    """Merge minute deltas into the coarser buckets that contain them."""
    grouped: dict[RollupKey, list[RollupDelta]] = {}
    for delta in minutes:
        key = replace(
            delta.key, resolution=resolution.value, bucket=resolution.floor(delta.key.bucket)
        )
        grouped.setdefault(key, []).append(delta)
    out = []
    for key, parts in grouped.items():
        counters = {name: sum(p.counters[name] for p in parts) for name in COUNTERS}
        sketches = {}
        for column in SKETCH_COLUMNS:
            present = [sk for p in parts if (sk := p.sketches.get(column)) is not None]
            if present:
                sketches[column] = present[0] if len(present) == 1 else merge_all(present)
        out.append(RollupDelta(key, counters, sketches))
    return out


def _key_columns() -> Any:
    c = request_rollups.c
    return tuple_(c.resolution, c.bucket, *(c[name] for name in GROUP_LABELS))


def apply(connection: Connection, deltas: Sequence[RollupDelta]) -> int:
    """Merge ``deltas`` into ``request_rollups`` inside the caller's transaction."""
    if not deltas:
        return 0
    ordered = sorted(deltas, key=lambda d: d.key)
    if connection.dialect.name == "postgresql":
        _apply_postgres(connection, ordered)
    else:
        _apply_portable(connection, ordered)
    return len(deltas)


def _new_row(delta: RollupDelta) -> dict[str, Any]:
    """The row of a key no writer has rolled up yet: the delta as it is."""
    return {
        "resolution": delta.key.resolution,
        "bucket": delta.key.bucket,
        **{name: getattr(delta.key, name) for name in GROUP_LABELS},
        **delta.counters,
        **{column: _bytes(delta.sketches.get(column)) for column in SKETCH_COLUMNS},
    }


def _bytes(sketch: QuantileSketch | None) -> bytes | None:
    return None if sketch is None else sketch.to_bytes()


def _merged(row: Any, delta: RollupDelta) -> dict[str, Any]:
    """The counters and sketches of stored ``row`` with ``delta`` merged in."""
    values: dict[str, Any] = {name: row[name] + delta.counters[name] for name in COUNTERS}
    for column in SKETCH_COLUMNS:
        add = delta.sketches.get(column)
        take = delta.removed.get(column)
        stored = row[column]
        if add is None and (take is None or stored is None):
            values[column] = stored
        elif stored is None:
            values[column] = add.to_bytes() if add is not None else None
        else:
            merged = QuantileSketch.from_bytes(stored)
            if take is not None:
                merged.subtract(take)
            if add is not None:
                merged.merge(add)
            values[column] = merged.to_bytes() if merged.count else None
    return values


def _apply_portable(connection: Connection, ordered: list[RollupDelta]) -> None:
    """SQLite (one writer at a time): SQLAlchemy statements, new keys inserted with their
    deltas, the others read, merged and updated."""
    c = request_rollups.c
    statement = (
        insert_for(connection, request_rollups)
        .on_conflict_do_nothing()
        .returning(c.resolution, c.bucket, *(c[name] for name in GROUP_LABELS))
    )
    new_rows = [_new_row(d) for d in ordered]
    inserted = {RollupKey(*row) for row in connection.execute(statement, new_rows)}
    ordered = [d for d in ordered if d.key not in inserted]
    if not ordered:
        return
    existing: dict[RollupKey, Any] = {}
    for i in range(0, len(ordered), _KEY_CHUNK):
        chunk = ordered[i : i + _KEY_CHUNK]
        keys = [
            (d.key.resolution, d.key.bucket, *(getattr(d.key, n) for n in GROUP_LABELS))
            for d in chunk
        ]
        query = (
            select(request_rollups)
            .where(_key_columns().in_(keys))
            .order_by(*request_rollups.primary_key.columns)
        )
        for row in connection.execute(query).mappings():
            key = RollupKey(row["resolution"], row["bucket"], *(row[n] for n in GROUP_LABELS))
            existing[key] = row
    updates = []
    for delta in ordered:
        values = _merged(existing[delta.key], delta)
        for name in ("resolution", "bucket", *GROUP_LABELS):
            values[f"b_{name}"] = getattr(delta.key, name)
        updates.append(values)
    merge = (
        update(request_rollups)
        .where(
            and_(
                c.resolution == bindparam("b_resolution"),
                c.bucket == bindparam("b_bucket"),
                *(c[name] == bindparam(f"b_{name}") for name in GROUP_LABELS),
            )
        )
        .values({name: bindparam(name) for name in (*COUNTERS, *SKETCH_COLUMNS)})
    )
    connection.execute(merge, updates)


_KEY_NAMES: Final = ("resolution", "bucket", *GROUP_LABELS)
_VALUE_NAMES: Final = (*COUNTERS, *SKETCH_COLUMNS)
_PG_ARRAY_TYPES: Final = {
    "resolution": "text[]",
    "bucket": "timestamptz[]",
    **dict.fromkeys(GROUP_LABELS, "text[]"),
    **dict.fromkeys(COUNTERS, "int8[]"),
    **dict.fromkeys(SKETCH_COLUMNS, "bytea[]"),
}


def _unnest(names: Sequence[str]) -> str:
    """``unnest`` of one array parameter per column, named as the columns."""
    arrays = ", ".join(f"%b::{_PG_ARRAY_TYPES[name]}" for name in names)
    return f"unnest({arrays}) AS u({', '.join(names)})"


_KEY_LIST: Final = ", ".join(_KEY_NAMES)
_ALL_LIST: Final = ", ".join((*_KEY_NAMES, *_VALUE_NAMES))
_KEYS_MATCH: Final = " AND ".join(f"r.{name} = u.{name}" for name in _KEY_NAMES)
# Constant statements with one array per column: psycopg parses each once, PostgreSQL plans
# each once per connection, and a batch's hundreds of keys travel as a few arrays instead of
# thousands of bound parameters in VALUES lists of every length.
# The arrays go in binary (``%b``) and the rows come back in binary: the sketches are bytea,
# which the text format escapes element by element (~8 % of the writer's time, bench_storage).
_PG_INSERT: Final = (
    f"INSERT INTO request_rollups AS r ({_ALL_LIST}) "
    f"SELECT {_ALL_LIST} FROM {_unnest((*_KEY_NAMES, *_VALUE_NAMES))} "
    f"ON CONFLICT DO NOTHING RETURNING {_KEY_LIST}"
)
_PG_LOCK: Final = (
    f"SELECT r.* FROM request_rollups r JOIN {_unnest(_KEY_NAMES)} ON {_KEYS_MATCH} "
    f"ORDER BY {', '.join(f'r.{name}' for name in _KEY_NAMES)} FOR UPDATE OF r"
)
_PG_UPDATE: Final = (
    f"UPDATE request_rollups r SET {', '.join(f'{n} = u.{n}' for n in _VALUE_NAMES)} "
    f"FROM {_unnest((*_KEY_NAMES, *_VALUE_NAMES))} WHERE {_KEYS_MATCH}"
)


def _apply_postgres(connection: Connection, ordered: list[RollupDelta]) -> None:
    """PostgreSQL: new keys inserted with their deltas (in key order, so concurrent writers
    meet each other's new rows in one order), then the keys that had a row locked in key
    order, merged and updated."""
    from psycopg.rows import dict_row  # noqa: PLC0415 (PostgreSQL only)

    raw = connection.connection.driver_connection
    assert raw is not None
    rows = [_new_row(d) for d in ordered]
    columns = [[row[name] for row in rows] for name in (*_KEY_NAMES, *_VALUE_NAMES)]
    with raw.cursor() as cursor:
        cursor.execute(_PG_INSERT, columns, binary=True)
        inserted = {_pg_key(row) for row in cursor.fetchall()}
    ordered = [d for d in ordered if d.key not in inserted]
    if not ordered:
        return
    keys = [[getattr(d.key, name) for d in ordered] for name in _KEY_NAMES]
    with raw.cursor(row_factory=dict_row) as cursor:
        cursor.execute(_PG_LOCK, keys, binary=True)
        existing = {_pg_key(tuple(row[n] for n in _KEY_NAMES)): row for row in cursor}
    merged = [_merged(existing[d.key], d) for d in ordered]
    values = [[m[name] for m in merged] for name in _VALUE_NAMES]
    with raw.cursor() as cursor:
        cursor.execute(_PG_UPDATE, [*keys, *values])


def _pg_key(row: Sequence[Any]) -> RollupKey:
    resolution, bucket, *labels = row
    return RollupKey(resolution, bucket.astimezone(UTC), *labels)
