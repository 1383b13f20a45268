"""Reads from ClickHouse that answer in ``core`` types, as ``storage.queries`` does on SQL.

A window is covered the same way (``core.window.split``): raw rows at its partial-minute
edges, the coarsest rollups that fit between. Exact quantiles are ClickHouse's
``quantilesExactInclusive`` (linear interpolation between ranks ⌊h⌋ and ⌈h⌉, h = q·(n−1): the
definition of PostgreSQL's ``percentile_cont`` and numpy's default). Sketch quantiles come from
infersight's own sketch, rebuilt from the rollup columns ClickHouse aggregated
(``QuantileSketch.from_buckets``) and from the edges' raw values: the same buckets, counts,
minimum and maximum as PostgreSQL's rollups, hence the same answers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

import numpy as np

from infersight.core.attribution import DIMENSIONS
from infersight.core.errors import InvalidInput, NotFound
from infersight.core.gpu_intervals import plan
from infersight.core.quantiles import DEFAULT_QUANTILES, check_quantiles
from infersight.core.query import (
    LATENCY_METRICS,
    STAGES,
    Breakdown,
    GroupQuantiles,
    LatencyResult,
    Method,
    Selector,
    Throughput,
    breakdown_of,
    check_group_by,
    check_metric,
    latency_result,
    resolve_method,
    sketch_groups,
)
from infersight.core.records import GROUP_LABELS
from infersight.core.sketch import (
    DEFAULT_RELATIVE_ACCURACY,
    QuantileSketch,
    merge_all,
    sketches_by_group,
)
from infersight.core.slo import EventCounts, GoodputUnit, Sli, SliKind
from infersight.core.window import Resolution, Segment, Window, split
from infersight.storage.seam import Counts, DemandMinute, RecordedDemand, RequestPeak
from infersight.storage_clickhouse.attribution_schema import ROW_COLUMNS
from infersight.storage_clickhouse.schema import Layout
from infersight.storage_clickhouse.transport import Transport, quote

LabelKey = tuple[str, ...]
#: The most series a label read returns (``storage.timeseries.MAX_SERIES``).
MAX_SERIES: Final = 5000
#: How recent a series' first hour is read to the minute (``storage.timeseries``'s).
FIRST_SEEN_SECONDS: Final = 86400
DEFAULT_EXACT_MAX_ROWS: Final = 200_000
#: A latency metric's sketch columns in a rollup row (``ttft_buckets``, …), ``_sketch``'s order.
_SKETCH_PARTS: Final = ("buckets", "zero", "sum", "min", "max")


def _time(ts: datetime) -> str:
    return quote(f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}")


def _bucket(ts: datetime) -> str:
    return quote(f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S}")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _selected(selector: Selector) -> list[str]:
    out = [f"{name} = {quote(value)}" for name, value in selector.items()]
    if selector.tenants is not None:
        tenants = sorted(selector.tenants)
        out.append(f"tenant IN ({', '.join(quote(t) for t in tenants)})" if tenants else "0")
    for name, values in selector.excluded:  # ``Selector.excluding``
        if values:
            out.append(f"{name} NOT IN ({', '.join(quote(v) for v in sorted(values))})")
    return out


def _raw_where(span: Segment | Window, selector: Selector) -> str:
    return " AND ".join(
        [f"start >= {_time(span.start)}", f"start < {_time(span.end)}", *_selected(selector)]
    )


def _rollup_where(segment: Segment, selector: Selector) -> str:
    return " AND ".join(
        [
            f"bucket >= {_bucket(segment.start)}",
            f"bucket < {_bucket(segment.end)}",
            *_selected(selector),
        ]
    )


def _pieces(window: Window, finest: Resolution) -> tuple[list[Segment], list[Segment]]:
    """``core.window.split``'s raw edges and rollup segments."""
    segments = split(window, finest)
    return [s for s in segments if s.raw], [s for s in segments if not s.raw]


def _raw_edges(edges: Sequence[Segment], selector: Selector) -> str:
    """The raw rows of every edge (one statement reads them all)."""
    spans = " OR ".join(f"(start >= {_time(e.start)} AND start < {_time(e.end)})" for e in edges)
    return " AND ".join([f"({spans})", *_selected(selector)])


_DAY: Final = timedelta(days=1)


@dataclass(frozen=True)
class Sides:
    """The UTC days of a read's range holding moved requests (``attribution_schema``:
    ``request_moves``, ``request_marks``) and folded ones (``sequences_schema``:
    ``request_folds`` with ``folded = 1``, ``request_fold_marks``), so that a read adds the
    views correcting the rollups and raw rows only over the days that have something to
    correct. Each such view costs ClickHouse tens of milliseconds to plan and run even over an
    empty range, several per statement; the probe (``probe``) one small statement.

    A question about time outside the probed range ``[low, high)`` answers yes: a read may
    only leave a view out where the probe saw the range. A move or fold stored between the
    probe and the read is not read, as it would not be by a read a moment earlier."""

    low: datetime
    high: datetime
    moved: frozenset[date]
    folded: frozenset[date]

    @classmethod
    def every(cls) -> Sides:
        """Sides that answer yes everywhere: every view read (nothing probed)."""
        return cls(
            datetime.max.replace(tzinfo=UTC),
            datetime.min.replace(tzinfo=UTC),
            frozenset(),
            frozenset(),
        )

    @classmethod
    def probe(
        cls, transport: Transport, layout: Layout, spans: Sequence[Segment | Window]
    ) -> Sides:
        """The days with moves and folds around ``spans`` (a day either side, which covers
        every rollup bucket a read of them floors or ceils to)."""
        low = _midnight(min(s.start for s in spans)) - _DAY
        high = _midnight(max(s.end for s in spans)) + 2 * _DAY
        where = f"start >= {_time(low)} AND start < {_time(high)}"

        def days(*tables: str, extra: str = "") -> str:
            union = " UNION ALL ".join(
                f"SELECT start FROM {layout.table(t)} WHERE {where}{extra if i == 0 else ''}"
                for i, t in enumerate(tables)
            )
            return f"(SELECT groupUniqArray(toDate(start)) FROM ({union}))"

        (row,) = transport.rows(
            f"SELECT {days('request_moves', 'request_marks')},"
            f" {days('request_folds', 'request_fold_marks', extra=' AND folded = 1')}"
        )
        moved, folded = (frozenset(date.fromisoformat(str(d)) for d in found) for found in row)
        return cls(low, high, moved, folded)

    def moves(self, low: datetime, high: datetime) -> bool:
        """Whether requests that started in [``low``, ``high``) may have been moved."""
        return self._any(self.moved, low, high)

    def folds(self, low: datetime, high: datetime) -> bool:
        """Whether requests that started in [``low``, ``high``) may have been folded into."""
        return self._any(self.folded, low, high)

    def _any(self, days: frozenset[date], low: datetime, high: datetime) -> bool:
        if low < self.low or high > self.high:
            return True
        first, last = low.astimezone(UTC).date(), (high.astimezone(UTC) - _MICRO).date()
        return any(first <= d <= last for d in days)


