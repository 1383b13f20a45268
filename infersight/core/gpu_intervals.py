"""The interval rule GPU rollups book GPU time by (pure: no SQL), shared by both stores.

A GPU sample stands for the time until the same GPU's next sample, at most ``ROLLUP_GAP_S``
(a longer silence means the sidecar or the instance was gone); a sample with no next one
within the gap stands for the whole gap. Its energy is the increase of NVML's energy counter
to that next sample (a reset counts from zero), else power × seconds, else nothing. Each
sample's interval is booked to the minute its sample falls in, then summed into hours and days
(``coarsen``).

Because a sample's interval depends on its successor, a sample that arrives also changes its
predecessor's interval: ``book`` takes the freshly stored samples and every stored sample of
their GPUs within one gap on either side (the new ones included), and returns the new samples'
own values plus, for each older sample whose successor changed, its new interval minus its old
one. Passing only samples a store actually stored (not ones it already held) makes a replay
change nothing. ``storage.gpu_rollup`` (SQL) and ``storage_clickhouse.gpu_rollups`` both book
through here, so their rollups are equal on the same samples.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from infersight.core.samples import BENIGN_REASONS, GpuSample
from infersight.core.window import Resolution, Segment, Window, split

#: The sample gap the rollups are computed with: ``CostModel``'s default ``sample_gap_s``.
ROLLUP_GAP_S: Final = 300.0
#: The per-sample means a GPU rollup keeps (``<field>_sum`` and ``<field>_n``).
GPU_ROLLUP_MEANS: Final = (
    "util_gpu",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "sm_clock_mhz",
)
#: Clock-event reasons that slow a busy GPU down: a GPU rollup counts the samples reporting each.
GPU_ROLLUP_REASONS: Final = (
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
#: Utilisation histogram bins: [KK/20, (KK+1)/20) for KK < 20, and exactly 1.
GPU_UTIL_BINS: Final = 21
#: Utilisation bin edges: k/20 for k = 0…20 (the floats a floor such as 0.05 is written as).
EDGES: Final = tuple(k / (GPU_UTIL_BINS - 1) for k in range(GPU_UTIL_BINS))
BIN_COLUMNS: Final = tuple(f"util_bin_{k:02d}" for k in range(GPU_UTIL_BINS))
TIME_COLUMNS: Final = (
    "covered_s",
    "util_s",
    "util_weighted_s",
    "energy_j",
    "throttled_s",
    *BIN_COLUMNS,
)
COUNT_COLUMNS: Final = (
    "samples",
    *(f"{f}_n" for f in GPU_ROLLUP_MEANS),
    "throttled_samples",
    *(f"reason_{r}" for r in GPU_ROLLUP_REASONS),
)
VALUE_COLUMNS: Final = (*(f"{f}_sum" for f in GPU_ROLLUP_MEANS), *TIME_COLUMNS)
SUM_COLUMNS: Final = (*COUNT_COLUMNS, *VALUE_COLUMNS)
MAX_COLUMNS: Final = ("ecc_sbe_max", "ecc_dbe_max", "xid_max")
RESOLUTIONS: Final = (Resolution.MINUTE, Resolution.HOUR, Resolution.DAY)

GpuKey = tuple[str, int]


def util_bin(util: float) -> int:
    """The histogram bin of a utilisation in [0, 1]."""
    return min(max(bisect_right(EDGES, util) - 1, 0), GPU_UTIL_BINS - 1)


def idle_seconds(bins: Sequence[float], floor: float) -> float:
    """Seconds under ``floor`` from a histogram: exact on a bin edge, interpolated inside."""
    k = bisect_right(EDGES, floor) - 1
    if k >= GPU_UTIL_BINS - 1:
        return float(sum(bins[: GPU_UTIL_BINS - 1])) + (bins[-1] if floor > 1.0 else 0.0)
    below = float(sum(bins[:k]))
    if floor == EDGES[k]:
        return below
    return below + bins[k] * (floor - EDGES[k]) / (EDGES[k + 1] - EDGES[k])


def floor_on_edge(floor: float) -> bool:
    return floor in EDGES


@dataclass(frozen=True, slots=True)
class GpuPoint:
    """What the interval rule needs of one sample."""

    t: float
    util: float | None
    power: float | None
    energy: float | None
    throttled: bool


def point(ts: datetime, util: Any, power: Any, energy: Any, reasons: str) -> GpuPoint:
    """A stored sample's point (``reasons``: its clock-event reasons, comma-separated)."""
    hard = any(r and r not in BENIGN_REASONS for r in (reasons or "").split(","))
    return GpuPoint(
        ts.timestamp(),
        None if util is None else float(util),
        None if power is None else float(power),
        None if energy is None else float(energy),
        hard,
    )


def point_of(s: GpuSample) -> GpuPoint:
    return point(s.ts, s.util_gpu, s.power_w, s.energy_j, ",".join(s.throttle_reasons))


def interval(p: GpuPoint, nxt: GpuPoint | None, gap: float) -> tuple[float, float]:
    """Seconds and joules ``p`` stands for, given the GPU's next sample (or none in reach)."""
    if nxt is None or nxt.t - p.t > gap:
        return gap, (p.power * gap if p.power is not None else 0.0)
    dt = nxt.t - p.t
    if p.energy is not None and nxt.energy is not None:
        return dt, (nxt.energy - p.energy if nxt.energy >= p.energy else nxt.energy)
    return dt, (p.power * dt if p.power is not None else 0.0)


