"""Reading GPU time and GPU-sample totals over a window: rollups inside, raw samples at edges.

``storage.gpu_rollup`` keeps the rollups and defines the interval rule; this module answers
with them: ``covered_time`` (what cost bills), ``util_sums`` (a baseline's mean utilisation),
and ``plan`` (which buckets a chart step can use). ``raw_intervals`` is the rule in SQL over raw
samples, for a window's ragged edges and for short windows, so both paths agree by construction.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    CompoundSelect,
    Connection,
    Double,
    Float,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    or_,
    select,
    union_all,
)

from infersight.core import gpu_intervals
from infersight.core.window import Resolution, Segment, Window, split
from infersight.storage.gpu_rollup import BIN_COLUMNS, ROLLUP_GAP_S, GpuKey, idle_seconds
from infersight.storage.sql import segment_values, segments_where
from infersight.storage.tables import gpu_rollups, gpu_samples


def epoch(dialect: str, column: Any) -> ColumnElement[float]:
    """Seconds since the epoch of a timestamp column, to the microsecond on both databases."""
    if dialect == "postgresql":
        return cast(func.date_part("epoch", column), Float(53))
    # SQLite keeps 'YYYY-MM-DD HH:MM:SS.ffffff': whole seconds exactly, plus the fraction.
    return cast(whole_seconds(column), Float(53)) + cast(func.substr(column, 20), Float(53))


def whole_seconds(column: Any) -> ColumnElement[int]:
    """SQLite: the whole seconds since the epoch of a 'YYYY-MM-DD HH:MM:SS.ffffff' column,
    floored. ``strftime('%s', …)`` of the full text rounds the fraction to the millisecond
    first, so a time in the last half-millisecond of a second counted as the next second (a
    sample at :51.999999 fell in the bucket starting at :52); the fraction is cut off first."""
    return cast(func.strftime("%s", func.substr(column, 1, 19)), Integer)


@dataclass(slots=True)
class CoveredTime:
    """What one GPU's samples cover over a window (the interval rule above)."""

    name: str = ""
    covered_s: float = 0.0
    idle_s: float = 0.0
    energy_j: float = 0.0
    util_s: float = 0.0
    util_weighted_s: float = 0.0
    gpu_slice: str = ""

    def add(self, other: CoveredTime) -> None:
        self.name = max(self.name, other.name)
        self.gpu_slice = max(self.gpu_slice, other.gpu_slice)
        self.covered_s += other.covered_s
        self.idle_s += other.idle_s
        self.energy_j += other.energy_j
        self.util_s += other.util_s
        self.util_weighted_s += other.util_weighted_s


def _covered(name: str, gpu_slice: str, values: Sequence[Any]) -> CoveredTime:
    covered, idle, energy, util_s, weighted = (float(v or 0.0) for v in values)
    return CoveredTime(name, covered, idle, energy, util_s, weighted, gpu_slice)


def raw_intervals(
    connection: Connection,
    lo: datetime,
    hi: datetime,
    horizon: datetime,
    gap: float,
    floor: float,
    instance: str | None = None,
) -> dict[GpuKey, CoveredTime]:
    """The interval rule in SQL over raw samples in ``[lo, hi)``.

    Successors are looked for among the samples before ``horizon``; a sample with none stands
    for the time to ``horizon``, at most ``gap``. ``horizon = hi`` is a window's exact answer
    (its last sample stops at the window's end); ``horizon = hi + gap`` gives each sample its
    whole interval, as the rollups hold it.
    """
    return raw_intervals_many(connection, [(lo, hi, horizon)], gap, floor, instance)[0]


#: A span of raw samples read by the interval rule: ``(lo, hi, horizon)``.
RawSpan = tuple[datetime, datetime, datetime]


def raw_intervals_many(
    connection: Connection,
    spans: Sequence[RawSpan],
    gap: float,
    floor: float,
    instance: str | None = None,
) -> list[dict[GpuKey, CoveredTime]]:
    """``raw_intervals`` of each of ``spans`` from one statement: a ``UNION ALL`` of the reads
    it replaces, each tagged with its span."""
    if not spans:
        return []
    query = _raw_intervals_query(connection.dialect.name, len(spans), instance is not None)
    values: dict[str, Any] = {"gap": gap, "floor": floor}
    for part, (lo, hi, horizon) in enumerate(spans):
        values[f"lo_{part}"], values[f"hi_{part}"] = lo, hi
        values[f"horizon_{part}"], values[f"horizon_s_{part}"] = horizon, horizon.timestamp()
    if instance is not None:
        values["instance"] = instance
    out: list[dict[GpuKey, CoveredTime]] = [{} for _ in spans]
    for row in connection.execute(query, values).all():
        out[row[0]][(row[1], int(row[2]))] = _covered(row[3] or "", row[4] or "", row[5:])
    return out