_MICRO: Final = timedelta(microseconds=1)


def _midnight(ts: datetime) -> datetime:
    """The start of ``ts``'s UTC day."""
    return datetime.combine(ts.astimezone(UTC).date(), datetime.min.time(), UTC)


def _rollup_rows(
    layout: Layout,
    segments: Sequence[Segment],
    selector: Selector,
    columns: str,
    sketches: Sequence[str] = (),
    attributed: bool = True,
    *,
    sides: Sides,
) -> str:
    """``columns`` of the rollup rows of every segment, each from its resolution's table and
    its moved requests' rows (``attribution_schema``: each request attributed after it was
    rolled up, out of its stored series and into its attributed one) and its folded requests'
    (``sequences_schema``: each request a late sequence was folded into, out with its stored
    values and in with its folded ones), as one ``UNION ALL`` (one statement aggregates them
    all). A segment's moves and folds are read only where ``sides`` says it has some.

    With ``sketches`` (metrics, ``ttft``, …, whose minimum and maximum ``columns`` reads), each
    rollup row is first added up with its moves (per bucket and series), and a sketch its
    moves emptied has no minimum or maximum: the SQL store's row forgets them when its count
    reaches 0 (``QuantileSketch.subtract``). Without ``attributed`` (a read that names no
    attributed label: ``_touches``), the rollups and their folds alone, not added up first (a
    sketch its folds emptied, only where a fold left a value out, keeps its bounds here)."""

    def tables(s: Segment) -> list[str]:
        out = [_rollup_table(layout, s.resolution)]  # type: ignore[arg-type]
        low, high = _span(s)
        if attributed and sides.moves(low, high):
            out.append(_moves(layout, s))
        if sides.folds(low, high):
            out.append(_folds(layout, s, attributed=attributed))
        return out

    if not attributed or not sketches:
        return " UNION ALL ".join(
            f"SELECT {columns} FROM {table} WHERE {_rollup_where(s, selector)}"
            for s in segments
            for table in tables(s)
        )
    labels = ", ".join(GROUP_LABELS)
    parts = [f"{m}_{p}" for m in sketches for p in _SKETCH_PARTS]
    read = ", ".join(f"{name} AS v_{name}" for name in parts)
    added = ", ".join(
        f"mapFilter((k, v) -> v != 0, sumMap(v_{m}_buckets)) AS a_{m}_buckets,"
        f" sum(v_{m}_zero) AS a_{m}_zero, sum(v_{m}_sum) AS a_{m}_sum,"
        f" min(v_{m}_min) AS a_{m}_min, max(v_{m}_max) AS a_{m}_max"
        for m in sketches
    )
    kept = ", ".join(
        f"a_{m}_buckets AS {m}_buckets, a_{m}_zero AS {m}_zero, a_{m}_sum AS {m}_sum,"
        f" if(empty(a_{m}_buckets) AND a_{m}_zero = 0, NULL, a_{m}_min) AS {m}_min,"
        f" if(empty(a_{m}_buckets) AND a_{m}_zero = 0, NULL, a_{m}_max) AS {m}_max"
        for m in sketches
    )
    out = []
    for s in segments:
        read_from = tables(s)
        if len(read_from) == 1:  # nothing moved or folded: the rollup rows as they are
            out.append(f"SELECT {columns} FROM {read_from[0]} WHERE {_rollup_where(s, selector)}")
            continue
        union = " UNION ALL ".join(
            f"SELECT bucket, {labels}, {read} FROM {table} WHERE {_rollup_where(s, selector)}"
            for table in read_from
        )
        out.append(
            f"SELECT {columns} FROM (SELECT bucket, {labels}, {kept} FROM"
            f" (SELECT bucket, {labels}, {added} FROM ({union}) GROUP BY bucket, {labels}))"
        )
    return " UNION ALL ".join(out)


def _span(segment: Segment) -> tuple[datetime, datetime]:
    """The start times of the requests a rollup segment's buckets hold."""
    assert segment.resolution is not None
    return segment.resolution.floor(segment.start), segment.resolution.ceil(segment.end)


def _touches(selector: Selector, group_by: Sequence[str] = ()) -> bool:
    """Whether a read pins, excludes or groups by a label attribution fills in (``tenant``,
    ``team``, ``workload``, ``adapter``). A read that does not is answered without the moves
    (``attribution_schema``): a move takes a request out of one series and into another that
    differ only in those labels, so it adds nothing to such a read's counts, and the values'
    bounds it keeps are those of the requests it counts."""
    pinned = {name for name, _ in selector.items()} | {name for name, _ in selector.excluded}
    if selector.tenants is not None:
        pinned.add("tenant")
    return bool(set(DIMENSIONS) & (pinned | set(group_by)))


def _between(low: datetime, high: datetime) -> str:
    """A parameterised view's time range: rows that started in [``low``, ``high``)."""
    return f"low = {_time(low)}, high = {_time(high)}"


