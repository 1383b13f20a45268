"""GPU-sample rollups: per (resolution, bucket, instance, GPU) sums, merged as samples arrive.

The cost, baseline and GPU-page readers need two kinds of totals, and a ``gpu_rollups`` row
keeps both for every minute, hour and day a GPU sampled in:

* **Per sample** (the GPU page's means and throttled shares, a baseline's mean utilisation):
  the sample count, ``<field>_sum`` and ``<field>_n`` (samples that reported the field) for
  ``GPU_ROLLUP_MEANS``, throttled samples and the samples per hard clock-event reason, and the
  highest ECC / XID counters.
* **Per second covered** (cost): the rule ``storage.cost`` bills GPU time by. A sample stands
  for the time until the GPU's next sample, at most ``ROLLUP_GAP_S`` (a longer silence means
  the sidecar or the instance was gone); a sample with no next one within the gap stands for
  the whole gap (the window's end cuts it where a reader asks). Its energy is the increase of
  NVML's energy counter to that next sample (a reset counts from zero), else power × seconds,
  else nothing. Each sample's interval is booked to the bucket its sample falls in: seconds
  covered, seconds with a utilisation reading and Σ utilisation × seconds, energy, throttled
  seconds, and a utilisation histogram (``util_bin_KK``: seconds with utilisation in
  [KK/20, (KK+1)/20), ``util_bin_20`` at exactly 1). Idle time under a floor on a bin edge
  (5 %, 10 %, …) is therefore exact; under any other floor the floor's bin is interpolated
  linearly (``idle_seconds``).

Because a sample's interval depends on its successor, a sample that arrives also changes its
predecessor's interval: ``apply_samples`` reads the GPU's stored samples within one gap on either
side of the batch, computes every affected interval before and after, and merges the
difference. Only samples the insert actually stored are passed in, so a replay changes nothing.
Writers of one GPU are serialised by a transaction-scoped advisory lock on PostgreSQL (SQLite
has one writer at a time); rows are merged with additive upserts in key order.

Readers (``storage.gpu_reads``, for ``storage.cost``, ``storage.baselines`` and
``storage.timeseries``) read whole buckets from here and raw samples only at a window's ragged
edges, where ``gpu_reads.raw_intervals`` applies the same rule in SQL.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sqlalchemy import (
    ColumnElement,
    Connection,
    delete,
    func,
    inspect,
    select,
    text,
    tuple_,
)

from infersight.core.samples import BENIGN_REASONS, GpuSample
from infersight.core.window import Resolution
from infersight.storage.sql import insert_for
from infersight.storage.tables import (
    GPU_ROLLUP_MEANS,
    GPU_ROLLUP_REASONS,
    GPU_UTIL_BINS,
    gpu_rollups,
    gpu_samples,
)

#: The sample gap the rollups are computed with: ``CostModel``'s default ``sample_gap_s``.
#: A cost model with another gap is answered from raw samples (``storage.cost``).
ROLLUP_GAP_S: Final = 300.0
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
_RESOLUTIONS: Final = (Resolution.MINUTE, Resolution.HOUR, Resolution.DAY)

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


# -- the interval rule in Python (the writer) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Point:
    t: float
    util: float | None
    power: float | None
    energy: float | None
    throttled: bool


def _interval(p: _Point, nxt: _Point | None, gap: float) -> tuple[float, float]:
    """Seconds and joules ``p`` stands for, given the GPU's next sample (or none in reach)."""
    if nxt is None or nxt.t - p.t > gap:
        return gap, (p.power * gap if p.power is not None else 0.0)
    dt = nxt.t - p.t
    if p.energy is not None and nxt.energy is not None:
        return dt, (nxt.energy - p.energy if nxt.energy >= p.energy else nxt.energy)
    return dt, (p.power * dt if p.power is not None else 0.0)


def _time_values(p: _Point, nxt: _Point | None, gap: float, sign: float) -> dict[str, float]:
    dt, joules = _interval(p, nxt, gap)
    out = {"covered_s": sign * dt, "energy_j": sign * joules}
    if p.util is not None:
        out["util_s"] = sign * dt
        out["util_weighted_s"] = sign * p.util * dt
        out[BIN_COLUMNS[util_bin(p.util)]] = sign * dt
    if p.throttled:
        out["throttled_s"] = sign * dt
    return out


# -- deltas of a batch -----------------------------------------------------------------------


@dataclass(slots=True)
class _Delta:
    name: str = ""
    gpu_slice: str = ""
    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    maxes: dict[str, float | None] = field(default_factory=dict)

    def add(self, values: dict[str, float]) -> None:
        for column, value in values.items():
            self.sums[column] += value

    def most(self, column: str, value: float | None) -> None:
        if value is not None:
            old = self.maxes.get(column)
            self.maxes[column] = value if old is None else max(old, value)


