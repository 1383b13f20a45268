"""Baselines in the store, and capturing one from a time window of production traffic.

A baseline is kept whole as its JSON document (``core.baseline.to_dict``) next to the few
columns a listing needs. ``capture_window`` reads the window the way every query does
(``storage.queries``): latency quantiles exact from raw rows when the window is small enough,
else from the rollup sketches, and always the merged sketch of each latency metric, so a
month-long baseline costs a few hundred rollup rows and still carries its distribution.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Engine, select, union

from infersight.core.baseline import (
    BASELINE_QUANTILES,
    LATENCY_METRICS,
    Baseline,
    LatencySummary,
    check_name,
    from_dict,
    of_window,
    to_dict,
)
from infersight.core.cost import CostModel
from infersight.core.errors import InvalidInput
from infersight.core.query import LATENCY_METRICS as COLUMNS
from infersight.core.query import Method, Selector
from infersight.core.sketch import QuantileSketch
from infersight.core.window import Resolution, Segment, Window
from infersight.storage import gpu_reads, queries
from infersight.storage.cost import cost
from infersight.storage.documents import NamedDocuments
from infersight.storage.sql import raw_where, rollup_where
from infersight.storage.tables import baselines, request_rollups, requests

MAX_LISTED: Final = 1000
#: Up to this long a window also reads raw requests to find the instances a selector served
#: (rollups alone answer longer ones: every request has its day rollup row).
RAW_INSTANCES_MAX_S: Final = 86400.0


# -- definitions ----------------------------------------------------------------------------


#: Each baseline whole as its JSON document, next to the columns a listing shows.
_BASELINES = NamedDocuments(baselines, "document", "baseline")


def save_baseline(engine: Engine, baseline: Baseline, *, replace: bool = False) -> bool:
    """Store ``baseline``; ``True`` when it is new. An existing name is a ``Conflict``
    unless ``replace``."""
    values = {
        "created_at": baseline.created_at,
        "source": baseline.source,
        "description": baseline.description,
        "document": json.dumps(to_dict(baseline), separators=(",", ":")),
    }
    return _BASELINES.put(engine, baseline.name, values, replace=replace)


def get_baseline(engine: Engine, name: str) -> Baseline:
    check_name(name)
    return from_dict(json.loads(_BASELINES.get(engine, name)))


def list_baselines(engine: Engine, limit: int = MAX_LISTED) -> list[Baseline]:
    """Baselines, newest first."""
    newest_first = (baselines.c.created_at.desc(), baselines.c.name)
    rows = _BASELINES.all(engine, newest_first, limit=max(1, min(limit, MAX_LISTED)))
    return [from_dict(json.loads(document)) for _, document in rows]


def delete_baseline(engine: Engine, name: str) -> None:
    _BASELINES.delete(engine, name)


# -- capture from a window ------------------------------------------------------------------


def capture_window(
    engine: Engine,
    name: str,
    window: Window,
    selector: Selector,
    created_at: datetime,
    *,
    description: str = "",
    finest: Resolution = Resolution.MINUTE,
    exact_max_rows: int = queries.DEFAULT_EXACT_MAX_ROWS,
    cost_model: CostModel | None = None,
) -> Baseline:
    """A baseline of the requests ``selector`` picks in ``window`` (not stored).

    Its ``duration_s`` and throughputs are those of the part of the window that holds data
    (``queries.data_span``); ``window_start`` and ``window_end`` are the window asked for.
    With a ``cost_model`` the baseline also carries the window's cost per million tokens
    (``storage.cost``), and its currency as the ``cost_currency`` label.
    """
    totals = queries.throughput(engine, window, selector, finest=finest)
    if not totals:
        raise InvalidInput(
            "the window holds no requests for this selector",
            details={"start": window.start.isoformat(), "end": window.end.isoformat()},
        )
    total = totals[0]
    # Rates over the part of the window that holds data, not over the whole window.
    span = queries.data_span(engine, window, selector, finest=finest) or window
    money = None
    if cost_model is not None:
        per_million = cost(engine, window, cost_model, selector, finest=finest).total
        money = per_million.cost_per_million_tokens
    latency = _latencies(engine, window, selector, finest, exact_max_rows, total.requests)
    return of_window(
        name, created_at, window, selector, total, span, latency,
        gpu_utilization=gpu_utilization(engine, window, selector, finest),
        per_million=money, description=description,
    )  # fmt: skip


def _latencies(
    engine: Engine,
    window: Window,
    selector: Selector,
    finest: Resolution,
    exact_max_rows: int,
    requests_in_window: int,
) -> dict[str, LatencySummary | None]:
    """The window's latency summary of each metric: exact quantiles when it holds at most
    ``exact_max_rows`` requests (``Method.AUTO``'s rule, decided on ``requests_in_window``,
    the window's throughput count), else the quantiles of its merged sketch. The merged
    sketches of every metric are read in one pass over the window
    (``queries.group_sketches_many``), once for both the quantiles and the summary."""
    columns = {metric: COLUMNS[metric] for metric in LATENCY_METRICS}
    with engine.connect() as connection:
        merged = queries.group_sketches_many(
            connection, tuple(columns.values()), window, selector, (), finest
        )
    out: dict[str, LatencySummary | None] = {}
    for metric, column in columns.items():
        sketch = merged[column].get((), QuantileSketch())
        if requests_in_window > exact_max_rows:
            out[metric] = (
                LatencySummary.of_sketch(sketch, sketch.quantiles(BASELINE_QUANTILES))
                if sketch.count
                else None
            )
            continue
        answer = queries.latency(
            engine,
            metric,
            window,
            selector,
            (),
            BASELINE_QUANTILES,
            Method.EXACT,
            finest=finest,
        )
        out[metric] = (
            LatencySummary.of_sketch(sketch, answer.groups[0].quantiles) if answer.groups else None
        )
    return out


def gpu_utilization(
    engine: Engine,
    window: Window,
    selector: Selector,
    finest: Resolution = Resolution.MINUTE,
) -> float | None:
    """Mean GPU utilisation (per sample) of the instances that served ``selector``'s requests.

    GPU samples carry only the instance, so a selector on model, tenant or priority is
    resolved to the instances that served such requests during the window (day rollups, and
    raw rows too for short windows). Samples are summed from ``gpu_rollups`` between raw edges.
    """
    instances: Any = None
    if selector.narrowed:
        # Day rows suffice: every request is counted in its day's row (kept the longest).
        days = Segment(Resolution.DAY.floor(window.start), window.end, Resolution.DAY)
        instances = select(request_rollups.c.instance).where(rollup_where(days, selector))
        if window.seconds <= RAW_INSTANCES_MAX_S:
            raw = select(requests.c.instance).where(raw_where(window, selector))
            instances = union(raw, instances)
    with engine.connect() as connection:
        total, count = gpu_reads.util_sums(connection, window, instances, finest)
    return None if not count else min(1.0, max(0.0, total / count))
