"""Capturing a baseline from a window of production in ClickHouse (issue #36):
``storage.baselines.capture_window``'s baseline on the same data.

Composed of ClickHouse's reads as the SQL store composes its own: the window's totals
(``Reads.throughput``), the part of it that holds data (``data_span``), each latency metric's
merged sketch (``Reads.group_sketches_many``, one pass) and, for a window of at most
``exact_max_rows`` requests, its exact quantiles (``Reads.latency``), the mean GPU utilisation
of the instances that served the selector (``gpu_utilization_of``) and, with a cost model, the
cost per million tokens from the store's ``CostStore`` (whichever store answers it). Labels
are read as attributed (``reads._touches``: requests filled after they were stored read
through ``requests_attributed`` and the rollups' moves).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from infersight.core.baseline import (
    BASELINE_QUANTILES,
    LATENCY_METRICS,
    Baseline,
    LatencySummary,
    of_window,
)
from infersight.core.cost import CostModel
from infersight.core.errors import InvalidInput
from infersight.core.query import LATENCY_METRICS as COLUMNS
from infersight.core.query import Method, Selector
from infersight.core.records import GROUP_LABELS
from infersight.core.sketch import QuantileSketch
from infersight.core.window import Resolution, Segment, Window
from infersight.storage.seam import CostStore
from infersight.storage_clickhouse.reads import (
    Reads,
    Sides,
    _parse,
    _raw,
    _raw_where,
    _rollup_rows,
    _touches,
)
from infersight.storage_clickhouse.samples import RAW_INSTANCES_MAX_S, SampleReads


def data_span(
    reads: Reads,
    window: Window,
    selector: Selector = Selector(),
    finest: Resolution = Resolution.MINUTE,
) -> Window | None:
    """``storage.queries.data_span`` as attributed: from the first ``finest`` rollup bucket
    in which a series the selector picks holds requests to the end of the last, within the
    window. A series' bucket is its rollup rows added up with its moves (a series every
    request moved out of holds none, as the SQL store's emptied row), and the buckets are
    those starting before the window's end to the microsecond."""
    segment = Segment(finest.floor(window.start), finest.ceil(window.end), finest)
    labels = ", ".join(GROUP_LABELS)
    inner = _rollup_rows(
        reads.layout,
        [segment],
        selector,
        f"bucket, {labels}, requests",
        attributed=_touches(selector),
        sides=Sides.probe(reads.transport, reads.layout, [segment]),
    )
    rows = reads.transport.rows(
        "SELECT count(), min(bucket), max(bucket) FROM (SELECT bucket, sum(requests) AS n"
        f" FROM ({inner}) GROUP BY bucket, {labels} HAVING n > 0)"
    )
    if not rows or not rows[0][0]:
        return None
    first, last = _parse(rows[0][1]), _parse(rows[0][2])
    end = min(last + timedelta(seconds=finest.seconds), window.end)
    return Window(max(first, window.start), end)


def gpu_utilization_of(
    reads: Reads,
    samples: SampleReads,
    window: Window,
    selector: Selector,
    finest: Resolution = Resolution.MINUTE,
) -> float | None:
    """``storage.baselines.gpu_utilization``: the mean utilisation per sample of the
    instances that served ``selector``'s requests. A selector that pins no attributed label is
    ``SampleReads.gpu_utilization_of``'s; one that does resolves its instances as attributed
    (day rollups with their moves, and raw rows through ``requests_attributed`` for windows up
    to a day) and sums the same GPU rollups."""
    if not _touches(selector):
        return samples.gpu_utilization_of(window, selector, finest)
    days = Segment(
        Resolution.DAY.floor(window.start), Resolution.DAY.ceil(window.end), Resolution.DAY
    )
    sides = Sides.probe(reads.transport, reads.layout, [days, window])
    inner = _rollup_rows(reads.layout, [days], selector, "instance", sides=sides)
    found = reads.transport.rows(f"SELECT DISTINCT instance FROM ({inner})")
    instances = {str(r[0]) for r in found}
    if window.seconds <= RAW_INSTANCES_MAX_S:
        found = reads.transport.rows(
            f"SELECT DISTINCT instance FROM {_raw(reads.layout, [window], sides=sides)}"
            f" WHERE {_raw_where(window, selector)}"
        )
        instances |= {str(r[0]) for r in found}
    total, count = samples.rollups.util_sums(window, instances, finest)
    return None if not count else min(1.0, max(0.0, total / count))


def capture_window(
    reads: Reads,
    samples: SampleReads,
    cost: CostStore | None,
    name: str,
    window: Window,
    selector: Selector,
    created_at: datetime,
    *,
    description: str = "",
    finest: Resolution = Resolution.MINUTE,
    exact_max_rows: int,
    cost_model: CostModel | None = None,
) -> Baseline:
    """A baseline of the requests ``selector`` picks in ``window`` (not stored), as
    ``storage.baselines.capture_window`` measures it; the cost per million tokens (with a
    ``cost_model``) is ``cost``'s."""
    totals = reads.throughput(window, selector, finest=finest)
    if not totals:
        raise InvalidInput(
            "the window holds no requests for this selector",
            details={"start": window.start.isoformat(), "end": window.end.isoformat()},
        )
    total = totals[0]
    span = data_span(reads, window, selector, finest) or window
    money = None
    if cost_model is not None:
        if cost is None:
            raise ValueError("a cost model needs the store's cost reads")
        money = cost.cost(window, cost_model, selector, finest=finest).total.cost_per_million_tokens
    latency = _latencies(reads, window, selector, finest, exact_max_rows, total.requests)
    return of_window(
        name, created_at, window, selector, total, span, latency,
        gpu_utilization=gpu_utilization_of(reads, samples, window, selector, finest),
        per_million=money, description=description,
    )  # fmt: skip


def _latencies(
    reads: Reads,
    window: Window,
    selector: Selector,
    finest: Resolution,
    exact_max_rows: int,
    requests_in_window: int,
) -> dict[str, LatencySummary | None]:
    """Each metric's summary (``storage.baselines._latencies``): its merged sketch, with exact
    quantiles when the window holds at most ``exact_max_rows`` requests, else the sketch's."""
    columns = {metric: COLUMNS[metric] for metric in LATENCY_METRICS}
    merged = reads.group_sketches_many(list(columns.values()), window, selector, (), finest)
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
        answer = reads.latency(
            metric, window, selector, (), BASELINE_QUANTILES, Method.EXACT, finest=finest
        )
        out[metric] = (
            LatencySummary.of_sketch(sketch, answer.groups[0].quantiles) if answer.groups else None
        )
    return out