def _raw(
    layout: Layout, spans: Sequence[Segment | Window], attributed: bool = True, *, sides: Sides
) -> str:
    """The request rows that started within ``spans``' range, as attributed and folded:
    ``requests`` (``FINAL``) with each moved request's labels its move's
    (``attribution_schema``) and each folded request's values its fold's
    (``sequences_schema``'s parameterised views: ``requests_current``, or without
    ``attributed`` ``requests_folded``; every side read in that range only). Where ``sides``
    finds no move (or the read is not ``attributed``) and no fold in the range, the rows as
    stored; where only one kind, that kind's view."""
    low, high = min(s.start for s in spans), max(s.end for s in spans)
    moved, folded = attributed and sides.moves(low, high), sides.folds(low, high)
    if moved and folded:
        view = "requests_current"
    elif moved:
        view = "requests_attributed"
    elif folded:
        view = "requests_folded"
    else:
        return (
            f"(SELECT {', '.join(ROW_COLUMNS)} FROM {layout.table('requests')} FINAL"
            f" WHERE start >= {_time(low)} AND start < {_time(high)})"
        )
    return f"{layout.table(view)}({_between(low, high)})"


def _moves(layout: Layout, segment: Segment) -> str:
    """The moved requests' rollup rows of ``segment`` (its resolution's parameterised view,
    reading the moves that started in the segment's buckets)."""
    assert segment.resolution is not None
    low, high = _span(segment)
    return f"{layout.table(f'request_moves_{segment.resolution.value}')}({_between(low, high)})"


def _folds(layout: Layout, segment: Segment, attributed: bool = True) -> str:
    """The folded requests' rollup rows of ``segment`` (``sequences_schema``: each late-folded
    request out with its stored values, in with its folded ones), in their series as
    attributed, or (without ``attributed``) as stored."""
    assert segment.resolution is not None
    low, high = _span(segment)
    view = f"request_folds{'_attributed' if attributed else ''}_{segment.resolution.value}"
    return f"{layout.table(view)}({_between(low, high)})"


def _rollup_table(layout: Layout, resolution: Resolution) -> str:
    return layout.table(f"request_rollups_{resolution.value}")


def _group(group_by: Sequence[str]) -> tuple[str, str]:
    """The select list's leading label columns and the ``GROUP BY`` clause."""
    if not group_by:
        return "", ""
    names = ", ".join(group_by)
    return names + ", ", f" GROUP BY {names}"


def _chart_segments(window: Window, step: Resolution, coarsest: Resolution | None) -> list[Segment]:
    """The rollup segments a chart reads, as the SQL store's ``timeseries`` plans them: the
    ``step`` buckets overlapping the window (the first may start before it: charts show whole
    buckets); with ``coarsest``, that time read from the coarsest rollups up to ``coarsest``
    that fit inside it, ``step`` rows at the ragged ends."""
    if coarsest is None or coarsest is step:
        return [Segment(step.floor(window.start), window.end, step)]
    covered = Window(step.floor(window.start), step.ceil(window.end))
    return plan(covered, coarsest, step)


def _at(bucket_s: int | None) -> str:
    """A rollup row's chart bucket: its own, or its ``bucket_s`` bucket aligned to the epoch."""
    if bucket_s is None:
        return "bucket"
    return f"toDateTime(intDiv(toUnixTimestamp(bucket), {int(bucket_s)}) * {int(bucket_s)}, 'UTC')"


