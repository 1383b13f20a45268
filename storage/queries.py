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
from typing import Any, Final

import numpy as np
from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Table,
    and_,
    case,
    func,
    literal_column,
    select,
)

from core.quantiles import DEFAULT_QUANTILES, check_quantiles, exact_quantiles
from core.query import (
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
)
from core.sketch import (
    DEFAULT_RELATIVE_ACCURACY,
    QuantileSketch,
    header_totals,
    merge_all,
    sketches_by_group,
)
from core.window import Resolution, Segment, Window, split
from storage.tables import request_rollups, requests

DEFAULT_EXACT_MAX_ROWS: Final = 200_000
LabelKey = tuple[str, ...]


def _filters(table: Table, selector: Selector) -> list[ColumnElement[bool]]:
    return [table.c[name] == value for name, value in selector.items()]


def _raw_where(segment: Segment | Window, selector: Selector) -> ColumnElement[bool]:
    return and_(
        requests.c.start >= segment.start,
        requests.c.start < segment.end,
        *_filters(requests, selector),
    )


def _rollup_where(segment: Segment, selector: Selector) -> ColumnElement[bool]:
    assert segment.resolution is not None
    return and_(
        request_rollups.c.resolution == segment.resolution.value,
        request_rollups.c.bucket >= segment.start,
        request_rollups.c.bucket < segment.end,
        *_filters(request_rollups, selector),
    )


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
        if method is Method.AUTO:
            total = sum(t.requests for t in _throughput(connection, window, selector, (), finest))
            method = Method.EXACT if total <= exact_max_rows else Method.SKETCH
        if method is Method.EXACT:
            answers = _exact(connection, column, window, selector, groups, qs)
            error = 0.0
        else:
            answers = _sketched(connection, column, window, selector, groups, qs, finest)
            error = DEFAULT_RELATIVE_ACCURACY
    ordered = tuple(sorted(answers, key=lambda g: tuple(g.labels.values())))
    return LatencyResult(metric, window, method, error, ordered)


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
    where = and_(_raw_where(window, selector), value.is_not(None))
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


def _sketched(
    connection: Connection,
    column: str,
    window: Window,
    selector: Selector,
    group_by: Sequence[str],
    qs: Sequence[float],
    finest: Resolution,
) -> list[GroupQuantiles]:
    sketches = group_sketches(connection, column, window, selector, group_by, finest)
    return [
        GroupQuantiles(_labels(group_by, key), sketch.count, sketch.quantiles(qs))
        for key, sketch in sketches.items()
        if sketch.count
    ]


def group_sketches(
    connection: Connection,
    column: str,
    window: Window,
    selector: Selector,
    group_by: Sequence[str],
    finest: Resolution = Resolution.MINUTE,
) -> dict[LabelKey, QuantileSketch]:
    """One merged sketch of ``column`` per group over ``window`` (raw edges + rollups)."""
    sketch_column = request_rollups.c[f"{column.removesuffix('_s')}_sketch"]
    parts: dict[LabelKey, list[QuantileSketch]] = defaultdict(list)
    for segment in split(window, finest):
        if segment.raw:
            value = requests.c[column]
            rows = connection.execute(
                select(*(requests.c[n] for n in group_by), value).where(
                    and_(_raw_where(segment, selector), value.is_not(None))
                )
            ).all()
            if not rows:
                continue
            index: dict[LabelKey, int] = {}
            ids = np.fromiter(
                (index.setdefault(tuple(r[:-1]), len(index)) for r in rows), dtype=np.int64
            )
            values = np.fromiter((r[-1] for r in rows), dtype=np.float64)
            for key, sketch in zip(index, sketches_by_group(ids, values, len(index)), strict=True):
                if sketch is not None:
                    parts[key].append(sketch)
        else:
            query = select(*(request_rollups.c[n] for n in group_by), sketch_column).where(
                and_(_rollup_where(segment, selector), sketch_column.is_not(None))
            )
            for row in connection.execute(query):
                parts[tuple(row[:-1])].append(QuantileSketch.from_bytes(row[-1]))
    return {key: merge_all(sketches) for key, sketches in parts.items()}


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
    totals: dict[LabelKey, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for segment in split(window, finest):
        if segment.raw:
            keys = [requests.c[n] for n in group_by]
            query = (
                select(
                    *keys,
                    func.count(),
                    func.coalesce(func.sum(case((requests.c.status == "error", 1), else_=0)), 0),
                    func.coalesce(func.sum(requests.c.input_tokens), 0),
                    func.coalesce(func.sum(requests.c.output_tokens), 0),
                )
                .where(_raw_where(segment, selector))
                .group_by(*keys)
            )
        else:
            keys = [request_rollups.c[n] for n in group_by]
            query = (
                select(*keys, *(func.sum(request_rollups.c[name]) for name in _TOTALS))
                .where(_rollup_where(segment, selector))
                .group_by(*keys)
            )
        for row in connection.execute(query):
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
    # per group: field -> [count, sum]
    acc: dict[LabelKey, dict[str, list[float]]] = defaultdict(
        lambda: {name: [0, 0.0] for name in _BREAKDOWN_FIELDS}
    )
    with engine.connect() as connection:
        for segment in split(window, finest):
            if segment.raw:
                keys = [requests.c[n] for n in groups]
                aggregates = []
                for name in _BREAKDOWN_FIELDS:
                    aggregates += [func.count(requests.c[name]), func.sum(requests.c[name])]
                query = (
                    select(*keys, *aggregates).where(_raw_where(segment, selector)).group_by(*keys)
                )
                for row in connection.execute(query):
                    fields_ = acc[tuple(row[: len(groups)])]
                    values = row[len(groups) :]
                    for i, name in enumerate(_BREAKDOWN_FIELDS):
                        fields_[name][0] += int(values[2 * i] or 0)
                        fields_[name][1] += float(values[2 * i + 1] or 0.0)
            else:
                columns = [
                    request_rollups.c[f"{n.removesuffix('_s')}_sketch"] for n in _BREAKDOWN_FIELDS
                ]
                query = select(*(request_rollups.c[n] for n in groups), *columns).where(
                    _rollup_where(segment, selector)
                )
                for row in connection.execute(query):
                    fields_ = acc[tuple(row[: len(groups)])]
                    for name, blob in zip(_BREAKDOWN_FIELDS, row[len(groups) :], strict=True):
                        if blob is not None:
                            count, total = header_totals(blob)
                            fields_[name][0] += count
                            fields_[name][1] += total
    return [_breakdown(_labels(groups, key), fields_) for key, fields_ in sorted(acc.items())]


def _breakdown(labels: Mapping[str, str], fields_: Mapping[str, list[float]]) -> Breakdown:
    e2e_count, e2e_total = fields_["e2e_s"]
    stages = {}
    for stage in STAGES:
        count, total = fields_[f"{stage}_s"]
        stages[stage] = (int(count), total)
    return breakdown_of(labels, (int(e2e_count), e2e_total), stages)
