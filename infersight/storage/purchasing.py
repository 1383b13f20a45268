"""Reads for the purchasing advice (``core.purchasing``): GPU time per hour, from the hour
rollups of GPU samples.

One aggregate row per (hour, instance, GPU model) over the range's whole hours — summed over
the instance's GPUs in SQL, so an answer holds at most hours × instances rows (× GPU models
per instance, usually one) whatever the sample rate. Whole hours only: the hour rollups book a
sample's interval to the hour it falls in (``storage.gpu_rollup``), the split and the
hour-of-week cells need nothing finer, and the hour in progress is left out. Hours older than
hour-rollup retention (``hour_days``) have no rows, so they read as no data.

A MIG slice or time-sliced share (``core.gpu_slice``, issue 34) counts as its fraction of a GPU
of its parent's model (``NVIDIA A100-SXM4-80GB MIG 3g.40gb`` → 3/7 of an A100-SXM4-80GB hour),
as cost counts it: the slices of one GPU add up to at most that GPU.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, func, select

from infersight.core.gpu_slice import parse_slice
from infersight.core.purchasing import GpuHour
from infersight.core.window import Resolution
from infersight.storage.tables import gpu_rollups


def hourly_gpu_usage(engine: Engine, start: datetime, end: datetime) -> list[GpuHour]:
    """Per hour starting in ``[start, end)``, instance and GPU model: GPU-seconds covered,
    seconds that reported utilisation, and Σ utilisation × seconds; by hour, then instance."""
    r = gpu_rollups.c
    query = (
        select(
            r.bucket,
            r.instance,
            r.name,
            r.gpu_slice,
            func.sum(r.covered_s),
            func.sum(r.util_s),
            func.sum(r.util_weighted_s),
        )
        .where(
            r.resolution == Resolution.HOUR.value,
            r.bucket >= Resolution.HOUR.ceil(start),
            r.bucket < Resolution.HOUR.floor(end),
        )
        .group_by(r.bucket, r.instance, r.name, r.gpu_slice)
        .order_by(r.bucket, r.instance, r.name)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    out: dict[tuple[datetime, str, str], list[float]] = {}
    for at, instance, gpu_name, gpu_slice, covered, util, weighted in rows:
        part = parse_slice(gpu_slice or "")
        if part is None:
            share, name = 1.0, gpu_name or ""
        else:
            share, name = float(part.fraction), (gpu_name or "").split(" MIG ")[0]
        sums = out.get((at, instance, name))
        if sums is None:
            sums = out[(at, instance, name)] = [0.0, 0.0, 0.0]
        sums[0] += max(float(covered or 0.0), 0.0) * share
        sums[1] += max(float(util or 0.0), 0.0) * share
        sums[2] += max(float(weighted or 0.0), 0.0) * share
    return [
        GpuHour(at, instance, name, sums[0], sums[1], sums[2])
        for (at, instance, name), sums in sorted(out.items())
    ]
