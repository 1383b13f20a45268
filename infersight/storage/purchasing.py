"""Reads for the purchasing advice (``core.purchasing``): GPU time per hour, from the hour
rollups of GPU samples.

One aggregate row per (hour, instance, GPU model) over the range's whole hours — summed over
the instance's GPUs in SQL, so an answer holds at most hours × instances rows (× GPU models
per instance, usually one) whatever the sample rate. Whole hours only: the hour rollups book a
sample's interval to the hour it falls in (``storage.gpu_rollup``), the split and the
hour-of-week cells need nothing finer, and the hour in progress is left out. Hours older than
hour-rollup retention (``hour_days``) have no rows, so they read as no data.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Engine, func, select

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
            func.sum(r.covered_s),
            func.sum(r.util_s),
            func.sum(r.util_weighted_s),
        )
        .where(
            r.resolution == Resolution.HOUR.value,
            r.bucket >= Resolution.HOUR.ceil(start),
            r.bucket < Resolution.HOUR.floor(end),
        )
        .group_by(r.bucket, r.instance, r.name)
        .order_by(r.bucket, r.instance, r.name)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [
        GpuHour(
            at=row[0],
            instance=row[1],
            gpu_name=row[2] or "",
            gpu_seconds=max(float(row[3] or 0.0), 0.0),
            util_seconds=max(float(row[4] or 0.0), 0.0),
            util_weighted=max(float(row[5] or 0.0), 0.0),
        )
        for row in rows
    ]