def _sample_values(s: GpuSample) -> dict[str, float]:
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


def _point(ts: datetime, util: Any, power: Any, energy: Any, reasons: str) -> _Point:
    hard = any(r and r not in BENIGN_REASONS for r in reasons.split(","))
    return _Point(
        ts.timestamp(),
        None if util is None else float(util),
        None if power is None else float(power),
        None if energy is None else float(energy),
        hard,
    )


def _neighbours(
    connection: Connection, gpus: dict[GpuKey, list[GpuSample]], gap: float
) -> dict[GpuKey, list[tuple[datetime, _Point]]]:
    """Every stored sample (new ones included) within ``gap`` of each GPU's new samples."""
    g = gpu_samples.c
    lo = min(s.ts for samples in gpus.values() for s in samples) - timedelta(seconds=gap)
    hi = max(s.ts for samples in gpus.values() for s in samples) + timedelta(seconds=gap)
    query = select(
        g.instance, g.gpu_index, g.ts, g.util_gpu, g.power_w, g.energy_j, g.throttle_reasons
    ).where(
        g.ts >= lo,
        g.ts <= hi,
        tuple_(g.instance, g.gpu_index).in_(list(gpus)),
    )
    out: dict[GpuKey, list[tuple[datetime, _Point]]] = defaultdict(list)
    for row in connection.execute(query):
        out[(row[0], int(row[1]))].append((row[2], _point(*row[2:])))
    for rows in out.values():
        rows.sort(key=lambda r: r[0])
    return out


_Changes = dict[tuple[str, datetime, str, int], _Delta]


def deltas(
    connection: Connection, stored: Sequence[GpuSample], gap: float = ROLLUP_GAP_S
) -> _Changes:
    """The rollup changes that the freshly ``stored`` samples make, per minute / hour / day."""
    gpus: dict[GpuKey, list[GpuSample]] = defaultdict(list)
    for s in stored:
        gpus[(s.instance, s.gpu_index)].append(s)
    around = _neighbours(connection, gpus, gap) if gpus else {}
    return _coarsen(_book(stored, around, gap))


def _book(
    stored: Sequence[GpuSample], around: dict[GpuKey, list[tuple[datetime, _Point]]], gap: float
) -> dict[tuple[datetime, str, int], _Delta]:
    """Per-minute changes: the new samples' own values and every affected interval."""
    minutes: dict[tuple[datetime, str, int], _Delta] = defaultdict(_Delta)
    new: dict[GpuKey, set[datetime]] = defaultdict(set)
    for s in stored:
        new[(s.instance, s.gpu_index)].add(s.ts.astimezone(UTC))
        delta = minutes[(Resolution.MINUTE.floor(s.ts), s.instance, s.gpu_index)]
        delta.add(_sample_values(s))
        delta.name = max(delta.name, s.name)
        delta.gpu_slice = max(delta.gpu_slice, s.gpu_slice)
        delta.most("ecc_sbe_max", s.ecc_sbe_total)
        delta.most("ecc_dbe_max", s.ecc_dbe_total)
        delta.most("xid_max", s.xid_last)
    for key, rows in around.items():
        _interval_deltas(key, rows, new[key], gap, minutes)
    return minutes


def _coarsen(minutes: dict[tuple[datetime, str, int], _Delta]) -> _Changes:
    """Minute changes, and the same changes summed into their hours and days."""
    out: _Changes = {}
    for (minute, instance, index), delta in minutes.items():
        for resolution in _RESOLUTIONS:
            k = (resolution.value, resolution.floor(minute), instance, index)
            merged = out.setdefault(k, _Delta())
            merged.add(delta.sums)
            merged.name = max(merged.name, delta.name)
            merged.gpu_slice = max(merged.gpu_slice, delta.gpu_slice)
            for column, value in delta.maxes.items():
                merged.most(column, value)
    return out


def _interval_deltas(
    key: GpuKey,
    rows: list[tuple[datetime, _Point]],
    new: set[datetime],
    gap: float,
    minutes: dict[tuple[datetime, str, int], _Delta],
) -> None:
    """Book each new sample's interval, and the change of each older sample's interval."""
    old = [(ts, p) for ts, p in rows if ts not in new]
    next_old = {ts: old[i + 1][1] if i + 1 < len(old) else None for i, (ts, _) in enumerate(old)}
    for i, (ts, p) in enumerate(rows):
        nxt = rows[i + 1][1] if i + 1 < len(rows) else None
        bucket = minutes[(Resolution.MINUTE.floor(ts), key[0], key[1])]
        if ts in new:
            bucket.add(_time_values(p, nxt, gap, 1.0))
            continue
        before = next_old[ts]
        if before is nxt:
            continue
        bucket.add(_time_values(p, nxt, gap, 1.0))
        bucket.add(_time_values(p, before, gap, -1.0))


