"""Read queries that answer in ``core`` types: latency quantiles, throughput, stage breakdown.

Every query covers a ``Window`` with ``core.window.split``: the partial minutes at the ends are
read from raw rows and the rest from the coarsest rollups that fit, so a 30-day question reads
a few hundred rollup rows instead of millions of requests. Latency quantiles can instead be
computed exactly from raw rows (``percentile_cont`` on PostgreSQL, numpy on SQLite); ``AUTO``
picks exact when the window holds at most ``exact_max_rows`` requests.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from functools import lru_cache
from typing import Any, Final

import numpy as np
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Result,
    Select,
    and_,
    case,
    func,
    literal_column,
    select,
)

from infersight.core.quantiles import DEFAULT_QUANTILES, check_quantiles, exact_quantiles
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
from infersight.core.sketch import (
    DEFAULT_RELATIVE_ACCURACY,
    QuantileSketch,
    header_totals,
    merge_all,
    sketches_by_group,
)
from infersight.core.window import Resolution, Segment, Window
from infersight.storage.sketch_cache import SketchCache, merged_sketches
from infersight.storage.sql import (
    SelectorShape,
    raw_where,
    raw_where_shaped,
    read_segments,
    rollup_where,
    rollup_where_shaped,
    selector_shape,
    sketch_header,
    span_values,
)
from infersight.storage.tables import request_rollups, requests

DEFAULT_EXACT_MAX_ROWS: Final = 200_000
LabelKey = tuple[str, ...]


def _labels(group_by: Sequence[str], key: Iterable[Any]) -> dict[str, str]:
    return dict(zip(group_by, key, strict=True))


# -- latency --------------------------------------------------------------------------------


def latency(
    engine: Engine,
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
    """Quantiles of ``metric`` (``ttft``, ``tpot``, ``e2e``, …) per group over ``window``."""
    column = LATENCY_METRICS[check_metric(metric)]
    groups = check_group_by(group_by)
    qs = check_quantiles(quantiles)
    with engine.connect() as connection:

        def rows() -> int:
            return sum(t.requests for t in _throughput(connection, window, selector, (), finest))

        method = resolve_method(method, rows, exact_max_rows)
        if method is Method.EXACT:
            answers = _exact(connection, column, window, selector, groups, qs)
            error = 0.0
        else:
            sketches = group_sketches(connection, column, window, selector, groups, finest)
            answers = sketch_groups(groups, sketches, qs)
            error = DEFAULT_RELATIVE_ACCURACY
    return latency_result(metric, window, method, error, answers)


def _exact(
    connection: Connection,
    column: str,
    window: Window,
    selector: Selector,
    group_by: Sequence[str],
    qs: Sequence[float],
) -> list[GroupQuantiles]:
    value = requests.c[column]
    keys = [requests.c[name] for name in group_by]
    where = and_(raw_where(window, selector), value.is_not(None))
    if connection.dialect.name == "postgresql":
        array: ColumnElement[Any] = literal_column(
            "ARRAY[" + ",".join(repr(float(q)) for q in qs) + "]::float8[]"
        )
        query = (
            select(
                *keys,
                func.count(value),
                func.percentile_cont(array).within_group(value.asc()),
            )
            .where(where)
            .group_by(*keys)
        )
        out = []
        for row in connection.execute(query):
            *key, count, values = row
            if not count:
                # An aggregate without GROUP BY answers one row even over no rows (count 0,
                # NULL percentiles); SQLite's path answers no group at all: so does this one.
                continue
            out.append(
                GroupQuantiles(
                    _labels(group_by, key), int(count), dict(zip(qs, values, strict=True))
                )
            )
        return out
    grouped: dict[LabelKey, list[float]] = defaultdict(list)
    for row in connection.execute(select(*keys, value).where(where)):
        grouped[tuple(row[:-1])].append(row[-1])
    return [
        GroupQuantiles(_labels(group_by, key), len(values), exact_quantiles(values, qs))
        for key, values in grouped.items()
    ]


def group_sketches(
    connection: Connection,
    column: str,
    window: Window,
    selector: Selector,
    group_by: Sequence[str],
    finest: Resolution = Resolution.MINUTE,
    cache: SketchCache | None = None,
) -> dict[LabelKey, QuantileSketch]:
    """One merged sketch of ``column`` per group over ``window`` (raw edges + rollups; each
    rollup segment's merged sketches from ``storage.sketch_cache`` while its rows are
    unchanged: the process's cache for the engine by default)."""

    def raw(segment: Segment) -> list[tuple[LabelKey, QuantileSketch | None]]:
        value = requests.c[column]
        rows = connection.execute(
            select(*(requests.c[n] for n in group_by), value).where(
                and_(raw_where(segment, selector), value.is_not(None))
            )
        ).all()
        if not rows:
            return []
        index: dict[LabelKey, int] = {}
        ids = np.fromiter(
            (index.setdefault(tuple(r[:-1]), len(index)) for r in rows), dtype=np.int64
        )
        values = np.fromiter((r[-1] for r in rows), dtype=np.float64)
        return list(zip(index, sketches_by_group(ids, values, len(index)), strict=True))

    def rollup(segment: Segment) -> list[tuple[LabelKey, QuantileSketch | None]]:
        # Through the sketch cache: a segment's rows decoded again only when they changed.
        found = merged_sketches(
            connection,
            (column,),
            rollup_where_shaped(selector_shape(selector)),
            group_by,
            None,
            cache,
            span_values(segment, selector),
        )
        return [(key, sketches[0]) for (key, _), sketches in found.items()]

    parts: dict[LabelKey, list[QuantileSketch]] = defaultdict(list)
    for pairs in read_segments(window, finest, raw, rollup):
        for key, sketch in pairs:
            if sketch is not None:
                parts[key].append(sketch)
    return {key: merge_all(sketches) for key, sketches in parts.items()}


def group_sketches_many(
    connection: Connection,
    columns: Sequence[str],
    window: Window,
    selector: Selector,
    group_by: Sequence[str] = (),
    finest: Resolution = Resolution.MINUTE,
    cache: SketchCache | None = None,
) -> dict[str, dict[LabelKey, QuantileSketch]]:
    """``group_sketches`` for several columns in one pass over the window: each raw edge is
    read once for all of them, and each rollup segment's digest and sketches in one statement
    (``storage.sketch_cache``), instead of once per column. A group without a value of a
    column has no entry under it. A sketch may be the cache's own (one part): read it, never
    change it."""
    fields = tuple(columns)
    parts: dict[LabelKey, list[list[QuantileSketch]]] = defaultdict(lambda: [[] for _ in fields])

    shape = (tuple(group_by), fields, selector_shape(selector))

    def raw(segment: Segment) -> None:
        rows = connection.execute(_values_raw(shape), span_values(segment, selector)).all()
        if not rows:
            return
        width = len(group_by)
        index: dict[LabelKey, int] = {}
        ids = np.fromiter((index.setdefault(tuple(r[:width]), len(index)) for r in rows), np.int64)
        for i in range(len(fields)):
            column = np.fromiter(
                (np.nan if r[width + i] is None else r[width + i] for r in rows),
                dtype=np.float64,
                count=len(rows),
            )
            for key, sketch in zip(index, sketches_by_group(ids, column, len(index)), strict=True):
                if sketch is not None:
                    parts[key][i].append(sketch)

    def rollup(segment: Segment) -> None:
        found = merged_sketches(
            connection,
            fields,
            rollup_where_shaped(selector_shape(selector)),
            group_by,
            None,
            cache,
            span_values(segment, selector),
        )
        for (key, _), sketches in found.items():
            for i, sketch in enumerate(sketches):
                if sketch is not None:
                    parts[key][i].append(sketch)

    for _ in read_segments(window, finest, raw, rollup):
        pass
    return {
        field: {key: _merged(per[i]) for key, per in parts.items() if per[i]}
        for i, field in enumerate(fields)
    }


@lru_cache(maxsize=64)
def _values_raw(shape: tuple[tuple[str, ...], tuple[str, ...], SelectorShape]) -> Select[Any]:
    """``group_sketches_many``' raw read of its fields' values (groups, fields, selector),
    built once per shape."""
    group_by, fields, selecting = shape
    return select(*(requests.c[n] for n in group_by), *(requests.c[f] for f in fields)).where(
        raw_where_shaped(selecting)
    )


def _merged(sketches: Sequence[QuantileSketch]) -> QuantileSketch:
    return sketches[0] if len(sketches) == 1 else merge_all(sketches)


def latencies(
    engine: Engine,
    metrics: Sequence[str],
    window: Window,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    quantiles: Sequence[float] = DEFAULT_QUANTILES,
    *,
    finest: Resolution = Resolution.MINUTE,
    cache: SketchCache | None = None,
) -> dict[str, LatencyResult]:
    """``latency`` by sketch for several metrics in one pass over the window
    (``group_sketches_many``): a 30-day table decodes the few rollup rows that fresh or late
    data touched, not every day, hour and minute row."""
    names = [check_metric(m) for m in metrics]
    fields = [LATENCY_METRICS[m] for m in names]
    groups = check_group_by(group_by)
    qs = check_quantiles(quantiles)
    with engine.connect() as connection:
        sketches = group_sketches_many(connection, fields, window, selector, groups, finest, cache)
    return {
        metric: latency_result(
            metric,
            window,
            Method.SKETCH,
            DEFAULT_RELATIVE_ACCURACY,
            sketch_groups(groups, sketches[field], qs),
        )
        for metric, field in zip(names, fields, strict=True)
    }


# -- throughput -----------------------------------------------------------------------------


def throughput(
    engine: Engine,
    window: Window,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    *,
    finest: Resolution = Resolution.MINUTE,
) -> list[Throughput]:
    """Requests, errors and tokens per group over ``window`` (rates per second of window)."""
    groups = check_group_by(group_by)
    with engine.connect() as connection:
        return _throughput(connection, window, selector, groups, finest)


_TOTALS: Final = ("requests", "errors", "input_tokens", "output_tokens")


def _throughput(
    connection: Connection,
    window: Window,
    selector: Selector,
    group_by: Sequence[str],
    finest: Resolution,
) -> list[Throughput]:
    shape = (tuple(group_by), selector_shape(selector))

    def raw(segment: Segment) -> Result[Any]:
        return connection.execute(_throughput_raw(shape), span_values(segment, selector))

    def rollup(segment: Segment) -> Result[Any]:
        return connection.execute(_throughput_rollup(shape), span_values(segment, selector))

    totals: dict[LabelKey, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for rows in read_segments(window, finest, raw, rollup):
        for row in rows:
            bucket = totals[tuple(row[: len(group_by)])]
            for i, amount in enumerate(row[len(group_by) :]):
                bucket[i] += int(amount or 0)
    return [
        Throughput(
            _labels(group_by, key),
            requests=values[0],
            errors=values[1],
            input_tokens=values[2],
            output_tokens=values[3],
            seconds=window.seconds,
        )
        for key, values in sorted(totals.items())
        if values[0]
    ]


#: A grouped read's shape: its group-by labels and its selector's shape.
GroupShape = tuple[tuple[str, ...], SelectorShape]


@lru_cache(maxsize=64)
def _throughput_raw(shape: GroupShape) -> Select[Any]:
    """``_throughput``'s raw read, built once per shape (values as parameters)."""
    group_by, selecting = shape
    keys = [requests.c[n] for n in group_by]
    return (
        select(
            *keys,
            func.count(),
            func.coalesce(func.sum(case((requests.c.status == "error", 1), else_=0)), 0),
            func.coalesce(func.sum(requests.c.input_tokens), 0),
            func.coalesce(func.sum(requests.c.output_tokens), 0),
        )
        .where(raw_where_shaped(selecting))
        .group_by(*keys)
    )


@lru_cache(maxsize=64)
def _throughput_rollup(shape: GroupShape) -> Select[Any]:
    """``_throughput``'s rollup read, built once per shape (values as parameters)."""
    group_by, selecting = shape
    keys = [request_rollups.c[n] for n in group_by]
    return (
        select(*keys, *(func.sum(request_rollups.c[name]) for name in _TOTALS))
        .where(rollup_where_shaped(selecting))
        .group_by(*keys)
    )


def data_span(
    engine: Engine,
    window: Window,
    selector: Selector = Selector(),
    *,
    finest: Resolution = Resolution.MINUTE,
) -> Window | None:
    """The part of ``window`` that holds requests ``selector`` picks (``None``: none does):
    from the first ``finest`` rollup bucket with requests to the end of the last, within the
    window. A rate over the whole window would count its empty part (a service that started
    in the middle of the window, or stopped before its end); the dashboard's overview rates
    use the same bucket rule. The rollups are written with the requests, so they cover every
    stored request at ``finest``.
    """
    segment = Segment(finest.floor(window.start), window.end, finest)
    # The first and the last bucket each as ``ORDER BY bucket LIMIT 1`` on the primary key
    # (resolution, bucket, ...): an index scan that stops at the first match. ``min``/``max``
    # with the filter read every bucket of the window (160 ms over 30 days of minutes).
    buckets = select(request_rollups.c.bucket).where(
        rollup_where(segment, selector), request_rollups.c.requests > 0
    )
    query = select(
        buckets.order_by(request_rollups.c.bucket.asc()).limit(1).scalar_subquery(),
        buckets.order_by(request_rollups.c.bucket.desc()).limit(1).scalar_subquery(),
    )
    with engine.connect() as connection:
        first, last = connection.execute(query).one()
    if first is None or last is None:
        return None
    end = min(last + timedelta(seconds=finest.seconds), window.end)
    return Window(max(first, window.start), end)


# -- breakdown ------------------------------------------------------------------------------

_BREAKDOWN_FIELDS: Final = ("e2e_s", *(f"{stage}_s" for stage in STAGES))


def breakdown(
    engine: Engine,
    window: Window,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    *,
    finest: Resolution = Resolution.MINUTE,
) -> list[Breakdown]:
    """Each stage's share of the requests' time, per group, over ``window`` (shares add up
    to at most 1: see ``core.query.Breakdown``)."""
    groups = check_group_by(group_by)
    with engine.connect() as connection:
        return _breakdowns(connection, window, selector, groups, finest)


def _breakdowns(
    connection: Connection,
    window: Window,
    selector: Selector,
    groups: Sequence[str],
    finest: Resolution,
) -> list[Breakdown]:
    shape = (tuple(groups), selector_shape(selector))

    def raw(segment: Segment) -> list[tuple[LabelKey, list[tuple[int, float]]]]:
        out = []
        for row in connection.execute(_breakdown_raw(shape), span_values(segment, selector)):
            values = row[len(groups) :]
            pairs = [
                (int(n or 0), float(t or 0.0))
                for n, t in zip(values[::2], values[1::2], strict=True)
            ]
            out.append((tuple(row[: len(groups)]), pairs))
        return out

    def rollup(segment: Segment) -> list[tuple[LabelKey, list[tuple[int, float]]]]:
        rows = connection.execute(_breakdown_rollup(shape), span_values(segment, selector))
        return [
            (
                tuple(row[: len(groups)]),
                [(0, 0.0) if blob is None else header_totals(blob) for blob in row[len(groups) :]],
            )
            for row in rows
        ]

    # per group: field -> [count, sum]
    acc: dict[LabelKey, dict[str, list[float]]] = defaultdict(
        lambda: {name: [0, 0.0] for name in _BREAKDOWN_FIELDS}
    )
    for rows in read_segments(window, finest, raw, rollup):
        for key, totals in rows:
            fields_ = acc[key]
            for name, (count, total) in zip(_BREAKDOWN_FIELDS, totals, strict=True):
                fields_[name][0] += count
                fields_[name][1] += total
    return [_breakdown(_labels(groups, key), fields_) for key, fields_ in sorted(acc.items())]


@lru_cache(maxsize=64)
def _breakdown_raw(shape: GroupShape) -> Select[Any]:
    """``_breakdowns``' raw read, built once per shape (values as parameters)."""
    groups, selecting = shape
    keys = [requests.c[n] for n in groups]
    aggregates = []
    for name in _BREAKDOWN_FIELDS:
        aggregates += [func.count(requests.c[name]), func.sum(requests.c[name])]
    return select(*keys, *aggregates).where(raw_where_shaped(selecting)).group_by(*keys)


@lru_cache(maxsize=64)
def _breakdown_rollup(shape: GroupShape) -> Select[Any]:
    """``_breakdowns``' rollup read: only each sketch's header (its count and sum, what
    ``header_totals`` reads), not its buckets; built once per shape."""
    groups, selecting = shape
    headers = [sketch_header(n) for n in _BREAKDOWN_FIELDS]
    return select(*(request_rollups.c[n] for n in groups), *headers).where(
        rollup_where_shaped(selecting)
    )


def _breakdown(labels: Mapping[str, str], fields_: Mapping[str, list[float]]) -> Breakdown:
    e2e_count, e2e_total = fields_["e2e_s"]
    stages = {}
    for stage in STAGES:
        count, total = fields_[f"{stage}_s"]
        stages[stage] = (int(count), total)
    return breakdown_of(labels, (int(e2e_count), e2e_total), stages)
