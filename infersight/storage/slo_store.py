"""SLO definitions in the store, and the SLI event counts an evaluation needs.

Definitions are stored as a small JSON document of their own (not the user's spec file, whose
format is the API's business), keyed by name. Event counts cover a window the way every query
does (``core.window.split``): raw rows at the partial-minute edges, rollups in between. Rollups
count availability exactly; for a latency SLI they count from the minute sketches, which is
exact except for requests in the sketch bucket that holds the threshold (within 1 %, see
``QuantileSketch.count_at_most``). ``exact=True`` counts raw rows only.

A goodput SLI (several targets that must hold together) cannot be counted from rollups: their
sketches hold each metric apart, and which requests met TTFT *and* TPOT is lost there. Goodput
is counted exactly from raw rows, so its windows reach back as far as raw retention
(``INFERSIGHT_RAW_RETENTION_DAYS``, 14 days by default): a goodput SLO's window longer than
that is measured over the raw rows still kept. With a ``RollupCache`` each closed hour is
counted from raw rows once and kept while the hour's rollup request count still equals the raw
rows it was counted over (``RollupCache.goodput_hours``), so a cycle reads raw rows only for
the partial hours at its windows' ends and for hours that changed.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import (
    Connection,
    Engine,
    Integer,
    and_,
    case,
    func,
    literal,
    or_,
    select,
    union_all,
)
from sqlalchemy.sql.elements import ColumnElement

from infersight.core.errors import InvalidInput
from infersight.core.query import LATENCY_METRICS, Selector
from infersight.core.records import GROUP_LABELS
from infersight.core.sketch import QuantileSketch, merge_all
from infersight.core.slo import EventCounts, GoodputUnit, Sli, SliKind, SloSpec
from infersight.core.window import Resolution, Segment, Window, split
from infersight.storage.documents import NamedDocuments
from infersight.storage.engine import PerEngine
from infersight.storage.sql import (
    raw_where,
    read_segments,
    rollup_where,
    selected,
    sketch_column,
)
from infersight.storage.tables import SKETCH_COLUMNS, request_rollups, requests, slos

#: Labels of a series (their columns lead the rows read per series).
_N: Final = len(GROUP_LABELS)

# -- definitions ----------------------------------------------------------------------------


def spec_to_json(spec: SloSpec) -> str:
    sli: dict[str, Any] = {
        "kind": spec.sli.kind.value,
        "metric": spec.sli.metric,
        "threshold_s": spec.sli.threshold_s,
    }
    if spec.sli.kind is SliKind.GOODPUT:
        sli["targets"] = dict(spec.sli.targets)
        sli["per"] = spec.sli.per.value if spec.sli.per else None
    return json.dumps(
        {
            "sli": sli,
            "objective": spec.objective,
            "window_s": int(spec.window.total_seconds()),
            "selector": dict(spec.selector.items()),
            "description": spec.description,
        },
        sort_keys=True,
    )


@lru_cache(maxsize=1024)
def spec_from_json(name: str, text: str) -> SloSpec:
    """The SLO stored as ``text`` (kept for the last 1,024 documents read: every page and job
    lists the SLOs, and a spec is immutable, so one parse serves every read of the same text)."""
    data = json.loads(text)
    doc = data["sli"]
    targets = tuple((str(m), float(v)) for m, v in (doc.get("targets") or {}).items())
    per = GoodputUnit(doc["per"]) if doc.get("per") else None
    return SloSpec(
        name=name,
        sli=Sli(SliKind(doc["kind"]), doc["metric"], doc["threshold_s"], targets, per),
        objective=float(data["objective"]),
        window=timedelta(seconds=int(data["window_s"])),
        selector=Selector(**data["selector"]),
        description=str(data.get("description", "")),
    )


_SLOS = NamedDocuments(slos, "spec", "SLO")


def put_slo(engine: Engine | Connection, spec: SloSpec, now: datetime) -> bool:
    """Create or replace ``spec``; ``True`` when it was created (on a connection, in the
    caller's transaction)."""
    return _SLOS.put_stamped(engine, spec.name, spec_to_json(spec), now)


def get_slo(engine: Engine, name: str) -> SloSpec:
    return spec_from_json(name, _SLOS.get(engine, name))


def list_slos(engine: Engine) -> list[SloSpec]:
    return [spec_from_json(name, text) for name, text in _SLOS.all(engine)]


def delete_slo(engine: Engine, name: str) -> None:
    _SLOS.delete(engine, name)


# -- event counts ---------------------------------------------------------------------------


def _good_request(sli: Sli) -> ColumnElement[bool]:
    """A goodput SLI's good request as SQL: it succeeded and every target it reported holds."""
    r = requests.c
    return and_(
        r.status != "error",
        *(or_(r[column].is_(None), r[column] <= limit) for column, limit in sli.limits),
    )


def _goodput_weight(sli: Sli) -> ColumnElement[Any]:
    """What one raw row weighs as events of a goodput SLI: 1 (a request) or its output
    tokens."""
    if sli.per is GoodputUnit.REQUEST:
        return literal(1, Integer)
    return func.coalesce(requests.c.output_tokens, 0)


def _goodput_columns(
    sli: Sli, inside: ColumnElement[bool] | None = None
) -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """(events, bad events) of a goodput SLI over raw rows (those ``inside`` when given)."""
    weight = _goodput_weight(sli)
    bad = ~_good_request(sli)
    if inside is not None:
        bad = and_(inside, bad)
    total = weight if inside is None else case((inside, weight), else_=0)
    return (
        func.coalesce(func.sum(total), 0),
        func.coalesce(func.sum(case((bad, weight), else_=0)), 0),
    )


def _raw_counts(
    connection: Connection, sli: Sli, span: Segment | Window, selector: Selector
) -> EventCounts:
    where = [raw_where(span, selector)]
    if sli.kind is SliKind.GOODPUT:
        total, bad = _goodput_columns(sli)
    elif sli.kind is SliKind.AVAILABILITY:
        total = func.count()
        bad = func.sum(case((requests.c.status == "error", 1), else_=0))
    else:
        assert sli.column is not None
        value = requests.c[sli.column]
        where.append(value.is_not(None))
        total = func.count()
        bad = func.sum(case((value > sli.threshold_s, 1), else_=0))
    row = connection.execute(select(total, bad).where(and_(*where))).one()
    return EventCounts(int(row[0] or 0), int(row[1] or 0))


def _rollup_counts(
    connection: Connection, sli: Sli, segment: Segment, selector: Selector
) -> EventCounts:
    where = rollup_where(segment, selector)
    if sli.kind is SliKind.AVAILABILITY:
        row = connection.execute(
            select(func.sum(request_rollups.c.requests), func.sum(request_rollups.c.errors)).where(
                where
            )
        ).one()
        return EventCounts(int(row[0] or 0), int(row[1] or 0))
    assert sli.column is not None
    assert sli.threshold_s is not None
    column = sketch_column(sli.column)
    total = good = 0
    for (blob,) in connection.execute(select(column).where(where, column.is_not(None))):
        sketch = QuantileSketch.from_bytes(blob)
        total += sketch.count
        good += sketch.count_at_most(sli.threshold_s)
    return EventCounts(total, total - good)


def count_events(
    connection: Connection,
    sli: Sli,
    window: Window,
    selector: Selector = Selector(),
    *,
    exact: bool = False,
    finest: Resolution = Resolution.MINUTE,
) -> EventCounts:
    """Events and bad events for ``sli`` among the requests ``selector`` picks in ``window``
    (a goodput SLI: always from raw rows)."""
    if exact or sli.kind is SliKind.GOODPUT:
        return _raw_counts(connection, sli, window, selector)
    counts = EventCounts(0, 0)
    for part in read_segments(
        window,
        finest,
        lambda segment: _raw_counts(connection, sli, segment, selector),
        lambda segment: _rollup_counts(connection, sli, segment, selector),
    ):
        counts += part
    return counts


def count_windows(
    connection: Connection,
    spec: SloSpec,
    windows: Iterable[timedelta],
    now: datetime,
    *,
    finest_for: FinestFor | None = None,
) -> dict[timedelta, EventCounts]:
    """Counts for ``spec`` over each window that ends at ``now`` (burn windows, SLO window)."""
    return CycleCounter(connection, now, finest_for).count(spec, windows)


FinestFor = Callable[[Window, datetime], Resolution]
_Key = tuple[str, ...]
#: A rollup row: (resolution, bucket, series labels).
_RowKey = tuple[str, datetime, _Key]


@dataclass(slots=True)
class _Row:
    """What the cache knows of one rollup row: its totals, and what was derived from it."""

    requests: int
    errors: int
    digest: bytes | None
    """A hash of the row's sketch columns when its totals were read (``None``: unknown)."""
    sketches: dict[str, QuantileSketch | None] = field(default_factory=dict)
    """Sketch column → the row's sketch (``None``: the column is empty), read on demand."""
    counts: dict[tuple[str, float], tuple[int, int]] = field(default_factory=dict)
    """(sketch column, threshold) → (events, good events) of that sketch."""
    used: float = 0.0


@dataclass(slots=True)
class CacheStats:
    rows_checked: int = 0
    """Rollup rows whose totals were read to validate the cache."""
    rows_reloaded: int = 0
    """Rows new to the cache, or whose totals had changed (late or fresh data)."""
    sketches_read: int = 0
    """Sketch blobs read and decoded."""
    rows_dropped: int = 0
    goodput_hours_counted: int = 0
    """Closed hours a goodput SLI counted from raw rows (new, or changed since)."""


class RollupCache:
    """Per-row SLI event counts kept across evaluation cycles, so that a cycle decodes only
    the rollup sketches that changed.

    A ``CycleCounter`` given this cache still reads, for the rollup segments it needs (in one
    query), each row's ``(requests, errors)`` and a fingerprint of its sketch columns (their
    MD5 computed by PostgreSQL; on SQLite a BLAKE2 hash of the blobs, read in process). A row
    whose totals and fingerprint equal the cached ones reuses the sketches decoded and the
    counts derived from it earlier; any other row (new, merged into by fresh or spooled late
    data, deleted and recreated) is read again. Raw edges are always read afresh: they move
    with ``now`` and hold under a minute of requests each.

    Why the answer equals a fresh ``CycleCounter``'s: per row, the events and good events of
    a threshold are a function of the row's sketch alone, and sketch counts add up over rows
    (``count_at_most`` of merged sketches is the sum over the parts), so summing cached per-row
    counts gives what merging the rows' sketches does. A cached row is used only while its
    fingerprint matches the store's, i.e. while its sketches are the ones decoded (up to a
    128-bit hash collision). Sketches are read after the totals, in a second statement; a
    merge in between is caught by the fingerprint that statement returns, which then marks
    the row for a fresh read next cycle (this cycle counts what it read, as a fresh counter
    reading statement by statement would). ``tests/storage/test_rollup_cache.py`` holds the
    equivalence over many cycles with fresh and late writes in between.

    Memory: rows not used for ``idle_s`` seconds (they left every window, or their buckets
    are now answered by a coarser resolution) are dropped when the next cycle begins.
    Thread-safe: the evaluation job, ``/metrics`` and the pages share one cache per engine
    (``rollup_cache``).
    """

    def __init__(self, idle_s: float = 600.0, monotonic: Callable[[], float] = time.monotonic):
        self.idle_s = idle_s
        self.monotonic = monotonic
        self.stats = CacheStats()
        self._rows: dict[_RowKey, _Row] = {}
        #: (goodput SLI, selector) → hour → (the hour's rollup fingerprint when it was
        #: counted, events, bad events).
        self._goodput: dict[tuple[Sli, Selector], dict[datetime, tuple[_HourPrint, int, int]]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def goodput_hours(
        self, connection: Connection, sli: Sli, selector: Selector, start: datetime, end: datetime
    ) -> dict[datetime, tuple[int, int]]:
        """(events, bad events) of a goodput SLI per closed hour in ``[start, end)`` (both on
        the hour), for the requests ``selector`` picks: what raw rows say, read from them only
        for hours not counted before or that changed since.

        An hour's count is kept with its rollups' fingerprint (requests, errors, output
        tokens and a digest of the E2E sketches: one read of the hour rollups per call), if
        the raw rows it was counted over were as many as the fingerprint's requests, and
        reused while the fingerprint is unchanged: the writer rolls up exactly the rows it
        stores, in the same transaction, so late data changes the requests, and a late
        parallel-sampling sequence folded into a stored request (its output tokens added, its
        E2E extended) changes the output tokens, errors or the E2E sketch (a sequence with no
        tokens and status ok: the E2E alone); either way the hour is counted again. An hour
        without rollups has no raw rows either. Hours wholly before the oldest raw row (raw
        retention removed them, oldest first) count nothing, as raw rows say; the hour that
        holds the oldest row is
        always counted afresh. Entries older than ``start`` are dropped: an SLO asks for its
        longest window every time, so they are never needed again."""
        if start >= end:
            return {}
        hour = timedelta(hours=1)
        segment = Segment(start, end, Resolution.HOUR)
        rolled = _hour_prints(connection, segment, selector)
        oldest = connection.execute(select(func.min(requests.c.start))).scalar()
        out: dict[datetime, tuple[int, int]] = {}
        missing: list[datetime] = []
        with self._lock:
            kept = self._goodput.setdefault((sli, selector), {})
            for bucket in [b for b in kept if b < start]:
                del kept[bucket]
            for bucket, fingerprint in sorted(rolled.items()):
                if not fingerprint[0] or oldest is None or bucket + hour <= oldest:
                    out[bucket] = (0, 0)
                    continue
                found = kept.get(bucket)
                if found is not None and found[0] == fingerprint and bucket > oldest:
                    out[bucket] = found[1:]
                else:
                    missing.append(bucket)
        counted = _goodput_by_hour(connection, sli, selector, missing)
        with self._lock:
            kept = self._goodput.setdefault((sli, selector), {})
            for bucket, (rows, events, bad) in counted.items():
                out[bucket] = (events, bad)
                if oldest is not None and bucket > oldest and rows == rolled[bucket][0]:
                    kept[bucket] = (rolled[bucket], events, bad)
            self.stats.goodput_hours_counted += len(counted)
        return out

    def begin(self) -> None:
        """Drop the rows no cycle used for ``idle_s`` seconds."""
        horizon = self.monotonic() - self.idle_s
        with self._lock:
            stale = [key for key, row in self._rows.items() if row.used < horizon]
            for key in stale:
                del self._rows[key]
            self.stats.rows_dropped += len(stale)

    def rows(
        self, connection: Connection, segments: Iterable[Segment]
    ) -> dict[Segment, dict[_Key, list[tuple[datetime, _Row]]]]:
        """The current rows of each rollup segment, per series, validated by their totals
        (one query for all of them)."""
        wanted = sorted(set(segments), key=_segment_order)
        if not wanted:
            return {}
        r = request_rollups.c
        labels = [r[name] for name in GROUP_LABELS]
        ranges = [
            and_(r.resolution == resolution, r.bucket >= start, r.bucket < end)
            for resolution, start, end in _merged_ranges(wanted)
        ]
        fingerprint = _fingerprint_columns(connection)
        query = select(r.resolution, r.bucket, *labels, r.requests, r.errors, *fingerprint)
        found = connection.execute(query.where(or_(*ranges))).all()
        now = self.monotonic()
        by_resolution: dict[str, list[tuple[datetime, _Key, _Row]]] = {}
        with self._lock:
            for resolution, bucket, *rest in found:
                key: _RowKey = (resolution, bucket, tuple(rest[:_N]))
                requests_, errors = int(rest[_N] or 0), int(rest[_N + 1] or 0)
                digest = _digest(rest[_N + 2 :])
                row = self._rows.get(key)
                if (
                    row is None
                    or row.digest != digest
                    or row.requests != requests_
                    or row.errors != errors
                ):
                    row = _Row(requests_, errors, digest)
                    self._rows[key] = row
                    self.stats.rows_reloaded += 1
                row.used = now
                by_resolution.setdefault(resolution, []).append((bucket, key[2], row))
            self.stats.rows_checked += len(found)
        out: dict[Segment, dict[_Key, list[tuple[datetime, _Row]]]] = {}
        for resolution, found_rows in by_resolution.items():
            found_rows.sort(key=lambda item: item[0])
            buckets = [bucket for bucket, _, _ in found_rows]
            for seg in wanted:
                if seg.resolution is None or seg.resolution.value != resolution:
                    continue
                lo, hi = bisect_left(buckets, seg.start), bisect_left(buckets, seg.end)
                per_series: dict[_Key, list[tuple[datetime, _Row]]] = {}
                for bucket, series, row in found_rows[lo:hi]:
                    per_series.setdefault(series, []).append((bucket, row))
                out[seg] = per_series
        return {seg: out.get(seg, {}) for seg in wanted}

    def sketch_counts(
        self,
        connection: Connection,
        seg: Segment,
        rows: dict[_Key, list[tuple[datetime, _Row]]],
        column_name: str,
        threshold: float,
    ) -> dict[_Key, tuple[int, int]]:
        """(events, good events) per series of ``seg`` for a latency threshold."""
        missing = [
            (bucket, series, row)
            for series, parts in rows.items()
            for bucket, row in parts
            if column_name not in row.sketches
        ]
        if missing:
            self._read_sketches(connection, seg, column_name, missing)
        memo = (column_name, threshold)
        out = {}
        for series, parts in rows.items():
            total = good = 0
            for _, row in parts:
                counted = row.counts.get(memo)
                if counted is None:
                    sketch = row.sketches.get(column_name)
                    counted = (sketch.count, sketch.count_at_most(threshold)) if sketch else (0, 0)
                    row.counts[memo] = counted
                total, good = total + counted[0], good + counted[1]
            out[series] = (total, good)
        return out

    def _read_sketches(
        self,
        connection: Connection,
        seg: Segment,
        column_name: str,
        missing: list[tuple[datetime, _Key, _Row]],
    ) -> None:
        r = request_rollups.c
        column = r[column_name]
        where = rollup_where(seg)
        buckets = sorted({bucket for bucket, _, _ in missing})
        if len(buckets) <= _IN_LIST_MAX:
            where = and_(where, r.bucket.in_(buckets))
        fingerprint = _fingerprint_columns(connection)
        query = select(r.bucket, *(r[name] for name in GROUP_LABELS), column, *fingerprint)
        blobs = {
            (row[0], tuple(row[1 : _N + 1])): (row[_N + 1], _digest(row[_N + 2 :]))
            for row in connection.execute(query.where(where))
        }
        with self._lock:
            for bucket, series, row in missing:
                blob, digest = blobs.get((bucket, series), (None, None))
                row.sketches[column_name] = QuantileSketch.from_bytes(blob) if blob else None
                if digest != row.digest:
                    # Merged into since its totals were read: right for this cycle (as a
                    # fresh read would be), but the next cycle must read the row again.
                    row.digest = None
            self.stats.sketches_read += len(missing)


#: An hour's rollups as a goodput count is kept against: (requests, errors, output tokens).
#: An hour's rollups for goodput: requests, errors, output tokens and a digest of their E2E
#: sketches (a late sequence folded in with no tokens changes only the E2E).
_HourPrint = tuple[int, int, int, bytes]
#: Hours one statement counts for a goodput SLI (three aggregate columns each).
_HOURS_PER_QUERY: Final = 24


def _goodput_by_hour(
    connection: Connection, sli: Sli, selector: Selector, hours: Sequence[datetime]
) -> dict[datetime, tuple[int, int, int]]:
    """(raw rows, events, bad events) of a goodput SLI in each of ``hours`` (hour starts), from
    raw rows: a statement per run of up to ``_HOURS_PER_QUERY`` consecutive hours."""
    hour = timedelta(hours=1)
    runs: list[list[datetime]] = []
    for bucket in sorted(hours):
        if runs and runs[-1][-1] + hour == bucket and len(runs[-1]) < _HOURS_PER_QUERY:
            runs[-1].append(bucket)
        else:
            runs.append([bucket])
    out = {}
    for run in runs:
        columns: list[ColumnElement[Any]] = []
        for bucket in run:
            inside = and_(requests.c.start >= bucket, requests.c.start < bucket + hour)
            columns.append(func.coalesce(func.sum(case((inside, 1), else_=0)), 0))
            columns += _goodput_columns(sli, inside)
        span = Window(run[0], run[-1] + hour)
        row = connection.execute(select(*columns).where(raw_where(span, selector))).one()
        for i, bucket in enumerate(run):
            out[bucket] = (int(row[3 * i] or 0), int(row[3 * i + 1] or 0), int(row[3 * i + 2] or 0))
    return out


def _hour_prints(
    connection: Connection, segment: Segment, selector: Selector
) -> dict[datetime, _HourPrint]:
    """Each hour's ``_HourPrint`` over the rollup rows ``selector`` picks (one read; the E2E
    sketches' digest is MD5 computed on PostgreSQL, so no blob travels there)."""
    r = request_rollups.c
    e2e = r.e2e_sketch
    sketch = func.md5(e2e) if connection.dialect.name == "postgresql" else e2e
    found: dict[datetime, list[Any]] = {}
    digests: dict[datetime, list[bytes]] = {}
    query = select(r.bucket, r.requests, r.errors, r.output_tokens, sketch)
    for bucket, n, errors, tokens, blob in connection.execute(
        query.where(rollup_where(segment, selector))
    ):
        totals = found.setdefault(bucket, [0, 0, 0])
        totals[0] += int(n or 0)
        totals[1] += int(errors or 0)
        totals[2] += int(tokens or 0)
        digests.setdefault(bucket, []).append(_digest([blob]))
    out: dict[datetime, _HourPrint] = {}
    for bucket, (n, errors, tokens) in found.items():
        hashed = hashlib.blake2b(digest_size=16)
        for digest in sorted(digests[bucket]):  # the rows' order is the store's to choose
            hashed.update(len(digest).to_bytes(8, "big") + digest)
        out[bucket] = (n, errors, tokens, hashed.digest())
    return out


def _fingerprint_columns(connection: Connection) -> list[ColumnElement[Any]]:
    """What identifies a rollup row's sketches: their MD5 on PostgreSQL (computed there, so
    no blob travels); on SQLite, in process, the blobs themselves (``_digest`` hashes them)."""
    columns = [request_rollups.c[name] for name in SKETCH_COLUMNS]
    if connection.dialect.name == "postgresql":
        return [func.md5(func.concat(*columns))]
    return list(columns)


def _digest(values: Sequence[Any]) -> bytes:
    if len(values) == 1 and isinstance(values[0], str):
        return values[0].encode()
    hashed = hashlib.blake2b(digest_size=16)
    for value in values:
        data = bytes(value) if value is not None else b""
        hashed.update(len(data).to_bytes(8, "big") if value is not None else b"-")
        hashed.update(data)
    return hashed.digest()


_IN_LIST_MAX: Final = 200


def _segment_order(seg: Segment) -> tuple[str, datetime, datetime]:
    return (seg.resolution.value if seg.resolution else "", seg.start, seg.end)


def _merged_ranges(segments: Iterable[Segment]) -> list[tuple[str, datetime, datetime]]:
    """The union of ``segments`` as few (resolution, start, end) ranges as cover it."""
    merged: list[tuple[str, datetime, datetime]] = []
    for seg in sorted(segments, key=_segment_order):
        resolution = seg.resolution.value if seg.resolution else ""
        if merged and merged[-1][0] == resolution and seg.start <= merged[-1][2]:
            last = merged[-1]
            merged[-1] = (resolution, last[1], max(last[2], seg.end))
        else:
            merged.append((resolution, seg.start, seg.end))
    return merged


#: The process's ``RollupCache`` for an engine's store (created on first use).
rollup_cache: PerEngine[RollupCache] = PerEngine(RollupCache)


class CycleCounter:
    """Event counts of many SLOs at one ``now``, reading each part of the store once.

    All windows of an evaluation cycle end at the same ``now``, so every SLO's windows split
    into the same few segments (``core.window.split``); only selectors and thresholds differ.
    The counter reads each segment once for every series — rollup counts, rollup sketches
    and the few raw rows at the partial-minute edges — and each SLO then adds up its own
    series. The answer equals ``count_events`` per window.
    ``finest_for(window, now)`` gives the finest rollup resolution still kept for a window
    (``RetentionPolicy.finest_for``); by default minute rollups are assumed everywhere.
    With a ``cache`` (``RollupCache``, kept across cycles) rollup sketches are decoded only
    for rows that changed since an earlier cycle; the answer is the same.
    """

    def __init__(
        self,
        connection: Connection,
        now: datetime,
        finest_for: FinestFor | None = None,
        cache: RollupCache | None = None,
    ) -> None:
        self.connection = connection
        self.now = now
        self.finest_for = finest_for
        self.cache = cache
        if cache is not None:
            cache.begin()
        self._plans: dict[timedelta, list[Segment]] = {}
        self._edges: dict[Segment, dict[_Measure, dict[_Key, tuple[int, int]]]] = {}
        self._totals: dict[Segment, dict[_Key, tuple[int, int]]] = {}
        self._sketches: dict[tuple[str, Segment], dict[_Key, QuantileSketch]] = {}
        self._rows: dict[Segment, dict[_Key, list[tuple[datetime, _Row]]]] = {}
        self._latency: dict[tuple[str, float, Segment], dict[_Key, tuple[int, int]]] = {}

    def prepare(self, windows: Iterable[timedelta], slis: Iterable[Sli] = ()) -> None:
        """Read what every window of ``windows`` needs up front: the raw edges' event counts
        for availability and every SLI of ``slis`` in one query and, with a cache, the rollup
        rows' totals in another (instead of one per segment).
        Optional; ``count`` reads whatever is still missing."""
        wanted = {seg for length in set(windows) for seg in self._plan(length)}
        edges = sorted((seg for seg in wanted if seg.raw), key=lambda seg: seg.start)
        measures = list(dict.fromkeys([None, *(_measure(sli) for sli in slis)]))
        if edges:
            self._read_edges(edges, measures)
        if self.cache is not None:
            rollups = [seg for seg in wanted if not seg.raw and seg not in self._rows]
            self._rows.update(self.cache.rows(self.connection, rollups))

    def count(self, spec: SloSpec, windows: Iterable[timedelta]) -> dict[timedelta, EventCounts]:
        if spec.sli.kind is SliKind.GOODPUT:
            return self._goodput(spec, windows)
        plans = {length: self._plan(length) for length in windows}
        wanted = {seg for plan in plans.values() for seg in plan}
        pinned = [(GROUP_LABELS.index(name), value) for name, value in spec.selector.items()]
        per_segment = {seg: self._segment(spec.sli, seg, pinned) for seg in wanted}
        out = {}
        for length, plan in plans.items():
            total = EventCounts(0, 0)
            for seg in plan:
                total += per_segment[seg]
            out[length] = total
        return out

    def _goodput(self, spec: SloSpec, windows: Iterable[timedelta]) -> dict[timedelta, EventCounts]:
        """A goodput SLI's counts over every window, from raw rows (rollups keep each metric
        apart). Without a cache: one statement that scans the longest window once and sums each
        window's events and bad events by its start. With one: the closed hours through
        ``RollupCache.goodput_hours``, and one statement for the partial hours at the windows'
        two ends (the same answer)."""
        lengths = sorted(set(windows))
        if not lengths:
            return {}
        if lengths[0] <= timedelta(0):
            raise InvalidInput("windows must be positive")
        if self.cache is not None:
            return self._goodput_hourly(spec, lengths)
        columns: list[ColumnElement[Any]] = []
        for length in lengths:
            inside = requests.c.start >= Window.last(length, self.now).start
            columns += _goodput_columns(spec.sli, inside)
        window = Window.last(lengths[-1], self.now)
        row = self.connection.execute(
            select(*columns).where(raw_where(window, spec.selector))
        ).one()
        return {
            length: EventCounts(int(row[2 * i] or 0), int(row[2 * i + 1] or 0))
            for i, length in enumerate(lengths)
        }

    def _goodput_hourly(
        self, spec: SloSpec, lengths: list[timedelta]
    ) -> dict[timedelta, EventCounts]:
        """``_goodput`` through the cache: each window is its partial hour at the start (raw),
        its closed hours (kept counts) and the current hour up to ``now`` (raw)."""
        assert self.cache is not None
        top = Resolution.HOUR.floor(self.now)
        starts = {length: self.now - length for length in lengths}
        firsts = {length: min(Resolution.HOUR.ceil(at), top) for length, at in starts.items()}
        at = requests.c.start
        ranges = [and_(at >= top, at < self.now)]
        ranges += [and_(at >= starts[n], at < firsts[n]) for n in lengths if starts[n] < firsts[n]]
        columns: list[ColumnElement[Any]] = []
        for length in lengths:
            inside = and_(at >= starts[length], or_(at < firsts[length], at >= top))
            columns += _goodput_columns(spec.sli, inside)
        row = self.connection.execute(
            select(*columns).where(or_(*ranges), *selected(requests, spec.selector))
        ).one()
        earliest = min(firsts.values())
        hours = self.cache.goodput_hours(self.connection, spec.sli, spec.selector, earliest, top)
        out = {}
        for i, length in enumerate(lengths):
            events, bad = int(row[2 * i] or 0), int(row[2 * i + 1] or 0)
            for bucket, (more, worse) in hours.items():
                if bucket >= firsts[length]:
                    events, bad = events + more, bad + worse
            out[length] = EventCounts(events, bad)
        return out

    def _plan(self, length: timedelta) -> list[Segment]:
        if length not in self._plans:
            if length <= timedelta(0):
                raise InvalidInput("windows must be positive")
            window = Window.last(length, self.now)
            finest = self.finest_for(window, self.now) if self.finest_for else Resolution.MINUTE
            self._plans[length] = split(window, finest)
        return self._plans[length]

    def _segment(self, sli: Sli, seg: Segment, pinned: list[tuple[int, str]]) -> EventCounts:
        def picked(key: _Key) -> bool:
            return all(key[i] == value for i, value in pinned)

        if seg.raw:
            total = bad = 0
            for key, (events, bad_events) in self._edge_counts(seg, _measure(sli)).items():
                if picked(key):
                    total, bad = total + events, bad + bad_events
            return EventCounts(total, bad)
        if sli.kind is SliKind.AVAILABILITY:
            total = bad = 0
            for key, (requests_, errors) in self._rollup_totals(seg).items():
                if picked(key):
                    total, bad = total + requests_, bad + errors
            return EventCounts(total, bad)
        assert sli.metric is not None
        assert sli.threshold_s is not None
        total = good = 0
        if self.cache is not None:
            for key, (events, good_events) in self._cached_latency(
                sli.metric, sli.threshold_s, seg
            ).items():
                if picked(key):
                    total, good = total + events, good + good_events
            return EventCounts(total, total - good)
        for key, sketch in self._rollup_sketches(sli.metric, seg).items():
            if picked(key):
                total += sketch.count
                good += sketch.count_at_most(sli.threshold_s)
        return EventCounts(total, total - good)

    def _cached_rows(self, seg: Segment) -> dict[_Key, list[tuple[datetime, _Row]]]:
        assert self.cache is not None
        if seg not in self._rows:
            self._rows.update(self.cache.rows(self.connection, [seg]))
        return self._rows[seg]

    def _cached_latency(
        self, metric: str, threshold: float, seg: Segment
    ) -> dict[_Key, tuple[int, int]]:
        assert self.cache is not None
        memo = (metric, threshold, seg)
        if memo not in self._latency:
            column = sketch_column(LATENCY_METRICS[metric]).name
            self._latency[memo] = self.cache.sketch_counts(
                self.connection, seg, self._cached_rows(seg), column, threshold
            )
        return self._latency[memo]

    def _edge_counts(self, seg: Segment, measure: _Measure) -> dict[_Key, tuple[int, int]]:
        if measure not in self._edges.get(seg, {}):
            self._read_edges([seg], [measure])
        return self._edges[seg][measure]

    def _read_edges(self, edges: list[Segment], measures: list[_Measure]) -> None:
        """The raw edges' ``(events, bad events)`` per series and measure, counted by the
        database: one statement (a ``UNION ALL`` of one grouped select per edge) for up to
        ``_MEASURES_PER_QUERY`` measures, so no raw row travels to Python."""
        labels = [requests.c[name] for name in GROUP_LABELS]
        for seg in edges:
            slot = self._edges.setdefault(seg, {})
            for measure in measures:
                slot[measure] = {}
        for first in range(0, len(measures), _MEASURES_PER_QUERY):
            chunk = measures[first : first + _MEASURES_PER_QUERY]
            columns = [column for measure in chunk for column in _measure_columns(measure)]
            parts = [
                select(literal(index, Integer), *labels, *columns)
                .where(raw_where(seg))
                .group_by(*labels)
                for index, seg in enumerate(edges)
            ]
            query = parts[0] if len(parts) == 1 else union_all(*parts)
            width = 1 + len(labels)
            for row in self.connection.execute(query):
                slot = self._edges[edges[row[0]]]
                key = tuple(row[1:width])
                for offset, measure in enumerate(chunk):
                    at = width + 2 * offset
                    slot[measure][key] = (int(row[at] or 0), int(row[at + 1] or 0))

    def _rollup_totals(self, seg: Segment) -> dict[_Key, tuple[int, int]]:
        if seg not in self._totals:
            if self.cache is not None:
                self._totals[seg] = {
                    key: (sum(r.requests for _, r in parts), sum(r.errors for _, r in parts))
                    for key, parts in self._cached_rows(seg).items()
                }
                return self._totals[seg]
            r = request_rollups.c
            labels = [r[name] for name in GROUP_LABELS]
            query = (
                select(*labels, func.sum(r.requests), func.sum(r.errors))
                .where(rollup_where(seg))
                .group_by(*labels)
            )
            self._totals[seg] = {
                tuple(row[:_N]): (int(row[_N] or 0), int(row[_N + 1] or 0))
                for row in self.connection.execute(query)
            }
        return self._totals[seg]

    def _rollup_sketches(self, metric: str, seg: Segment) -> dict[_Key, QuantileSketch]:
        if (metric, seg) not in self._sketches:
            r = request_rollups.c
            column = sketch_column(LATENCY_METRICS[metric])
            query = select(*(r[name] for name in GROUP_LABELS), column).where(
                rollup_where(seg), column.is_not(None)
            )
            parts: dict[_Key, list[QuantileSketch]] = {}
            for *key, blob in self.connection.execute(query):
                parts.setdefault(tuple(key), []).append(QuantileSketch.from_bytes(blob))
            self._sketches[(metric, seg)] = {key: merge_all(p) for key, p in parts.items()}
        return self._sketches[(metric, seg)]


#: An SLI's raw-edge measure: ``None`` for availability (requests, errors), else the duration
#: column and its threshold (requests with a value, requests above the threshold).
_Measure = tuple[str, float] | None
#: Two aggregate columns per measure: 50 SLIs' thresholds stay within one statement.
_MEASURES_PER_QUERY: Final = 64


def _measure(sli: Sli) -> _Measure:
    if sli.column is None:  # availability; a goodput SLI reads no edge (``_goodput``)
        return None
    return (sli.column, sli.threshold_s or 0.0)


def _measure_columns(measure: _Measure) -> list[ColumnElement[Any]]:
    """``core.slo.count_events``'s event and bad-event counts over raw rows, as SQL."""
    if measure is None:
        return [func.count(), func.sum(case((requests.c.status == "error", 1), else_=0))]
    value = requests.c[measure[0]]
    return [func.count(value), func.sum(case((value > measure[1], 1), else_=0))]


def goodput_misses(
    connection: Connection, sli: Sli, window: Window, selector: Selector = Selector()
) -> dict[str, int]:
    """Why a goodput SLI's bad events were bad over ``window``, from raw rows, in its events
    (requests or output tokens): ``events``, ``bad``, ``failed`` (the request failed), and per
    target ``<metric>`` (succeeded but missed that target, whatever the others did) and
    ``only_<metric>`` (missed that target alone), and ``several`` (missed more than one)."""
    r = requests.c
    weight = _goodput_weight(sli)
    ok = r.status != "error"
    missed = {
        metric: and_(ok, r[column].is_not(None), r[column] > limit)
        for (metric, _), (column, limit) in zip(sli.targets, sli.limits, strict=True)
    }
    over = [case((m, 1), else_=0) for m in missed.values()]
    count = sum(over[1:], over[0]) if over else literal(0, Integer)

    def total(condition: ColumnElement[bool]) -> ColumnElement[Any]:
        return func.coalesce(func.sum(case((condition, weight), else_=0)), 0)

    columns: dict[str, ColumnElement[Any]] = {
        "events": func.coalesce(func.sum(weight), 0),
        "bad": total(~_good_request(sli)),
        "failed": total(~ok),
    }
    for metric, condition in missed.items():
        columns[metric] = total(condition)
        columns[f"only_{metric}"] = total(and_(condition, count == 1))
    columns["several"] = total(and_(ok, count > 1))
    row = connection.execute(select(*columns.values()).where(raw_where(window, selector))).one()
    return {name: int(value or 0) for name, value in zip(columns, row, strict=True)}
