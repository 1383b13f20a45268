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
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
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

from infersight.core.gpu_intervals import (
    BIN_COLUMNS,
    COUNT_COLUMNS,
    EDGES,
    MAX_COLUMNS,
    ROLLUP_GAP_S,
    SUM_COLUMNS,
    TIME_COLUMNS,
    VALUE_COLUMNS,
    Changes,
    GpuKey,
    GpuPoint,
    book,
    coarsen,
    floor_on_edge,
    idle_seconds,
    point,
    util_bin,
)
from infersight.core.samples import GpuSample
from infersight.storage.sql import insert_for
from infersight.storage.tables import gpu_rollups, gpu_samples

__all__ = [
    "BIN_COLUMNS",
    "COUNT_COLUMNS",
    "EDGES",
    "MAX_COLUMNS",
    "ROLLUP_GAP_S",
    "SUM_COLUMNS",
    "TIME_COLUMNS",
    "VALUE_COLUMNS",
    "GpuKey",
    "apply_samples",
    "deltas",
    "floor_on_edge",
    "idle_seconds",
    "lock",
    "rebuild",
    "sample_of",
    "util_bin",
]

# The interval rule, the columns and the booking of a batch are ``core.gpu_intervals``' (the
# ClickHouse store books through it too); this module reads the neighbours and merges in SQL.


def _neighbours(
    connection: Connection, gpus: dict[GpuKey, list[GpuSample]], gap: float
) -> dict[GpuKey, list[tuple[datetime, GpuPoint]]]:
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
    out: dict[GpuKey, list[tuple[datetime, GpuPoint]]] = defaultdict(list)
    for row in connection.execute(query):
        out[(row[0], int(row[1]))].append((row[2], point(*row[2:])))
    for rows in out.values():
        rows.sort(key=lambda r: r[0])
    return out


def deltas(
    connection: Connection, stored: Sequence[GpuSample], gap: float = ROLLUP_GAP_S
) -> Changes:
    """The rollup changes that the freshly ``stored`` samples make, per minute / hour / day."""
    gpus: dict[GpuKey, list[GpuSample]] = defaultdict(list)
    for s in stored:
        gpus[(s.instance, s.gpu_index)].append(s)
    around = _neighbours(connection, gpus, gap) if gpus else {}
    return coarsen(book(stored, around, gap))


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


def _merge(connection: Connection, changes: Changes, slices: bool = True) -> int:
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
                    point(s.ts, s.util_gpu, s.power_w, s.energy_j, ",".join(s.throttle_reasons)),
                )
                for s in samples
            ]
        }
        _merge(connection, coarsen(book(samples, around, ROLLUP_GAP_S)), slices)
        rolled += len(samples)
    return rolled