@lru_cache(maxsize=32)
def _raw_intervals_query(dialect: str, parts: int, one_instance: bool) -> CompoundSelect[Any]:
    """``raw_intervals_many``' statement, built once per dialect and shape with its values as
    parameters: building and keying it again for every read cost more CPU than running it."""
    return union_all(*(_raw_interval_part(dialect, part, one_instance) for part in range(parts)))


def _raw_interval_part(dialect: str, part: int, one_instance: bool) -> Select[Any]:
    """The interval rule over the raw samples of span ``part`` (its parameters ``lo_K``,
    ``hi_K``, ``horizon_K``, ``horizon_s_K``), per GPU, tagged with ``part``."""
    g = gpu_samples.c
    t = epoch(dialect, g.ts)
    gap: BindParameter[float] = bindparam("gap", type_=Double())
    where = [g.ts >= bindparam(f"lo_{part}"), g.ts < bindparam(f"horizon_{part}")]
    if one_instance:
        where.append(g.instance == bindparam("instance"))
    per_gpu = (g.instance, g.gpu_index)
    samples = (
        select(
            g.instance,
            g.gpu_index,
            g.name,
            g.gpu_slice,
            g.ts,
            g.util_gpu.label("util"),
            g.energy_j.label("energy"),
            g.power_w.label("power"),
            t.label("t"),
            func.lead(t).over(partition_by=per_gpu, order_by=g.ts).label("t_next"),
            func.lead(g.energy_j).over(partition_by=per_gpu, order_by=g.ts).label("energy_next"),
        )
        .where(*where)
        .subquery()
    )
    s = samples.c
    span = func.coalesce(s.t_next, bindparam(f"horizon_s_{part}", type_=Double())) - s.t
    dt = case((span > gap, gap), else_=span)
    energy = case(
        (
            and_(s.energy.is_not(None), s.energy_next.is_not(None), s.t_next - s.t <= gap),
            case((s.energy_next >= s.energy, s.energy_next - s.energy), else_=s.energy_next),
        ),
        (s.power.is_not(None), s.power * dt),
        else_=0.0,
    )
    intervals = (
        select(
            s.instance,
            s.gpu_index,
            s.name,
            s.gpu_slice,
            s.util,
            dt.label("dt"),
            energy.label("energy"),
        )
        .where(s.ts < bindparam(f"hi_{part}"))
        .subquery()
    )
    i = intervals.c
    return select(
        literal_column(str(part)).label("part"),
        i.instance,
        i.gpu_index,
        func.max(i.name),
        func.max(i.gpu_slice),
        func.sum(i.dt),
        func.sum(case((i.util < bindparam("floor", type_=Double()), i.dt), else_=0.0)),
        func.sum(i.energy),
        func.sum(case((i.util.is_not(None), i.dt), else_=0.0)),
        func.sum(func.coalesce(i.util, 0.0) * i.dt),
    ).group_by(i.instance, i.gpu_index)


def _in_segments(segments: Sequence[Segment]) -> ColumnElement[bool]:
    r = gpu_rollups.c
    return or_(
        *(
            and_(r.resolution == seg.resolution, r.bucket >= seg.start, r.bucket < seg.end)
            for seg in segments
            if seg.resolution is not None
        )
    )


