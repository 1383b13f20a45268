"""Time series for the dashboard: rollup buckets per series, and GPU samples per time bucket.

``storage.queries`` answers one number per group over a whole window; a chart needs one per
bucket. Request series read ``request_rollups`` at one resolution (a minute, an hour or a day
per point), so a 30-day chart reads a few hundred rollup rows, never the raw requests. GPU
samples are summed per bucket from ``gpu_rollups`` over long windows (raw samples at the ragged
edges, and for short windows one grouped scan on the ``(instance, ts)`` index); clock-event
reasons come back as counts per hard reason so that "throttled" keeps its one definition
(``core.samples``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Select,
    and_,
    bindparam,
    func,
    literal,
    or_,
    select,
    text,
)

from infersight.core.gpu_intervals import GPU_ROLLUP_MEANS, GPU_ROLLUP_REASONS
from infersight.core.query import LATENCY_METRICS, Selector, check_group_by, check_metric
from infersight.core.records import GROUP_LABELS
from infersight.core.samples import BENIGN_REASONS, THROTTLE_REASONS
from infersight.core.sketch import QuantileSketch, merge_all
from infersight.core.window import Resolution, Segment, Window
from infersight.storage import gpu_reads
from infersight.storage.sketch_cache import SketchCache, merged_sketches
from infersight.storage.sql import (
    SelectorShape,
    rollup_where,
    segment_values,
    segments_where,
    selected,
    selected_by_shape,
    selector_shape,
    selector_values,
    sketch_column,
)
from infersight.storage.tables import (
    gpu_rollups,
    gpu_samples,
    request_rollups,
)
from infersight.storage.types import UTCDateTime

LabelKey = tuple[str, ...]
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: The most series listed for filter menus (a menu, not an inventory).
MAX_SERIES: Final = 5000


def _rollup_rows(
    window: Window, step: Resolution, selector: Selector, coarsest: Resolution | None = None
) -> ColumnElement[bool]:
    """The ``step`` rollup rows of the buckets that overlap the window (the first may start
    before it: charts show whole buckets).

    With ``coarsest``, the same time (whole ``step`` buckets) is read from as few rollup rows
    as possible: the coarsest resolutions up to ``coarsest`` that fit inside it, ``step`` rows
    at the ragged ends. Every resolution is kept from the same records, so their sums match;
    a caller that adds rows up per chart bucket gets the same totals from far fewer rows.
    """
    if coarsest is None or coarsest is step:
        return rollup_where(Segment(step.floor(window.start), window.end, step), selector)
    covered = Window(step.floor(window.start), step.ceil(window.end))
    segments = gpu_reads.plan(covered, coarsest, step)  # aligned to ``step``: no raw edges
    return and_(
        or_(*(rollup_where(seg) for seg in segments)),
        *selected(request_rollups, selector),
    )


#: A rollup read's shape: the resolutions of its segments, and its selector's shape.
RowsShape = tuple[tuple[str, ...], SelectorShape]


def _rows_of(
    window: Window, step: Resolution, selector: Selector, coarsest: Resolution | None = None
) -> tuple[RowsShape, dict[str, Any]]:
    """``_rollup_rows`` as a shape (``_rows_where`` builds its condition once) and the
    parameters of this read."""
    if coarsest is None or coarsest is step:
        segments = [Segment(step.floor(window.start), window.end, step)]
    else:
        covered = Window(step.floor(window.start), step.ceil(window.end))
        segments = gpu_reads.plan(covered, coarsest, step)
    resolutions, values = segment_values(segments)
    return (resolutions, selector_shape(selector)), {**values, **selector_values(selector)}


@lru_cache(maxsize=256)
def _rows_where(shape: RowsShape) -> ColumnElement[bool]:
    """``_rollup_rows``' condition for a shape (one object per shape: statements built around
    it are kept by it too, ``sketch_cache.merged_sketches``)."""
    resolutions, selecting = shape
    return and_(
        segments_where(request_rollups, resolutions),
        *selected_by_shape(request_rollups, selecting),
    )


def label_sets(
    engine: Engine, window: Window, step: Resolution = Resolution.HOUR
) -> list[tuple[str, ...]]:
    """The distinct (model, instance, tenant, priority) series with requests in ``window``.

    Read from ``step`` rollups (hours, or days for long ranges): the filter menus of a page
    are built from these, each menu narrowed by the other filters.
    """
    shape, values = _rows_of(window, step, Selector())
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(_label_sets_query(shape), values)]


@lru_cache(maxsize=64)
def _label_sets_query(shape: RowsShape) -> Select[Any]:
    keys = [request_rollups.c[n] for n in GROUP_LABELS]
    return select(*keys).where(_rows_where(shape)).group_by(*keys).order_by(*keys).limit(MAX_SERIES)


#: How far back ``first_seen`` places a series' first request to the minute; older than
#: this, to the hour (a day's worth of minute rows at most is read).
FIRST_SEEN_MINUTES: Final = 86400


def first_seen(
    connection: Connection, since: datetime, now: datetime
) -> dict[tuple[str, ...], datetime]:
    """The start of each series' first rollup bucket with requests in ``[since, now)``, keyed
    by its ``GROUP_LABELS`` values: to the hour from hour rollups, and to the minute where
    that hour is less than ``FIRST_SEEN_MINUTES`` before ``now`` (how much data backs a
    window: "45 min of 28 d")."""
    keys = [request_rollups.c[n] for n in GROUP_LABELS]
    bucket = request_rollups.c.bucket

    def firsts(resolution: Resolution, start: datetime) -> dict[tuple[str, ...], datetime]:
        query = (
            select(*keys, func.min(bucket))
            .where(
                request_rollups.c.resolution == resolution.value,
                bucket >= start,
                bucket < now,
            )
            .group_by(*keys)
            .limit(MAX_SERIES)
        )
        return {tuple(row[:-1]): row[-1] for row in connection.execute(query)}

    found = firsts(Resolution.HOUR, Resolution.HOUR.floor(since))
    recent = {k for k, at in found.items() if (now - at).total_seconds() < FIRST_SEEN_MINUTES}
    if recent:
        finer = firsts(Resolution.MINUTE, min(found[k] for k in recent))
        found.update({key: at for key, at in finer.items() if key in recent})
    return {key: max(at, since) for key, at in found.items()}


@dataclass(frozen=True, slots=True)
class Counts:
    """Request totals of one series in one bucket."""

    requests: int
    errors: int
    input_tokens: int
    output_tokens: int


def request_series(
    engine: Engine,
    window: Window,
    step: Resolution,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    coarsest: Resolution | None = None,
    bucket_s: int | None = None,
) -> dict[LabelKey, dict[datetime, Counts]]:
    """Request and token totals per group per ``step`` bucket overlapping ``window``.

    With ``coarsest`` (for a caller that adds buckets up into ones of a multiple of that
    resolution), the buckets are rollup rows of ``step`` up to ``coarsest`` (``_rollup_rows``).
    With ``bucket_s`` (a multiple of ``step``'s seconds) the database adds the rows up per
    ``bucket_s`` bucket (aligned to the Unix epoch) and the answer has one entry per such
    bucket: the same totals as adding up ``step`` buckets, from far fewer rows.
    """
    groups = check_group_by(group_by)
    width = len(groups)
    binned = not (bucket_s is None or bucket_s == step.seconds)
    if binned and bucket_s is not None and bucket_s % step.seconds:
        raise ValueError(f"bucket_s {bucket_s} is not a multiple of {step.value}")
    shape, values = _rows_of(window, step, selector, coarsest)
    out: dict[LabelKey, dict[datetime, Counts]] = defaultdict(dict)
    with engine.connect() as connection:
        query = _request_series_query(
            connection.dialect.name, shape, groups, bucket_s if binned else None
        )
        # Binned: a timestamp (PostgreSQL) or Unix seconds (SQLite).
        rows = connection.execute(query, values).all()
    end = 1 + width
    for row in rows:
        when = datetime.fromtimestamp(gpu_reads.bucket_epoch(row[0]), UTC) if binned else row[0]
        requests, errors, input_tokens, output_tokens = row[end:]
        out[tuple(row[1:end])][when] = Counts(
            int(requests or 0), int(errors or 0), int(input_tokens or 0), int(output_tokens or 0)
        )
    return dict(out)


@lru_cache(maxsize=256)
def _request_series_query(
    dialect: str, shape: RowsShape, groups: tuple[str, ...], bucket_s: int | None
) -> Select[Any]:
    """``request_series``' statement, built once per dialect, shape, grouping and bucket."""
    keys = [request_rollups.c[n] for n in groups]
    bucket = request_rollups.c.bucket
    sums = [
        func.sum(request_rollups.c[n])
        for n in ("requests", "errors", "input_tokens", "output_tokens")
    ]
    at: ColumnElement[Any] = (
        bucket if bucket_s is None else _bucket_in(dialect, bucket_s, bucket).label("at")
    )
    return select(at, *keys, *sums).where(_rows_where(shape)).group_by(at, *keys).order_by(at)


@dataclass(frozen=True, slots=True)
class RequestPeak:
    """One model's ``step`` rollup buckets over a window, added up over its instances."""

    peak: int
    """Requests in its busiest bucket."""
    requests: int
    """Requests in all of its buckets."""
    first: datetime
    """The start of its first bucket with a rollup row, and of its last."""
    last: datetime
    instances: tuple[str, ...]
    """The instances that served it, sorted."""


def request_peaks(
    engine: Engine, window: Window, step: Resolution, selector: Selector = Selector()
) -> dict[str, RequestPeak]:
    """Per model: the busiest ``step`` bucket overlapping ``window`` (its instances' requests
    added up), the requests of all its buckets, its first and last bucket and its instances.

    What adding up ``request_series(window, step, selector, ("model", "instance"))`` per
    model and bucket gives, added up by the database: a handful of rows per model instead of
    one per bucket and instance (a day of minutes over four instances is 5,760)."""
    shape, values = _rows_of(window, step, selector)
    peaks, served = _peaks_queries(shape)
    with engine.connect() as connection:
        found = connection.execute(peaks, values).all()
        pairs = connection.execute(served, values).all()
    instances: dict[str, list[str]] = defaultdict(list)
    for model, instance in pairs:
        instances[model].append(instance)
    return {
        model: RequestPeak(
            int(peak or 0), int(total or 0), first, last, tuple(sorted(instances[model]))
        )
        for model, peak, total, first, last in found
    }


def bucket_sketches(
    engine: Engine,
    metric: str,
    window: Window,
    step: Resolution,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    coarsest: Resolution | None = None,
) -> dict[LabelKey, dict[datetime, QuantileSketch]]:
    """One merged sketch of ``metric`` per group per ``step`` bucket overlapping ``window``
    (with ``coarsest``: per rollup row of ``step`` up to ``coarsest``, as ``request_series``)."""
    column = LATENCY_METRICS[check_metric(metric)]
    groups = check_group_by(group_by)
    sketch = sketch_column(column)
    query = select(request_rollups.c.bucket, *(request_rollups.c[n] for n in groups), sketch).where(
        _rollup_rows(window, step, selector, coarsest), sketch.is_not(None)
    )
    parts: dict[tuple[LabelKey, datetime], list[QuantileSketch]] = defaultdict(list)
    with engine.connect() as connection:
        for row in connection.execute(query):
            parts[(tuple(row[1:-1]), row[0])].append(QuantileSketch.from_bytes(row[-1]))
    out: dict[LabelKey, dict[datetime, QuantileSketch]] = defaultdict(dict)
    for (labels, at), sketches in sorted(parts.items(), key=lambda item: item[0][1]):
        out[labels][at] = sketches[0] if len(sketches) == 1 else merge_all(sketches)
    return dict(out)


def bucket_sketches_many(
    engine: Engine,
    metrics: Sequence[str],
    window: Window,
    step: Resolution,
    bucket_s: int,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    coarsest: Resolution | None = None,
    cache: SketchCache | None = None,
) -> dict[str, dict[LabelKey, dict[datetime, QuantileSketch]]]:
    """Per metric, one merged sketch per group per ``bucket_s``-second chart bucket (aligned
    to the Unix epoch, a whole number of ``step``) of the ``step`` rollups overlapping
    ``window`` — read up to ``coarsest`` as ``request_series`` reads them — in one pass for
    all ``metrics``. Only chart buckets whose rows changed since an earlier read are decoded
    and merged (``storage.sketch_cache``: the process's cache for ``engine`` by default)."""
    fields = [LATENCY_METRICS[check_metric(m)] for m in metrics]
    groups = check_group_by(group_by)
    if bucket_s < step.seconds or bucket_s % step.seconds:
        raise ValueError("a chart bucket must be a whole number of rollup buckets")
    shape, values = _rows_of(window, step, selector, coarsest)
    with engine.connect() as connection:
        found = merged_sketches(
            connection, fields, _rows_where(shape), groups, bucket_s, cache, values
        )
    out: dict[str, dict[LabelKey, dict[datetime, QuantileSketch]]] = {m: {} for m in metrics}
    for (labels, at), sketches in sorted(found.items(), key=lambda item: item[0][1] or _EPOCH):
        assert at is not None
        for metric, sketch in zip(metrics, sketches, strict=True):
            if sketch is not None:
                out[metric].setdefault(labels, {})[at] = sketch
    return out


@lru_cache(maxsize=64)
def _peaks_queries(shape: RowsShape) -> tuple[Select[Any], Select[Any]]:
    """``request_peaks``' two statements, built once per shape."""
    r = request_rollups.c
    rows_of = _rows_where(shape)
    per_bucket = (
        select(r.model, r.bucket, func.sum(r.requests).label("n"))
        .where(rows_of)
        .group_by(r.model, r.bucket)
        .subquery()
    )
    b = per_bucket.c
    peaks = select(
        b.model, func.max(b.n), func.sum(b.n), func.min(b.bucket), func.max(b.bucket)
    ).group_by(b.model)
    return peaks, select(r.model, r.instance).where(rows_of).distinct()


# -- GPU samples ----------------------------------------------------------------------------

#: GPU sample columns averaged per bucket (what the GPU page shows): the ones the GPU rollups
#: keep sums of, so raw and rolled-up buckets answer the same fields.
GPU_MEANS: Final = GPU_ROLLUP_MEANS


@dataclass(frozen=True, slots=True)
class GpuBucket:
    """One GPU's samples over one bucket: means, the throttled share and error counters."""

    instance: str
    gpu_index: int
    bucket: datetime
    samples: int
    means: dict[str, float]
    throttled_samples: int
    reasons: dict[str, int] = field(default_factory=dict)
    """Samples per non-benign clock-event reason."""
    ecc_sbe_total: float | None = None
    ecc_dbe_total: float | None = None
    xid_last: int | None = None
    name: str = ""

    @property
    def throttled_share(self) -> float:
        return self.throttled_samples / self.samples if self.samples else 0.0


def bucket_of(connection: Connection, step_s: int, ts: Any = None) -> ColumnElement[Any]:
    """The start of each sample's bucket (of ``ts``, GPU samples' time by default): a
    timestamp on PostgreSQL, Unix seconds on SQLite (``gpu_reads.bucket_epoch`` reads both)."""
    return _bucket_in(connection.dialect.name, step_s, ts)


def _bucket_in(dialect: str, step_s: int, ts: Any = None) -> ColumnElement[Any]:
    """``bucket_of`` for a dialect's name."""
    ts = gpu_samples.c.ts if ts is None else ts
    if dialect == "postgresql":
        # date_bin (PostgreSQL 14+) is about twice as fast as arithmetic on extract(epoch).
        origin = literal(_EPOCH, UTCDateTime())
        return func.date_bin(text(f"interval '{int(step_s)} seconds'"), ts, origin)
    seconds = gpu_reads.whole_seconds(ts)
    return (seconds // step_s) * step_s


#: GPU charts over windows up to this long read raw samples (a few thousand a GPU).
GPU_ROLLUP_MIN_S: Final = 6 * 3600.0


def gpu_series(
    engine: Engine,
    window: Window,
    step_s: int,
    instances: Sequence[str] | None = None,
    finest: Resolution = Resolution.MINUTE,
    *,
    raw_only: bool = False,
) -> list[GpuBucket]:
    """Every GPU's samples in ``window`` averaged per ``step_s`` bucket, in time order.

    A long window whose step is a whole number of minutes reads ``gpu_rollups`` (the coarsest
    resolution that divides the step, no finer than ``finest``) and raw samples only at its
    ragged edges; every rollup bucket lies inside one step bucket, so the sums are the same.
    """
    if step_s < 1:
        raise ValueError("step_s must be at least one second")
    acc = _GpuAcc(step_s)
    with engine.connect() as connection:
        if raw_only or step_s % 60 or window.seconds <= GPU_ROLLUP_MIN_S:
            acc.add_raw(_raw_gpu_rows(connection, window.start, window.end, step_s, instances))
            return acc.buckets()
        coarsest = next(r for r in (Resolution.DAY, Resolution.HOUR, Resolution.MINUTE)
                        if step_s % r.seconds == 0)  # fmt: skip
        segments = gpu_reads.plan(window, coarsest, finest)
        for seg in segments:
            if seg.raw:
                acc.add_raw(_raw_gpu_rows(connection, seg.start, seg.end, step_s, instances))
        rolled = [seg for seg in segments if not seg.raw]
        if rolled:
            acc.add_rollups(_rollup_gpu_rows(connection, rolled, instances, step_s))
    return acc.buckets()


def _raw_gpu_rows(
    connection: Connection,
    start: datetime,
    end: datetime,
    step_s: int,
    instances: Sequence[str] | None,
) -> Sequence[Any]:
    query = _raw_gpu_query(connection.dialect.name, step_s, instances is not None)
    values: dict[str, Any] = {"lo": start, "hi": end}
    if instances is not None:
        values["instances"] = list(instances)
    return connection.execute(query, values).all()


@lru_cache(maxsize=64)
def _raw_gpu_query(dialect: str, step_s: int, some_instances: bool) -> Select[Any]:
    """``_raw_gpu_rows``' statement, built once per dialect, step and shape (the span and the
    instances as parameters)."""
    g = gpu_samples.c
    where = [g.ts >= bindparam("lo"), g.ts < bindparam("hi")]
    if some_instances:
        where.append(g.instance.in_(bindparam("instances", expanding=True)))
    at = _bucket_in(dialect, step_s).label("at")
    return (
        select(
            g.instance,
            g.gpu_index,
            at,
            g.throttle_reasons,
            func.count(),
            *(func.avg(g[name]) for name in GPU_MEANS),
            func.max(g.ecc_sbe_total),
            func.max(g.ecc_dbe_total),
            func.max(g.xid_last),
            func.max(g.name),
        )
        .where(*where)
        .group_by(g.instance, g.gpu_index, at, g.throttle_reasons)
    )


def _rollup_gpu_rows(
    connection: Connection,
    segments: Sequence[Segment],
    instances: Sequence[str] | None,
    step_s: int | None = None,
) -> Sequence[Any]:
    """The rollup rows of ``segments``; with ``step_s``, added up per GPU and ``step_s``
    bucket by the database (every rollup bucket lies inside one step bucket): the same sums
    and maxima from one row per chart point instead of one per rollup bucket."""
    resolutions, values = segment_values(segments)
    if instances is not None:
        values["instances"] = list(instances)
    query = _rollup_gpu_query(connection.dialect.name, resolutions, instances is not None, step_s)
    return connection.execute(query, values).all()


@lru_cache(maxsize=128)
def _rollup_gpu_query(
    dialect: str, resolutions: tuple[str, ...], some_instances: bool, step_s: int | None
) -> Select[Any]:
    """``_rollup_gpu_rows``' statement, built once per dialect, segments' resolutions, shape
    and step (the segments' bounds and the instances as parameters)."""
    r = gpu_rollups.c
    where = [segments_where(gpu_rollups, resolutions)]
    if some_instances:
        where.append(r.instance.in_(bindparam("instances", expanding=True)))
    columns = [
        r.instance,
        r.gpu_index,
        r.bucket,
        r.samples,
        *(r[f"{name}_{part}"] for name in GPU_MEANS for part in ("sum", "n")),
        r.throttled_samples,
        *(r[f"reason_{reason}"] for reason in GPU_ROLLUP_REASONS),
        r.ecc_sbe_max,
        r.ecc_dbe_max,
        r.xid_max,
        r.name,
    ]
    if step_s is None:
        return select(*columns).where(*where)
    at = _bucket_in(dialect, step_s, r.bucket).label("at")
    summed = [
        r.instance,
        r.gpu_index,
        at,
        func.sum(r.samples),
        *(func.sum(r[f"{name}_{part}"]) for name in GPU_MEANS for part in ("sum", "n")),
        func.sum(r.throttled_samples),
        *(func.sum(r[f"reason_{reason}"]) for reason in GPU_ROLLUP_REASONS),
        func.max(r.ecc_sbe_max),
        func.max(r.ecc_dbe_max),
        func.max(r.xid_max),
        func.max(r.name),
    ]
    return select(*summed).where(*where).group_by(r.instance, r.gpu_index, at)


class _GpuAcc:
    """Per (GPU, step bucket): samples, per-field sums and counts, throttle counts, maxima."""

    def __init__(self, step_s: int) -> None:
        self.step_s = step_s
        self.slots: dict[tuple[str, int, float], dict[str, Any]] = {}

    def _slot(self, instance: str, index: int, epoch: float) -> dict[str, Any]:
        key = (instance, int(index), epoch)
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = {
                "samples": 0, "sums": [0.0] * len(GPU_MEANS), "counts": [0] * len(GPU_MEANS),
                "throttled": 0, "reasons": defaultdict(int), "sbe": None, "dbe": None,
                "xid": None, "name": "",
            }  # fmt: skip
        return slot

    @staticmethod
    def _maxima(slot: dict[str, Any], sbe: Any, dbe: Any, xid: Any, name: Any) -> None:
        slot["sbe"] = _max(slot["sbe"], sbe)
        slot["dbe"] = _max(slot["dbe"], dbe)
        slot["xid"] = _max(slot["xid"], xid)
        slot["name"] = max(slot["name"], name or "")

    def add_raw(self, rows: Sequence[Any]) -> None:
        """Rows per (GPU, bucket, reason list): their means weigh back by sample count (one
        GPU's samples come from one source, which reports a field in all or none of them)."""
        n = len(GPU_MEANS)
        for row in rows:
            instance, index, at, reasons, count = row[:5]
            slot = self._slot(instance, index, gpu_reads.bucket_epoch(at))
            slot["samples"] += int(count)
            for i, mean in enumerate(row[5 : 5 + n]):
                if mean is not None:
                    slot["sums"][i] += float(mean) * int(count)
                    slot["counts"][i] += int(count)
            hard = [r for r in (reasons or "").split(",") if r and r not in BENIGN_REASONS]
            if hard:
                slot["throttled"] += int(count)
                for reason in hard:
                    if reason in THROTTLE_REASONS:
                        slot["reasons"][reason] += int(count)
            self._maxima(slot, *row[5 + n :])

    def add_rollups(self, rows: Sequence[Any]) -> None:
        n, k = len(GPU_MEANS), len(GPU_ROLLUP_REASONS)
        for row in rows:
            instance, index, at, samples = row[:4]
            epoch = gpu_reads.bucket_epoch(at)
            slot = self._slot(instance, index, epoch - epoch % self.step_s)
            slot["samples"] += int(samples)
            for i in range(n):
                slot["sums"][i] += float(row[4 + 2 * i])
                slot["counts"][i] += int(row[5 + 2 * i])
            throttled = int(row[4 + 2 * n])
            slot["throttled"] += throttled
            for j, reason in enumerate(GPU_ROLLUP_REASONS):
                if row[5 + 2 * n + j]:
                    slot["reasons"][reason] += int(row[5 + 2 * n + j])
            self._maxima(slot, *row[5 + 2 * n + k :])

    def buckets(self) -> list[GpuBucket]:
        n = len(GPU_MEANS)
        out = []
        for (instance, index, at), slot in sorted(
            self.slots.items(), key=lambda i: (i[0][2], i[0][0], i[0][1])
        ):
            means = {
                GPU_MEANS[i]: slot["sums"][i] / slot["counts"][i]
                for i in range(n)
                if slot["counts"][i]
            }
            out.append(
                GpuBucket(
                    instance=instance,
                    gpu_index=index,
                    bucket=datetime.fromtimestamp(at, UTC),
                    samples=slot["samples"],
                    means=means,
                    throttled_samples=slot["throttled"],
                    reasons=dict(slot["reasons"]),
                    ecc_sbe_total=slot["sbe"],
                    ecc_dbe_total=slot["dbe"],
                    xid_last=int(slot["xid"]) if slot["xid"] is not None else None,
                    name=slot["name"],
                )
            )
        return out


def _max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