class Reads:
    """The read queries over one ClickHouse database."""

    def __init__(self, transport: Transport, layout: Layout) -> None:
        self.transport = transport
        self.layout = layout

    def _sides(self, *spans: Segment | Window) -> Sides:
        """Where ``spans`` hold moved and folded requests (``Sides.probe``)."""
        return Sides.probe(self.transport, self.layout, spans)

    # -- throughput -------------------------------------------------------------------------

    def _totals(
        self,
        window: Window,
        selector: Selector,
        group_by: Sequence[str],
        finest: Resolution,
        sides: Sides | None = None,
    ) -> dict[LabelKey, list[int]]:
        head, tail = _group(group_by)
        totals: dict[LabelKey, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        edges, segments = _pieces(window, finest)
        sides = sides or self._sides(window)
        statements = []
        if edges:
            statements.append(
                f"SELECT {head}count(), countIf(status = 'error'),"
                " sum(ifNull(input_tokens, 0)), sum(ifNull(output_tokens, 0))"
                f" FROM {_raw(self.layout, edges, _touches(selector, group_by), sides=sides)}"
                f" WHERE {_raw_edges(edges, selector)}{tail}"
            )
        if segments:
            inner = _rollup_rows(
                self.layout,
                segments,
                selector,
                head + "requests, errors, input_tokens, output_tokens",
                attributed=_touches(selector, group_by),
                sides=sides,
            )
            statements.append(
                f"SELECT {head}sum(requests), sum(errors), sum(input_tokens),"
                f" sum(output_tokens) FROM ({inner}){tail}"
            )
        width = len(group_by)
        for sql in statements:
            for row in self.transport.rows(sql):
                bucket = totals[tuple(row[:width])]
                for i, amount in enumerate(row[width:]):
                    bucket[i] += int(amount or 0)
        return totals

    def throughput(
        self,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[Throughput]:
        groups = check_group_by(group_by)
        totals = self._totals(window, selector, groups, finest)
        return [
            Throughput(
                dict(zip(groups, key, strict=True)),
                requests=values[0],
                errors=values[1],
                input_tokens=values[2],
                output_tokens=values[3],
                seconds=window.seconds,
            )
            for key, values in sorted(totals.items())
            if values[0]
        ]

    def data_span(
        self,
        window: Window,
        selector: Selector = Selector(),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> Window | None:
        """As ``storage.queries.data_span``: from the first ``finest`` rollup bucket with
        requests to the end of the last, within the window."""
        segment = Segment(finest.floor(window.start), window.end, finest)
        rows = self.transport.rows(
            f"SELECT count(), min(bucket), max(bucket) FROM {_rollup_table(self.layout, finest)}"
            f" WHERE {_rollup_where(segment, selector)} AND requests > 0"
        )
        if not rows or not rows[0][0]:
            return None
        first, last = _parse(rows[0][1]), _parse(rows[0][2])
        end = min(last + timedelta(seconds=finest.seconds), window.end)
        return Window(max(first, window.start), end)

    # -- latency ----------------------------------------------------------------------------

    def latency(
        self,
        metric: str,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
        method: Method = Method.AUTO,
        *,
        finest: Resolution = Resolution.MINUTE,
        exact_max_rows: int = DEFAULT_EXACT_MAX_ROWS,
    ) -> LatencyResult:
        column = LATENCY_METRICS[check_metric(metric)]
        groups = check_group_by(group_by)
        qs = check_quantiles(quantiles)
        sides = self._sides(window)  # one probe, whichever reads answer

        def rows() -> int:
            return sum(v[0] for v in self._totals(window, selector, (), finest, sides).values())

        method = resolve_method(method, rows, exact_max_rows)
        if method is Method.EXACT:
            answers = self._exact(column, window, selector, groups, qs, sides)
            return latency_result(metric, window, method, 0.0, answers)
        sketches = self.group_sketches_many([column], window, selector, groups, finest, sides)
        answers = sketch_groups(groups, sketches[column], qs)
        return latency_result(metric, window, method, DEFAULT_RELATIVE_ACCURACY, answers)

    def latencies(
        self,
        metrics: Sequence[str],
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> dict[str, LatencyResult]:
        """``latency`` by sketch for several metrics in one pass over the window (the raw edges
        and the rollups read once for all of them)."""
        names = [check_metric(m) for m in metrics]
        columns = [LATENCY_METRICS[m] for m in names]
        groups = check_group_by(group_by)
        qs = check_quantiles(quantiles)
        sketches = self.group_sketches_many(columns, window, selector, groups, finest)
        return {
            name: latency_result(
                name,
                window,
                Method.SKETCH,
                DEFAULT_RELATIVE_ACCURACY,
                sketch_groups(groups, sketches[column], qs),
            )
            for name, column in zip(names, columns, strict=True)
        }

    def _exact(
        self,
        column: str,
        window: Window,
        selector: Selector,
        group_by: Sequence[str],
        qs: Sequence[float],
        sides: Sides,
    ) -> list[GroupQuantiles]:
        head, tail = _group(group_by)
        levels = ", ".join(repr(float(q)) for q in qs)
        rows = self.transport.rows(
            f"SELECT {head}count(), quantilesExactInclusive({levels})({column})"
            f" FROM {_raw(self.layout, [window], _touches(selector, group_by), sides=sides)}"
            f" WHERE {_raw_where(window, selector)} AND {column} IS NOT NULL{tail}"
        )
        width = len(group_by)
        out = []
        for row in rows:
            count, values = int(row[width]), row[width + 1]
            if count:
                out.append(
                    GroupQuantiles(
                        dict(zip(group_by, row[:width], strict=True)),
                        count,
                        dict(zip(qs, map(float, values), strict=True)),
                    )
                )
        return out

    def group_sketches_many(
        self,
        columns: Sequence[str],
        window: Window,
        selector: Selector,
        group_by: Sequence[str],
        finest: Resolution = Resolution.MINUTE,
        sides: Sides | None = None,
    ) -> dict[str, dict[LabelKey, QuantileSketch]]:
        """One merged sketch of each of ``columns`` (``ttft_s``, …) per group over ``window``,
        the raw edges read in one statement and every rollup segment in one, for all columns;
        a group without a value of a column has no entry under it."""
        head, tail = _group(group_by)
        width = len(group_by)
        parts: dict[str, dict[LabelKey, list[QuantileSketch]]] = {
            column: defaultdict(list) for column in columns
        }
        edges, segments = _pieces(window, finest)
        sides = sides or self._sides(window)
        if edges:
            rows = self.transport.rows(
                f"SELECT {head}{', '.join(columns)}"
                f" FROM {_raw(self.layout, edges, _touches(selector, group_by), sides=sides)}"
                f" WHERE {_raw_edges(edges, selector)}"
                f" AND ({' OR '.join(f'{c} IS NOT NULL' for c in columns)})"
            )
            if rows:
                index: dict[LabelKey, int] = {}
                ids = np.fromiter(
                    (index.setdefault(tuple(r[:width]), len(index)) for r in rows), np.int64
                )
                for i, column in enumerate(columns):
                    values = np.fromiter(
                        (np.nan if r[width + i] is None else float(r[width + i]) for r in rows),
                        np.float64,
                        count=len(rows),
                    )
                    for key, sketch in zip(
                        index, sketches_by_group(ids, values, len(index)), strict=True
                    ):
                        if sketch is not None:
                            parts[column][key].append(sketch)
        if segments:
            names = [
                [f"{column.removesuffix('_s')}_{part}" for part in _SKETCH_PARTS]
                for column in columns
            ]
            inner = _rollup_rows(
                self.layout,
                segments,
                selector,
                head + ", ".join(n for ns in names for n in ns),
                [c.removesuffix("_s") for c in columns],
                attributed=_touches(selector, group_by),
                sides=sides,
            )
            merged = ", ".join(
                f"sumMap({b}), sum({z}), sum({t}), min({low}), max({high})"
                for b, z, t, low, high in names
            )
            for row in self.transport.rows(f"SELECT {head}{merged} FROM ({inner}){tail}"):
                for i, column in enumerate(columns):
                    at = width + len(_SKETCH_PARTS) * i
                    sketch = _sketch(row[at : at + len(_SKETCH_PARTS)])
                    if sketch is not None:
                        parts[column][tuple(row[:width])].append(sketch)
        return {
            column: {key: merge_all(sketches) for key, sketches in found.items()}
            for column, found in parts.items()
        }

    # -- label sets -------------------------------------------------------------------------

    def label_sets(self, window: Window, step: Resolution = Resolution.HOUR) -> list[LabelKey]:
        """The distinct ``GROUP_LABELS`` series of the ``step`` rollups in ``window``, as
        attributed (``storage.timeseries.label_sets``: a series a request was moved out of
        stays, as the SQL store's emptied rollup row does)."""
        labels = ", ".join(GROUP_LABELS)
        segment = Segment(step.floor(window.start), window.end, step)
        inner = _rollup_rows(self.layout, [segment], Selector(), labels, sides=self._sides(segment))
        rows = self.transport.rows(
            f"SELECT {labels} FROM ({inner}) GROUP BY {labels} ORDER BY {labels} LIMIT {MAX_SERIES}"
        )
        return [tuple(str(v) for v in row) for row in rows]

    def first_seen(self, since: datetime, now: datetime) -> dict[LabelKey, datetime]:
        """The start of each series' first rollup bucket in ``[since, now)``, as attributed
        (``storage.timeseries.first_seen``): to the hour, and to the minute where that hour is
        less than ``FIRST_SEEN_SECONDS`` before ``now``."""
        labels = ", ".join(GROUP_LABELS)

        def firsts(resolution: Resolution, start: datetime) -> dict[LabelKey, datetime]:
            segment = Segment(start, now, resolution)
            inner = _rollup_rows(
                self.layout, [segment], Selector(), f"bucket, {labels}", sides=self._sides(segment)
            )
            rows = self.transport.rows(
                f"SELECT {labels}, min(bucket) FROM ({inner}) GROUP BY {labels} LIMIT {MAX_SERIES}"
            )
            return {tuple(str(v) for v in row[:-1]): _parse(row[-1]) for row in rows}

        found = firsts(Resolution.HOUR, Resolution.HOUR.floor(since))
        recent = {k for k, at in found.items() if (now - at).total_seconds() < FIRST_SEEN_SECONDS}
        if recent:
            finer = firsts(Resolution.MINUTE, min(found[k] for k in recent))
            found.update({key: at for key, at in finer.items() if key in recent})
        return {key: max(at, since) for key, at in found.items()}

    # -- charts -----------------------------------------------------------------------------

    def series(
        self,
        window: Window,
        step: Resolution,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        coarsest: Resolution | None = None,
        bucket_s: int | None = None,
    ) -> dict[LabelKey, dict[datetime, Counts]]:
        groups = check_group_by(group_by)
        binned = not (bucket_s is None or bucket_s == step.seconds)
        if binned and bucket_s is not None and bucket_s % step.seconds:
            raise ValueError(f"bucket_s {bucket_s} is not a multiple of {step.value}")
        head, _ = _group(groups)
        segments = _chart_segments(window, step, coarsest)
        inner = _rollup_rows(
            self.layout,
            segments,
            selector,
            f"bucket, {head}requests, errors, input_tokens, output_tokens",
            attributed=_touches(selector, groups),
            sides=self._sides(*segments),
        )
        at = _at(bucket_s if binned else None)
        rows = self.transport.rows(
            f"SELECT {at} AS at, {head}sum(requests), sum(errors), sum(input_tokens),"
            f" sum(output_tokens) FROM ({inner}) GROUP BY at{', ' if groups else ''}"
            f"{', '.join(groups)} ORDER BY at"
        )
        width = len(groups)
        out: dict[LabelKey, dict[datetime, Counts]] = defaultdict(dict)
        for row in rows:
            requests, errors, input_tokens, output_tokens = row[1 + width :]
            out[tuple(row[1 : 1 + width])][_parse(row[0])] = Counts(
                int(requests), int(errors), int(input_tokens), int(output_tokens)
            )
        return dict(out)

    def bucket_sketches(
        self,
        metrics: Sequence[str],
        window: Window,
        step: Resolution,
        bucket_s: int,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        coarsest: Resolution | None = None,
    ) -> dict[str, dict[LabelKey, dict[datetime, QuantileSketch]]]:
        """Per metric, one merged sketch per group per ``bucket_s`` chart bucket."""
        columns = [LATENCY_METRICS[check_metric(m)] for m in metrics]
        groups = check_group_by(group_by)
        if bucket_s < step.seconds or bucket_s % step.seconds:
            raise ValueError("a chart bucket must be a whole number of rollup buckets")
        head, _ = _group(groups)
        names = [
            [f"{column.removesuffix('_s')}_{part}" for part in _SKETCH_PARTS] for column in columns
        ]
        segments = _chart_segments(window, step, coarsest)
        inner = _rollup_rows(
            self.layout,
            segments,
            selector,
            f"bucket, {head}" + ", ".join(n for ns in names for n in ns),
            [c.removesuffix("_s") for c in columns],
            attributed=_touches(selector, groups),
            sides=self._sides(*segments),
        )
        merged = ", ".join(
            f"sumMap({b}), sum({z}), sum({t}), min({low}), max({high})"
            for b, z, t, low, high in names
        )
        rows = self.transport.rows(
            f"SELECT {_at(bucket_s)} AS at, {head}{merged} FROM ({inner})"
            f" GROUP BY at{', ' if groups else ''}{', '.join(groups)} ORDER BY at"
        )
        width = len(groups)
        out: dict[str, dict[LabelKey, dict[datetime, QuantileSketch]]] = {m: {} for m in metrics}
        for row in rows:
            labels, at = tuple(row[1 : 1 + width]), _parse(row[0])
            for i, metric in enumerate(metrics):
                start = 1 + width + len(_SKETCH_PARTS) * i
                sketch = _sketch(row[start : start + len(_SKETCH_PARTS)])
                if sketch is not None:
                    out[metric].setdefault(labels, {})[at] = sketch
        return out

    def peaks(
        self, window: Window, step: Resolution, selector: Selector = Selector()
    ) -> dict[str, RequestPeak]:
        segments = _chart_segments(window, step, None)
        inner = _rollup_rows(
            self.layout,
            segments,
            selector,
            "bucket, model, instance, requests",
            attributed=_touches(selector),
            sides=self._sides(*segments),
        )
        found = self.transport.rows(
            "SELECT model, max(n), sum(n), min(bucket), max(bucket) FROM"
            f" (SELECT model, bucket, sum(requests) AS n FROM ({inner}) GROUP BY model, bucket)"
            " GROUP BY model"
        )
        pairs = self.transport.rows(f"SELECT DISTINCT model, instance FROM ({inner})")
        instances: dict[str, list[str]] = defaultdict(list)
        for model, instance in pairs:
            instances[model].append(instance)
        return {
            model: RequestPeak(
                int(peak),
                int(total),
                _parse(first),
                _parse(last),
                tuple(sorted(instances[model])),
            )
            for model, peak, total, first, last in found
        }

    # -- the stage breakdown ----------------------------------------------------------------

    def breakdown(
        self,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[Breakdown]:
        """Each stage's share of the requests' time, per group, over ``window``
        (``storage.queries.breakdown``): per field its values' count and sum, from raw rows at
        the window's edges and, in between, from the rollups' sketch columns — the buckets'
        counts plus the zero count, and the sum — which is what the SQL store reads from its
        sketches' headers."""
        groups = check_group_by(group_by)
        head, tail = _group(groups)
        width = len(groups)
        acc: dict[LabelKey, list[list[float]]] = defaultdict(
            lambda: [[0, 0.0] for _ in _BREAKDOWN_FIELDS]
        )
        edges, segments = _pieces(window, finest)
        sides = self._sides(window)
        statements = []
        if edges:
            raw = ", ".join(f"count({f}), sum({f})" for f in _BREAKDOWN_FIELDS)
            picked = _touches(selector, groups)
            statements.append(
                f"SELECT {head}{raw} FROM {_raw(self.layout, edges, picked, sides=sides)}"
                f" WHERE {_raw_edges(edges, selector)}{tail}"
            )
        if segments:
            metrics = [f.removesuffix("_s") for f in _BREAKDOWN_FIELDS]
            columns = ", ".join(
                f"arraySum(mapValues({m}_buckets)) + {m}_zero AS {m}_n, {m}_sum AS {m}_t"
                for m in metrics
            )
            inner = _rollup_rows(
                self.layout,
                segments,
                selector,
                head + columns,
                attributed=_touches(selector, groups),
                sides=sides,
            )
            totals = ", ".join(f"sum({m}_n), sum({m}_t)" for m in metrics)
            # A group for each rollup row read, none without (as the SQL store's row read).
            statements.append(f"SELECT {head}{totals} FROM ({inner}){tail} HAVING count() > 0")
        for sql in statements:
            for row in self.transport.rows(sql):
                fields_ = acc[tuple(row[:width])]
                values = row[width:]
                for i, pair in enumerate(fields_):
                    pair[0] += int(values[2 * i] or 0)
                    pair[1] += float(values[2 * i + 1] or 0.0)
        out = []
        for key, fields_ in sorted(acc.items()):
            totals_of = {
                name: (int(count), total)
                for name, (count, total) in zip(_BREAKDOWN_FIELDS, fields_, strict=True)
            }
            e2e = totals_of["e2e_s"]
            stages = {stage: totals_of[f"{stage}_s"] for stage in STAGES}
            out.append(breakdown_of(dict(zip(groups, key, strict=True)), e2e, stages))
        return out


#: The fields a breakdown sums (``storage.queries._BREAKDOWN_FIELDS``): end to end, then each
#: of ``core.query.STAGES``.
_BREAKDOWN_FIELDS: Final = ("e2e_s", *(f"{stage}_s" for stage in STAGES))


def _sketch(values: Sequence[Any]) -> QuantileSketch | None:
    buckets: Mapping[str, int]
    buckets, zero, total, minimum, maximum = values
    if not buckets and not zero:
        return None
    # A moved request's buckets are taken out of its stored series (``attribution_schema``):
    # a bucket it emptied is there with a count of 0.
    pairs = sorted((int(k), int(c)) for k, c in buckets.items() if int(c))
    if not pairs and not int(zero):
        return None
    keys = np.array([k for k, _ in pairs], dtype=np.int64)
    counts = np.array([c for _, c in pairs], dtype=np.int64)
    return QuantileSketch.from_buckets(
        keys,
        counts,
        zero_count=int(zero),
        total=float(total),
        minimum=float(minimum),
        maximum=float(maximum),
    )


def _literal(value: float) -> str:
    """A float as a ClickHouse literal that parses back to the same double."""
    return repr(float(value))


def _good_request(sli: Sli) -> str:
    """A goodput SLI's good request: it succeeded and every target it reported holds."""
    return " AND ".join(
        ["status != 'error'"]
        + [f"({column} IS NULL OR {column} <= {_literal(limit)})" for column, limit in sli.limits]
    )


def _weight(sli: Sli) -> str:
    """What one request weighs as events of a goodput SLI: 1 or its output tokens."""
    return "1" if sli.per is GoodputUnit.REQUEST else "ifNull(output_tokens, 0)"


class EventReads(Reads):
    """SLO events (``seam.EventStore``'s counts) over the ClickHouse rows and rollups."""

    def count_events(
        self,
        sli: Sli,
        window: Window,
        selector: Selector = Selector(),
        *,
        exact: bool = False,
        finest: Resolution = Resolution.MINUTE,
    ) -> EventCounts:
        """As ``storage.slo_store.count_events``: raw rows at the window's partial-minute edges
        (all of it when ``exact``, and for a goodput SLI), rollups between. A latency SLI's
        rollup events are its sketches' counts, and its good ones those at most the threshold
        (``QuantileSketch.count_at_most``: the zero bucket and every bucket whose key is at
        most the threshold's, which adds up across rollup rows, so summing the buckets here
        answers what decoding each row's sketch would)."""
        sides = self._sides(window)
        if exact or sli.kind is SliKind.GOODPUT:
            whole = [Segment(window.start, window.end, None)]
            return self._raw_events(sli, whole, selector, sides)
        edges, segments = _pieces(window, finest)
        counts = EventCounts(0, 0)
        if edges:
            counts += self._raw_events(sli, edges, selector, sides)
        if segments:
            counts += self._rollup_events(sli, segments, selector, sides)
        return counts

    def _raw_events(
        self, sli: Sli, edges: Sequence[Segment], selector: Selector, sides: Sides
    ) -> EventCounts:
        where = _raw_edges(edges, selector)
        if sli.kind is SliKind.GOODPUT:
            weight = _weight(sli)
            columns = f"sum({weight}), sum(if({_good_request(sli)}, 0, {weight}))"
        elif sli.kind is SliKind.AVAILABILITY:
            columns = "count(), countIf(status = 'error')"
        else:
            assert sli.column is not None
            assert sli.threshold_s is not None
            where += f" AND {sli.column} IS NOT NULL"
            columns = f"count(), countIf({sli.column} > {_literal(sli.threshold_s)})"
        rows = self.transport.rows(
            f"SELECT {columns} FROM {_raw(self.layout, edges, _touches(selector), sides=sides)}"
            f" WHERE {where}"
        )
        return EventCounts(int(rows[0][0] or 0), int(rows[0][1] or 0))

    def _rollup_events(
        self, sli: Sli, segments: Sequence[Segment], selector: Selector, sides: Sides
    ) -> EventCounts:
        if sli.kind is SliKind.AVAILABILITY:
            inner = _rollup_rows(
                self.layout,
                segments,
                selector,
                "requests, errors",
                attributed=_touches(selector),
                sides=sides,
            )
            rows = self.transport.rows(f"SELECT sum(requests), sum(errors) FROM ({inner})")
            return EventCounts(int(rows[0][0] or 0), int(rows[0][1] or 0))
        assert sli.column is not None
        assert sli.threshold_s is not None
        metric = sli.column.removesuffix("_s")
        key = int(
            QuantileSketch(DEFAULT_RELATIVE_ACCURACY).keys_for(np.array([sli.threshold_s]))[0]
        )
        inner = _rollup_rows(
            self.layout,
            segments,
            selector,
            f"{metric}_buckets AS b, {metric}_zero AS z",
            attributed=_touches(selector),
            sides=sides,
        )
        rows = self.transport.rows(
            "SELECT sum(z), sum(arraySum(mapValues(b))),"
            f" sum(arraySum(mapValues(mapFilter((k, v) -> k <= {key}, b)))) FROM ({inner})"
        )
        zero, counted, good = (int(v or 0) for v in rows[0])
        return EventCounts(zero + counted, counted - good)

    def goodput_misses(
        self, sli: Sli, window: Window, selector: Selector = Selector()
    ) -> dict[str, int]:
        """As ``storage.slo_store.goodput_misses``, from the raw rows."""
        weight = _weight(sli)
        ok = "status != 'error'"
        missed = {
            metric: f"({ok} AND {column} IS NOT NULL AND {column} > {_literal(limit)})"
            for (metric, _), (column, limit) in zip(sli.targets, sli.limits, strict=True)
        }
        several = " + ".join(f"toUInt8({m})" for m in missed.values()) or "0"

        def total(condition: str) -> str:
            return f"sum(if({condition}, {weight}, 0))"

        columns = {
            "events": f"sum({weight})",
            "bad": total(f"NOT ({_good_request(sli)})"),
            "failed": total(f"NOT ({ok})"),
        }
        for metric, condition in missed.items():
            columns[metric] = total(condition)
            columns[f"only_{metric}"] = total(f"{condition} AND ({several}) = 1")
        columns["several"] = total(f"{ok} AND ({several}) > 1")
        sides = self._sides(window)
        rows = self.transport.rows(
            f"SELECT {', '.join(columns.values())}"
            f" FROM {_raw(self.layout, [window], _touches(selector), sides=sides)}"
            f" WHERE {_raw_where(window, selector)}"
        )
        return {name: int(v or 0) for name, v in zip(columns, rows[0], strict=True)}


#: The most rows one demand read returns (``storage.scaling_reads.MAX_ROWS``).
MAX_DEMAND_ROWS: Final = 200_000
MINUTES_PER_DAY: Final = 1440
MAX_WEEKS: Final = 12


def _instant(ts: datetime) -> str:
    """``ts`` to the microsecond, for comparing a rollup bucket with a window's bound."""
    return f"toDateTime64({_time(ts)}, 6, 'UTC')"


class DemandReads(Reads):
    """Demand per model and minute (``seam.DemandStore``'s rollup reads) from ClickHouse."""

    def minute_demand(self, model: str, window: Window) -> list[DemandMinute]:
        """``model``'s minute buckets in ``window`` that saw requests, in time order."""
        table = _rollup_table(self.layout, Resolution.MINUTE)
        rows = self.transport.rows(
            f"SELECT bucket, instance, sum(requests) FROM {table}"
            f" WHERE model = {quote(model)} AND bucket >= {_instant(window.start)}"
            f" AND bucket < {_instant(window.end)} GROUP BY bucket, instance"
            f" LIMIT {MAX_DEMAND_ROWS}"
        )
        counts: dict[datetime, int] = defaultdict(int)
        instances: dict[datetime, set[str]] = defaultdict(set)
        for bucket, instance, n in rows:
            at = _parse(bucket)
            counts[at] += int(n)
            if n:
                instances[at].add(str(instance))
        return [
            DemandMinute(at, counts[at], frozenset(instances[at]))
            for at in sorted(counts)
            if counts[at]
        ]

    def peak_rate(self, model: str, window: Window) -> float | None:
        """The busiest requests per second of ``model`` in ``window``: its busiest minute, or
        (with no minute rollups there) its busiest hour; ``None`` when neither saw one."""
        minutes = self.minute_demand(model, window)
        if minutes:
            return max(m.requests for m in minutes) / Resolution.MINUTE.seconds
        hour = Resolution.HOUR
        rows = self.transport.rows(
            f"SELECT max(n) FROM (SELECT bucket, sum(requests) AS n"
            f" FROM {_rollup_table(self.layout, hour)} WHERE model = {quote(model)}"
            f" AND bucket >= {_instant(hour.floor(window.start))}"
            f" AND bucket < {_instant(window.end)} GROUP BY bucket)"
        )
        busiest = int(rows[0][0] or 0) if rows else 0
        return busiest / hour.seconds if busiest else None

    def _counts(self, model: str, start: datetime, resolution: Resolution) -> list[float]:
        rows = self.transport.rows(
            f"SELECT bucket, sum(requests) FROM {_rollup_table(self.layout, resolution)}"
            f" WHERE model = {quote(model)} AND bucket >= {_instant(start)}"
            f" AND bucket < {_instant(start + timedelta(days=1))} GROUP BY bucket"
            f" LIMIT {MAX_DEMAND_ROWS}"
        )
        out = [0.0] * MINUTES_PER_DAY
        width = resolution.seconds // 60
        for bucket, n in rows:
            first = int((_parse(bucket) - start).total_seconds() // 60)
            for m in range(max(0, first), min(MINUTES_PER_DAY, first + width)):
                out[m] += float(n or 0) / width
        return out

    def day_minutes(self, model: str, day: date) -> list[float]:
        """Requests per minute of ``model`` on ``day`` (UTC): minute rollups, else hours."""
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        minutes = self._counts(model, start, Resolution.MINUTE)
        if any(minutes):
            return minutes
        return self._counts(model, start, Resolution.HOUR)

    def recorded_demand(self, model: str, day: date, weeks: int = 4) -> RecordedDemand:
        """``model``'s day and its ``weeks`` earlier same weekdays; ``NotFound`` without
        traffic (as ``storage.demand.recorded_demand``)."""
        if not model:
            raise InvalidInput("a model name is needed")
        if not 0 <= weeks <= MAX_WEEKS:
            raise InvalidInput(f"weeks must be in [0, {MAX_WEEKS}]", details={"weeks": weeks})
        minutes = self.day_minutes(model, day)
        if not any(minutes):
            raise NotFound(
                f"the store holds no request of model {model!r} on {day.isoformat()} "
                "(no minute or hour rollups)",
                details={"model": model, "day": day.isoformat()},
            )
        history: list[tuple[float, ...]] = []
        empty: list[int] = []
        for k in range(1, weeks + 1):
            week = self.day_minutes(model, day - timedelta(weeks=k))
            if any(week):
                history.append(tuple(week))
            else:
                empty.append(k)
        return RecordedDemand(model, day, tuple(minutes), tuple(history), tuple(empty))

    def models_seen(self, window: Window) -> list[str]:
        """Every non-empty model with minute rollups or server scrapes in ``window``."""
        return models_seen(self.transport, self.layout, window)

    def busiest_models(self, day: date, limit: int = 20) -> list[str]:
        """The models with requests on ``day``, busiest first (every resolution's rollups
        added up, as the SQL store adds them; ties by name)."""
        start = datetime(day.year, day.month, day.day, tzinfo=UTC)
        segment = Segment(start, start + timedelta(days=1), Resolution.MINUTE)
        inner = " UNION ALL ".join(
            f"SELECT model, requests FROM {_rollup_table(self.layout, resolution)}"
            f" WHERE {_rollup_where(segment, Selector())}"
            for resolution in (Resolution.MINUTE, Resolution.HOUR, Resolution.DAY)
        )
        rows = self.transport.rows(
            f"SELECT model, sum(requests) AS n FROM ({inner}) GROUP BY model"
            f" ORDER BY n DESC, model LIMIT {int(limit)}"
        )
        return [str(model) for model, _ in rows]


#: Models ``models_seen`` returns at most (``storage.scaling_reads.MAX_MODELS``).
MAX_MODELS_SEEN: Final = 1_000


def models_seen(transport: Transport, layout: Layout, window: Window) -> list[str]:
    """Every non-empty model with minute rollups or server scrapes in ``window``, sorted
    (``storage.scaling_reads.models_seen``)."""
    table = _rollup_table(layout, Resolution.MINUTE)
    found = {
        str(model)
        for (model,) in transport.rows(
            f"SELECT DISTINCT model FROM {table} WHERE bucket >= {_instant(window.start)}"
            f" AND bucket < {_instant(window.end)} AND model != '' LIMIT {MAX_MODELS_SEEN}"
        )
    }
    found.update(
        str(model)
        for (model,) in transport.rows(
            f"SELECT DISTINCT model FROM {layout.table('server_samples')}"
            f" WHERE ts >= {_time(window.start)} AND ts < {_time(window.end)}"
            f" AND model != '' LIMIT {MAX_MODELS_SEEN}"
        )
    )
    return sorted(found)[:MAX_MODELS_SEEN]


#: Error types kept per instance (``storage.signals.MAX_ERROR_TYPES``); the rest as ``other``.
MAX_ERROR_TYPES: Final = 5
#: The most requests a load test replays (``storage.runs.MAX_REPLAY``).
MAX_REPLAY: Final = 1_000_000


class RowReads(Reads):
    """Reads of the raw request rows: failed requests' error types and production's request
    shapes."""

    def error_types(
        self, window: Window, selector: Selector = Selector()
    ) -> dict[str, dict[str, int]]:
        """Failed requests per instance and ``error_type`` over ``window`` (``""``: untyped),
        the ``MAX_ERROR_TYPES`` most frequent per instance and the rest as ``other``."""
        rows = self.transport.rows(
            f"SELECT instance, error_type, count()"
            f" FROM {_raw(self.layout, [window], _touches(selector), sides=self._sides(window))}"
            f" WHERE {_raw_where(window, selector)} AND status = 'error'"
            " GROUP BY instance, error_type"
        )
        counts: dict[str, list[tuple[int, str]]] = defaultdict(list)
        for instance, kind, n in rows:
            counts[instance].append((int(n), str(kind or "")))
        out: dict[str, dict[str, int]] = {}
        for instance, kinds in counts.items():
            kinds.sort(key=lambda item: (-item[0], item[1]))
            kept = {kind: n for n, kind in kinds[:MAX_ERROR_TYPES]}
            rest = sum(n for n, _ in kinds[MAX_ERROR_TYPES:])
            if rest:
                kept["other"] = kept.get("other", 0) + rest
            out[instance] = kept
        return out

    def production_shapes(
        self, window: Window, selector: Selector, limit: int = 10_000
    ) -> list[tuple[int, int]]:
        """(input, output) tokens of successful requests in ``window``, oldest first (the
        selector's model, instance, tenant and priority, as ``storage.runs`` reads it)."""
        if not 1 <= limit <= MAX_REPLAY:
            raise InvalidInput(f"a replay takes between 1 and {MAX_REPLAY} requests")
        picked = Selector(
            model=selector.model,
            instance=selector.instance,
            tenant=selector.tenant,
            priority=selector.priority,
        ).within(selector.tenants)
        rows = self.transport.rows(
            "SELECT input_tokens, output_tokens"
            f" FROM {_raw(self.layout, [window], _touches(picked), sides=self._sides(window))}"
            f" WHERE {_raw_where(window, picked)} AND status = 'ok'"
            " AND input_tokens IS NOT NULL AND output_tokens > 0"
            f" ORDER BY start, trace_id, span_id LIMIT {int(limit)}"
        )
        return [(int(i), int(o)) for i, o in rows]