def covered_time(
    connection: Connection,
    window: Window,
    floor: float,
    instance: str | None = None,
    finest: Resolution = Resolution.MINUTE,
) -> dict[GpuKey, CoveredTime]:
    """Per GPU, what ``raw_intervals(window.start, window.end, window.end)`` answers, from
    rollups with raw samples only at the edges.

    The window splits at ``cut = end − gap``: before it every sample's successor (if any
    within the gap) lies inside the window, so whole intervals apply and are read from
    rollups between raw edges; the last gap is read raw with the window's own end.

    Past minute retention (``finest`` coarser than a minute) the raw samples are gone too:
    the window is read from the rollup buckets it covers, with no raw tail, so an interval
    crossing the window's end counts in full and ragged ends finer than ``finest`` are lost.
    """
    gap = ROLLUP_GAP_S
    cut = window.end if finest is not Resolution.MINUTE else window.end - timedelta(seconds=gap)
    out: dict[GpuKey, CoveredTime] = defaultdict(CoveredTime)

    def add(parts: dict[GpuKey, CoveredTime]) -> None:
        for key, part in parts.items():
            out[key].add(part)

    if cut <= window.start:
        add(raw_intervals(connection, window.start, window.end, window.end, gap, floor, instance))
        return dict(out)
    segments = split(Window(window.start, cut), finest)
    # The raw edges with whole intervals, then the last gap with the window's own end: read in
    # one statement, added up in that order.
    spans: list[RawSpan] = [
        (seg.start, seg.end, seg.end + timedelta(seconds=gap)) for seg in segments if seg.raw
    ]
    spans.append((cut, window.end, window.end))
    for parts in raw_intervals_many(connection, spans, gap, floor, instance):
        add(parts)
    rolled = [seg for seg in segments if not seg.raw]
    if rolled:
        resolutions, values = segment_values(rolled)
        if instance is not None:
            values["instance"] = instance
        query = _rolled_covered_query(resolutions, instance is not None)
        for row in connection.execute(query, values):
            covered, energy, util_s, weighted, *bins = (float(v or 0.0) for v in row[4:])
            add(
                {
                    (row[0], int(row[1])): CoveredTime(
                        row[2] or "",
                        covered,
                        idle_seconds(bins, floor),
                        energy,
                        util_s,
                        weighted,
                        gpu_slice=row[3] or "",
                    )
                }
            )
    return dict(out)


@lru_cache(maxsize=64)
def _rolled_covered_query(resolutions: tuple[str, ...], one_instance: bool) -> Select[Any]:
    """``covered_time``'s read of the rollup segments of ``resolutions`` (their bounds the
    parameters ``lo_K`` and ``hi_K``, ``storage.sql.segment_values``), built once per shape as
    ``_raw_intervals_query``."""
    r = gpu_rollups.c
    where = [segments_where(gpu_rollups, resolutions)]
    if one_instance:
        where.append(r.instance == bindparam("instance"))
    columns = ("covered_s", "energy_j", "util_s", "util_weighted_s", *BIN_COLUMNS)
    return (
        select(
            r.instance,
            r.gpu_index,
            func.max(r.name),
            func.max(r.gpu_slice),
            *(func.sum(r[c]) for c in columns),
        )
        .where(*where)
        .group_by(r.instance, r.gpu_index)
    )


def plan(window: Window, coarsest: Resolution, finest: Resolution) -> list[Segment]:
    """``core.window.split`` with buckets no coarser than ``coarsest`` (raw where none fit)."""
    return gpu_intervals.plan(window, coarsest, finest)


def util_sums(
    connection: Connection,
    window: Window,
    instances: Any | None = None,
    finest: Resolution = Resolution.MINUTE,
) -> tuple[float, int]:
    """Σ utilisation and the number of samples that reported it over ``window`` (rollups
    between raw edges); ``instances`` (values or a subquery) narrows the GPUs read."""
    total, count = 0.0, 0
    g, r = gpu_samples.c, gpu_rollups.c
    segments = split(window, finest)
    for seg in segments:
        if not seg.raw:
            continue
        where = [g.ts >= seg.start, g.ts < seg.end, g.util_gpu.is_not(None)]
        if instances is not None:
            where.append(g.instance.in_(instances))
        row = connection.execute(select(func.sum(g.util_gpu), func.count()).where(*where)).one()
        total, count = total + float(row[0] or 0.0), count + int(row[1] or 0)
    rolled = [seg for seg in segments if not seg.raw]
    if rolled:
        where = [_in_segments(rolled)]
        if instances is not None:
            where.append(r.instance.in_(instances))
        row = connection.execute(
            select(func.sum(r.util_gpu_sum), func.sum(r.util_gpu_n)).where(*where)
        ).one()
        total, count = total + float(row[0] or 0.0), count + int(row[1] or 0)
    return total, count


def bucket_epoch(at: Any) -> float:
    """A bucket or timestamp as Unix seconds (SQLite answers some as numbers)."""
    return at.timestamp() if isinstance(at, datetime) else float(at)