def lock(connection: Connection, gpus: Iterable[GpuKey]) -> None:
    """Serialise rollup writers of the same GPUs (PostgreSQL; transaction-scoped)."""
    if connection.dialect.name != "postgresql":
        return
    for instance, index in sorted(set(gpus)):
        key = zlib.crc32(f"infersight.gpu_rollup.{instance}.{index}".encode())
        connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def apply_samples(
    connection: Connection, stored: Sequence[GpuSample], gap: float = ROLLUP_GAP_S
) -> int:
    """Merge the rollups of freshly ``stored`` samples, inside the caller's transaction."""
    if not stored:
        return 0
    lock(connection, ((s.instance, s.gpu_index) for s in stored))
    return _merge(connection, deltas(connection, stored, gap))


def _merge(connection: Connection, changes: _Changes, slices: bool = True) -> int:
    """Add ``changes`` to their rows (created when missing), in key order; ``slices=False``
    under revisions before 0021, whose rollups have no ``gpu_slice``."""
    if not changes:
        return 0
    rows = []
    for (resolution, bucket, instance, index), delta in sorted(changes.items()):
        row: dict[str, Any] = {
            "resolution": resolution,
            "bucket": bucket,
            "instance": instance,
            "gpu_index": index,
            "name": delta.name,
            **({"gpu_slice": delta.gpu_slice} if slices else {}),
            **{c: delta.sums.get(c, 0.0) for c in VALUE_COLUMNS},
            **{c: round(delta.sums.get(c, 0.0)) for c in COUNT_COLUMNS},
            **{c: delta.maxes.get(c) for c in MAX_COLUMNS},
        }
        if row["xid_max"] is not None:
            row["xid_max"] = int(row["xid_max"])
        rows.append(row)
    postgres = connection.dialect.name == "postgresql"
    insert = insert_for(connection, gpu_rollups)
    excluded, table = insert.excluded, gpu_rollups.c

    def most(column: str) -> ColumnElement[Any]:
        a, b = table[column], excluded[column]
        if postgres:
            return func.greatest(a, b)
        return func.max(func.coalesce(a, b), func.coalesce(b, a))

    statement = insert.on_conflict_do_update(
        index_elements=list(gpu_rollups.primary_key.columns),
        set_={
            "name": most("name"),
            **({"gpu_slice": most("gpu_slice")} if slices else {}),
            **{c: table[c] + excluded[c] for c in SUM_COLUMNS},
            **{c: most(c) for c in MAX_COLUMNS},
        },
    )
    connection.execute(statement, rows)
    return len(rows)


def sample_of(row: Any) -> GpuSample:
    """A stored ``gpu_samples`` row (a mapping) as the ``GpuSample`` it was written from."""
    values = {name: row[name] for name in _SAMPLE_FIELDS if name in row}
    values["throttle_reasons"] = tuple(r for r in (row["throttle_reasons"] or "").split(",") if r)
    return GpuSample(**values)


_SAMPLE_FIELDS: Final = tuple(
    name for name in GpuSample.__dataclass_fields__ if name != "throttle_reasons"
)


def rebuild(connection: Connection) -> int:
    """Roll every stored sample up again from scratch, one GPU at a time, in the caller's
    transaction (migration 0007 runs it for stores upgraded with samples already in them; the
    writer keeps the rollups current from then on). Returns the number of samples rolled up.
    """
    g = gpu_samples.c
    rolled = 0
    # Migration 0007 runs this on its own revision's tables: only the columns they have.
    schema = inspect(connection)
    present = {c["name"] for c in schema.get_columns("gpu_samples")}
    slices = "gpu_slice" in {c["name"] for c in schema.get_columns("gpu_rollups")}
    columns = [c for c in gpu_samples.columns if c.name in present]
    connection.execute(delete(gpu_rollups))
    gpus = connection.execute(select(g.instance, g.gpu_index).distinct()).all()
    for instance, index in gpus:
        key = (instance, int(index))
        rows = connection.execute(
            select(*columns).where(g.instance == instance, g.gpu_index == index).order_by(g.ts)
        ).mappings()
        samples = [sample_of(row) for row in rows]
        around = {
            key: [
                (
                    s.ts,
                    _point(s.ts, s.util_gpu, s.power_w, s.energy_j, ",".join(s.throttle_reasons)),
                )
                for s in samples
            ]
        }
        _merge(connection, _coarsen(_book(samples, around, ROLLUP_GAP_S)), slices)
        rolled += len(samples)
    return rolled
