"""Merged latency sketches of rollup rows, kept by a digest of the rows they came from.

A 30-day latency chart adds up about 700 hour rollup rows per series and metric into 120
chart buckets; decoding and merging those sketches took most of the Latency page's second.
Between two page views almost every one of those rows is unchanged: sidecars write into the
latest minutes (and, from spools, an hour or two back). So ``merged_sketches`` first asks the
store, per part (a chart bucket, or the whole segment) and group, for a digest of the rows it
covers — computed in SQL on PostgreSQL (an MD5 over each row's key and the id of the
transaction that wrote its version, ``xmin``, so only the digest travels and no sketch is
hashed), in process on SQLite (where reading the blobs costs no network) — and decodes and
merges only the parts whose digest it has not seen.

Why a cached answer equals a fresh one: the digest covers every row of the part (its
resolution, bucket and series) and, on PostgreSQL, the transaction that wrote each row's
current version (an insert or update always makes a new version stamped with its writer's
id; a row's key never holds two versions from one committed transaction), on SQLite the MD5
of each of its sketch columns; so two equal digests mean the same rows with the same
sketches, up to a 128-bit hash collision (or, on PostgreSQL, a row rewritten exactly 2^32
transactions later, with its part's other rows unchanged, while the entry is still cached); a
row added, merged into (fresh or late data) or deleted changes the digest. The sketches of a
part that missed are read in a second statement together with each row's digest material,
and the merged sketches are kept under the digest of *what that statement read*: a write
between the two statements makes this view show the newer rows, never files them under the
older digest.

Memory: a bounded LRU (``max_entries`` parts and ``max_bytes`` of bucket arrays); one cache per
engine (``sketch_cache``), shared by the threads that serve pages. Cached sketches are shared:
callers must not change them (``merge_all`` makes new ones).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    Text,
    bindparam,
    cast,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by

from infersight.core.records import GROUP_LABELS
from infersight.core.sketch import QuantileSketch, merge_bytes
from infersight.storage.engine import PerEngine
from infersight.storage.sql import sketch_column
from infersight.storage.tables import request_rollups
from infersight.storage.types import UTCDateTime

LabelKey = tuple[str, ...]
#: One part of a read: the group's labels and the part's start (``None``: the whole read).
PartKey = tuple[LabelKey, datetime | None]
Merged = tuple[QuantileSketch | None, ...]

DEFAULT_MAX_ENTRIES: Final = 20_000
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: What a cached sketch costs besides its bucket arrays (the object, its fields, the key).
_OVERHEAD_BYTES: Final = 400


@dataclass
class SketchCacheStats:
    hits: int = 0
    misses: int = 0
    evicted: int = 0


class SketchCache:
    """Merged sketches by ``(fields, digest)``; least recently used first out, bounded in
    entries and in bytes. Thread-safe."""

    def __init__(
        self, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("a sketch cache needs room for at least one entry")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.stats = SketchCacheStats()
        self._entries: OrderedDict[tuple[Any, ...], tuple[Merged, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def get(self, key: tuple[Any, ...]) -> Merged | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return found[0]

    def put(self, key: tuple[Any, ...], sketches: Merged) -> None:
        size = sum(_size(s) for s in sketches)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (sketches, size)
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped
                self.stats.evicted += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


def _size(sketch: QuantileSketch | None) -> int:
    if sketch is None:
        return 0
    return _OVERHEAD_BYTES + 16 * sketch.buckets


#: The process's ``SketchCache`` for an engine's store (created on first use).
sketch_cache: PerEngine[SketchCache] = PerEngine(SketchCache)


def merged_sketches(
    connection: Connection,
    fields: Sequence[str],
    where: ColumnElement[bool],
    group_by: Sequence[str],
    part_s: int | None = None,
    cache: SketchCache | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict[PartKey, Merged]:
    """One merged sketch per latency field in ``fields`` (``ttft_s``…) for each group and part
    of the ``request_rollups`` rows ``where`` picks: parts are ``part_s``-second buckets
    (aligned to the Unix epoch) of the rows' buckets, or the whole read with ``None``. A field
    no row of a part holds is ``None``. Decodes only the parts ``cache`` has not seen as they
    are now.

    With ``params``, ``where`` is a condition built once per shape whose values are
    ``params`` (``storage.sql``'s shaped conditions): the statements around it are then built
    once per shape too (building and keying them cost more CPU than running them)."""
    if not fields:
        raise ValueError("merged_sketches needs at least one field")
    if part_s is not None and part_s < 1:
        raise ValueError("part_s must be at least one second")
    cache = cache if cache is not None else sketch_cache(connection.engine)
    shape = (tuple(fields), where, tuple(group_by), part_s)
    if connection.dialect.name == "postgresql":
        statements = _pg_statements(*shape) if params is not None else _pg_build(*shape)
        return _postgres(connection, statements, shape, dict(params or {}), cache)
    statement = _sqlite_statement(*shape) if params is not None else _sqlite_build(*shape)
    return _in_process(connection, statement, shape, dict(params or {}), cache)


def _any_sketch(fields: Sequence[str]) -> ColumnElement[bool]:
    return or_(*(sketch_column(f).is_not(None) for f in fields))


#: The transaction that wrote a row's version (PostgreSQL's ``xmin`` system column).
_WRITTEN_BY: Final = cast(literal_column("request_rollups.xmin"), Text)


def _row_text(fields: Sequence[str]) -> ColumnElement[Any]:
    """A row's digest material on PostgreSQL: its key and the transaction that wrote its
    version (``xmin``). Every insert or update of a row makes a new version with the writing
    transaction's id, so the pair changes whenever the row's sketches may have (``fields`` is
    kept in the cache key instead). Hashing each sketch (its MD5) cost PostgreSQL most of a
    30-day chart's read."""
    r = request_rollups.c
    return func.concat_ws(
        "|", r.resolution, r.bucket, *(r[name] for name in GROUP_LABELS), _WRITTEN_BY
    )


#: The key of a read's statements: fields, condition, group-by labels and part seconds.
Shape = tuple[tuple[str, ...], ColumnElement[bool], tuple[str, ...], int | None]


def _part_of(part_s: int | None) -> ColumnElement[Any] | None:
    """The start of a row's part (``part_s`` seconds, epoch-aligned); ``None`` without parts."""
    if part_s is None:
        return None
    return func.date_bin(
        text(f"interval '{int(part_s)} seconds'"),
        request_rollups.c.bucket,
        literal(_EPOCH, UTCDateTime()),
        type_=UTCDateTime(),
    )


def _pg_build(
    fields: tuple[str, ...],
    where: ColumnElement[bool],
    group_by: tuple[str, ...],
    part_s: int | None,
) -> tuple[Select[Any], Select[Any]]:
    """PostgreSQL's two statements: each part's digest, then the rows of the parts missed
    (those whose start is in the ``parts`` parameter, with parts)."""
    r = request_rollups.c
    keys = [r[name] for name in group_by]
    # The part's start, selected first; without parts, a constant NULL in its place.
    part = _part_of(part_s)
    parts_sel = [part] if part is not None else []
    row_order = [r.resolution, r.bucket, *(r[name] for name in GROUP_LABELS)]
    digest = func.md5(
        func.string_agg(_row_text(fields), aggregate_order_by(literal(","), *row_order))
    )
    digests = (
        select(*parts_sel, *keys, digest)
        .where(where, _any_sketch(fields))
        .group_by(*parts_sel, *keys)
    )
    condition = [where, _any_sketch(fields)]
    if part is not None:
        condition.append(part.in_(bindparam("parts", expanding=True)))
    blobs = [sketch_column(f) for f in fields]
    rows = (
        select(*parts_sel, *keys, _row_text(fields), *blobs)
        .where(*condition)
        .order_by(*parts_sel, *keys, *row_order)
    )
    return digests, rows


_pg_statements = lru_cache(maxsize=256)(_pg_build)


def _postgres(
    connection: Connection,
    statements: tuple[Select[Any], Select[Any]],
    shape: Shape,
    params: dict[str, Any],
    cache: SketchCache,
) -> dict[PartKey, Merged]:
    fields, _where, group_by, part_s = shape
    digests, blob_rows = statements
    with_part = part_s is not None
    found = connection.execute(digests, params).all()
    width = len(group_by)
    out: dict[PartKey, Merged] = {}
    missing: set[PartKey] = set()
    for row in found:
        pk = _part_key(row, with_part, width)
        hit = cache.get((fields, row[-1]))
        if hit is None:
            missing.add(pk)
        else:
            out[pk] = hit
    if not missing:
        return out
    if with_part:
        params = {**params, "parts": sorted({at for _, at in missing if at is not None})}
    rows = connection.execute(blob_rows, params).all()
    groups: dict[PartKey, tuple[list[str], list[list[bytes]]]] = {}
    skip = (1 if with_part else 0) + width
    for row in rows:
        values: Sequence[Any] = tuple(row)
        pk = _part_key(values, with_part, width)
        if pk not in missing:
            continue
        texts, parts = groups.setdefault(pk, ([], [[] for _ in fields]))
        texts.append(str(values[skip]))
        for i, blob in enumerate(values[skip + 1 :]):
            if blob is not None:
                parts[i].append(bytes(blob))
    for pk, (texts, parts) in groups.items():
        merged = _merge(parts)
        cache.put(
            (fields, hashlib.md5(",".join(texts).encode(), usedforsecurity=False).hexdigest()),
            merged,
        )
        out[pk] = merged
    return out


def _part_key(row: Sequence[Any], with_part: bool, width: int) -> PartKey:
    if with_part:
        return (tuple(row[1 : 1 + width]), row[0])
    return (tuple(row[:width]), None)


def _sqlite_build(
    fields: tuple[str, ...],
    where: ColumnElement[bool],
    group_by: tuple[str, ...],
    part_s: int | None,
) -> Select[Any]:
    """SQLite's one statement: the rows with their blobs."""
    r = request_rollups.c
    labels = [r[name] for name in GROUP_LABELS]
    blobs = [sketch_column(f) for f in fields]
    return (
        select(r.resolution, r.bucket, *labels, *blobs)
        .where(where, _any_sketch(fields))
        .order_by(r.resolution, r.bucket, *labels)
    )


_sqlite_statement = lru_cache(maxsize=256)(_sqlite_build)


def _in_process(
    connection: Connection,
    statement: Select[Any],
    shape: Shape,
    params: dict[str, Any],
    cache: SketchCache,
) -> dict[PartKey, Merged]:
    """SQLite: one statement reads the rows with their blobs (no network to spare); a BLAKE2
    digest per part is computed here, and only the parts not seen are decoded."""
    fields, _where, group_by, part_s = shape
    rows = connection.execute(statement, params).all()
    positions = [GROUP_LABELS.index(name) for name in group_by]
    n = len(GROUP_LABELS)
    grouped: dict[PartKey, list[Any]] = {}
    for row in rows:
        resolution, bucket, *rest = row
        series = rest[:n]
        at = _floor(bucket, part_s) if part_s is not None else None
        pk: PartKey = (tuple(series[p] for p in positions), at)
        grouped.setdefault(pk, []).append((resolution, bucket, series, rest[n:]))
    out: dict[PartKey, Merged] = {}
    for pk, members in grouped.items():
        hashed = hashlib.blake2b(digest_size=16)
        for resolution, bucket, series, sketches in members:
            hashed.update("|".join([resolution, bucket.isoformat(), *series]).encode())
            for blob in sketches:
                data = b"" if blob is None else bytes(blob)
                hashed.update(b"-" if blob is None else len(data).to_bytes(8, "big"))
                hashed.update(data)
        key = (fields, hashed.digest())
        hit = cache.get(key)
        if hit is None:
            parts: list[list[bytes]] = [[] for _ in fields]
            for *_, sketches in members:
                for i, blob in enumerate(sketches):
                    if blob is not None:
                        parts[i].append(blob)
            hit = _merge(parts)
            cache.put(key, hit)
        out[pk] = hit
    return out


def _floor(at: datetime, seconds: int) -> datetime:
    offset = int((at - _EPOCH).total_seconds() // seconds) * seconds
    return _EPOCH + timedelta(seconds=offset)


def _merge(parts: Sequence[Sequence[bytes]]) -> Merged:
    out: list[QuantileSketch | None] = []
    for blobs in parts:
        if not blobs:
            out.append(None)
            continue
        # One blob decoded as it is; more in one pass (``merge_bytes``: no sketch per blob).
        out.append(QuantileSketch.from_bytes(blobs[0]) if len(blobs) == 1 else merge_bytes(blobs))
    return tuple(out)