def time_values(p: GpuPoint, nxt: GpuPoint | None, gap: float, sign: float) -> dict[str, float]:
    """The per-second columns ``p``'s interval adds (``sign`` -1 takes them back out)."""
    dt, joules = interval(p, nxt, gap)
    out = {"covered_s": sign * dt, "energy_j": sign * joules}
    if p.util is not None:
        out["util_s"] = sign * dt
        out["util_weighted_s"] = sign * p.util * dt
        out[BIN_COLUMNS[util_bin(p.util)]] = sign * dt
    if p.throttled:
        out["throttled_s"] = sign * dt
    return out


@dataclass(slots=True)
class RollupDelta:
    """What a batch adds to one rollup row: sums, maxima, and the GPU's name and slice."""

    name: str = ""
    gpu_slice: str = ""
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    maxes: dict[str, float | None] = field(default_factory=dict)

    def add(self, values: Mapping[str, float]) -> None:
        for column, value in values.items():
            self.sums[column] += value

    def most(self, column: str, value: float | None) -> None:
        if value is not None:
            old = self.maxes.get(column)
            self.maxes[column] = value if old is None else max(old, value)


def sample_values(s: GpuSample) -> dict[str, float]:
    """The per-sample columns one sample adds."""
    out: dict[str, float] = {"samples": 1.0}
    for name in GPU_ROLLUP_MEANS:
        value = getattr(s, name)
        if value is not None:
            out[f"{name}_sum"] = float(value)
            out[f"{name}_n"] = 1.0
    if s.throttled:
        out["throttled_samples"] = 1.0
        for reason in s.throttle_reasons:
            if reason in GPU_ROLLUP_REASONS:
                out[f"reason_{reason}"] = 1.0
    return out


#: Per (minute, instance, GPU index).
Minutes = dict[tuple[datetime, str, int], RollupDelta]
#: Per (resolution value, bucket, instance, GPU index).
Changes = dict[tuple[str, datetime, str, int], RollupDelta]
#: A GPU's stored samples (new ones included) near a batch, as (time, point), in time order.
Around = Mapping[GpuKey, Sequence[tuple[datetime, GpuPoint]]]


def book(stored: Sequence[GpuSample], around: Around, gap: float = ROLLUP_GAP_S) -> Minutes:
    """Per-minute changes: the new samples' own values and every affected interval."""
    minutes: Minutes = defaultdict(RollupDelta)
    new: dict[GpuKey, set[datetime]] = defaultdict(set)
    for s in stored:
        new[(s.instance, s.gpu_index)].add(s.ts.astimezone(UTC))
        delta = minutes[(Resolution.MINUTE.floor(s.ts), s.instance, s.gpu_index)]
        delta.add(sample_values(s))
        delta.name = max(delta.name, s.name)
        delta.gpu_slice = max(delta.gpu_slice, s.gpu_slice)
        delta.most("ecc_sbe_max", s.ecc_sbe_total)
        delta.most("ecc_dbe_max", s.ecc_dbe_total)
        delta.most("xid_max", s.xid_last)
    for key, rows in around.items():
        interval_deltas(key, rows, new[key], gap, minutes)
    return minutes


def coarsen(minutes: Minutes) -> Changes:
    """Minute changes, and the same changes summed into their hours and days."""
    out: Changes = {}
    for (minute, instance, index), delta in minutes.items():
        for resolution in RESOLUTIONS:
            k = (resolution.value, resolution.floor(minute), instance, index)
            merged = out.setdefault(k, RollupDelta())
            merged.add(delta.sums)
            merged.name = max(merged.name, delta.name)
            merged.gpu_slice = max(merged.gpu_slice, delta.gpu_slice)
            for column, value in delta.maxes.items():
                merged.most(column, value)
    return out


def interval_deltas(
    key: GpuKey,
    rows: Sequence[tuple[datetime, GpuPoint]],
    new: set[datetime],
    gap: float,
    minutes: Minutes,
) -> None:
    """Book each new sample's interval, and the change of each older sample's interval."""
    old = [(ts, p) for ts, p in rows if ts not in new]
    next_old = {ts: old[i + 1][1] if i + 1 < len(old) else None for i, (ts, _) in enumerate(old)}
    for i, (ts, p) in enumerate(rows):
        nxt = rows[i + 1][1] if i + 1 < len(rows) else None
        bucket = minutes[(Resolution.MINUTE.floor(ts), key[0], key[1])]
        if ts in new:
            bucket.add(time_values(p, nxt, gap, 1.0))
            continue
        before = next_old[ts]
        if before is nxt:
            continue
        bucket.add(time_values(p, nxt, gap, 1.0))
        bucket.add(time_values(p, before, gap, -1.0))


def by_gpu(samples: Iterable[GpuSample]) -> dict[GpuKey, list[GpuSample]]:
    """``samples`` per GPU."""
    out: dict[GpuKey, list[GpuSample]] = defaultdict(list)
    for s in samples:
        out[(s.instance, s.gpu_index)].append(s)
    return out


def plan(window: Window, coarsest: Resolution, finest: Resolution) -> list[Segment]:
    """``core.window.split`` with buckets no coarser than ``coarsest`` (raw where none fit):
    how a GPU chart whose step is ``coarsest``'s multiple covers a window with rollups."""
    order = (Resolution.MINUTE, Resolution.HOUR, Resolution.DAY)
    if order.index(finest) > order.index(coarsest):
        return [Segment(window.start, window.end, None)]
    if coarsest is Resolution.DAY:
        return split(window, finest)
    inner_start, inner_end = coarsest.ceil(window.start), coarsest.floor(window.end)
    if inner_start >= inner_end:
        return split(window, finest)
    out: list[Segment] = []
    if window.start < inner_start:
        out += split(Window(window.start, inner_start), finest)
    out.append(Segment(inner_start, inner_end, coarsest))
    if inner_end < window.end:
        out += split(Window(inner_end, window.end), finest)
    return out
