"""GPU rollups in ClickHouse (issue #36): per GPU and minute / hour / day, the SQL store's
``gpu_rollups`` columns, kept by the writer with ``core.gpu_intervals``' rule.

A sample's share of GPU time depends on its GPU's next sample, so a materialized view (seeing
one insert's rows) cannot book it. The SQL store merges deltas — a new sample's values, and
each older sample's new interval minus its old one — into its rows under a lock. Here the
writer recomputes instead: after a batch's samples are stored, every minute a batch sample
falls in, and the minute of each one's stored predecessor (whose interval the sample may have
cut), is rolled up again from the stored samples (``core.gpu_intervals.book`` over them and
the samples up to one gap and a minute on either side), and replaces its row
(``ReplacingMergeTree`` by ``version``; reads use ``FINAL``); then each hour holding such a
minute is summed again from its minute rows, and each day from its hour rows. So:

* a replayed batch adds nothing (its minutes are recomputed to the same values) and a batch
  whose samples were stored but whose rollups were not (a failure in between) is completed by
  its replay, whatever else the replay carries;
* a late or out-of-order sample corrects its predecessor's minute as the SQL store's delta
  does; the rows equal the SQL store's up to float summation order (a sum recomputed rather
  than added and taken back: 1e-9 relative in the parity tests);
* limits: an hour or day is re-summed from finer rows, so a sample later than the minute
  retention (``Layout.minute_days``; the accept window is far shorter) would rebuild its hour
  from minutes already dropped; two writers of one GPU at once (one sidecar ships its own
  instance's samples) may each miss the other's samples until either's next batch, where the
  SQL store serialises them with an advisory lock.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from infersight.core.gpu_intervals import (
    COUNT_COLUMNS,
    MAX_COLUMNS,
    ROLLUP_GAP_S,
    SUM_COLUMNS,
    VALUE_COLUMNS,
    GpuKey,
    GpuPoint,
    book,
    point_of,
)
from infersight.core.gpu_slice import parse_slice
from infersight.core.purchasing import GpuHour
from infersight.core.samples import GpuSample
from infersight.core.window import Resolution, Window, split
from infersight.storage_clickhouse.gpu_rollups_schema import ROLLUP_COLUMNS
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.samples_schema import GPU_COLUMNS
from infersight.storage_clickhouse.transport import Transport, quote
from infersight.storage_clickhouse.writer import payload

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)


def _micros(ts: datetime) -> int:
    return int((ts - _EPOCH) // _MICRO)


def _text(ts: datetime) -> str:
    return f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"


def _bucket(ts: datetime) -> str:
    return f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def _sample(row: Sequence[Any]) -> GpuSample:
    values: dict[str, Any] = {"ts": _EPOCH + timedelta(microseconds=int(row[0]))}
    for name, value in zip(GPU_COLUMNS[1:], row[1:], strict=True):
        if name == "throttle_reasons":
            values[name] = tuple(r for r in str(value or "").split(",") if r)
        else:
            values[name] = int(value) if name == "gpu_index" else value
    return GpuSample(**values)


class GpuRollups:
    """Keeps the ClickHouse GPU rollups of the samples the writer stores (see the module)."""

    def __init__(
        self,
        transport: Transport,
        layout: Layout,
        gap: float = ROLLUP_GAP_S,
        version: Callable[[], int] | None = None,
    ) -> None:
        self.transport = transport
        self.layout = layout
        self.gap = gap
        # A row's version: wall-clock microseconds (not the writer's accept clock, which a
        # test may fix), so the newest recomputation replaces the older ones.
        self.version = version or (lambda: time.time_ns() // 1000)

    def _settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {"input_format_parallel_parsing": 0}
        if self.layout.cluster:
            settings["distributed_foreground_insert"] = 1
        return settings

    def _stored(self, gpus: Collection[GpuKey], lo: datetime, hi: datetime) -> list[GpuSample]:
        keys = ", ".join(f"({quote(i)}, {int(g)})" for i, g in sorted(gpus))
        instances = ", ".join(quote(i) for i in sorted({i for i, _ in gpus}))
        columns = ", ".join(GPU_COLUMNS[1:])
        rows = self.transport.rows(
            f"SELECT toUnixTimestamp64Micro(ts), {columns}"
            f" FROM {self.layout.table('gpu_samples')} FINAL"
            f" WHERE instance IN ({instances}) AND (instance, gpu_index) IN ({keys})"
            f" AND ts >= {quote(_text(lo))} AND ts <= {quote(_text(hi))}"
        )
        return [_sample(r) for r in rows]

    def refresh(self, batch: Sequence[GpuSample]) -> int:
        """Roll up again every minute ``batch`` (stored already, or just now) touches, then
        their hours and days; the number of minute rows written."""
        if not batch:
            return 0
        reach = timedelta(seconds=self.gap + 60)
        gpus = {(s.instance, s.gpu_index) for s in batch}
        stored = self._stored(
            gpus, min(s.ts for s in batch) - reach, max(s.ts for s in batch) + reach
        )
        per_gpu: dict[GpuKey, list[GpuSample]] = defaultdict(list)
        for s in stored:
            per_gpu[(s.instance, s.gpu_index)].append(s)
        touched: set[tuple[datetime, str, int]] = set()
        batch_keys = {(s.instance, s.gpu_index, _micros(s.ts)) for s in batch}
        for key, samples in per_gpu.items():
            samples.sort(key=lambda s: s.ts)
            for i, s in enumerate(samples):
                if (key[0], key[1], _micros(s.ts)) in batch_keys:
                    touched.add((Resolution.MINUTE.floor(s.ts), *key))
                    if i:
                        touched.add((Resolution.MINUTE.floor(samples[i - 1].ts), *key))
        if not touched:
            return 0
        around: dict[GpuKey, list[tuple[datetime, GpuPoint]]] = {
            key: [(s.ts.astimezone(UTC), point_of(s)) for s in samples]
            for key, samples in per_gpu.items()
        }
        inside = [
            s
            for key, samples in per_gpu.items()
            for s in samples
            if (Resolution.MINUTE.floor(s.ts), *key) in touched
        ]
        minutes = book(inside, around, self.gap)
        version = self.version()
        rows = []
        for (minute, instance, index), delta in sorted(minutes.items()):
            if (minute, instance, index) not in touched:
                continue
            xid = delta.maxes.get("xid_max")
            rows.append(
                [
                    _bucket(minute),
                    instance,
                    index,
                    delta.name,
                    delta.gpu_slice,
                    *(round(delta.sums.get(c, 0.0)) for c in COUNT_COLUMNS),
                    *(delta.sums.get(c, 0.0) for c in VALUE_COLUMNS),
                    delta.maxes.get("ecc_sbe_max"),
                    delta.maxes.get("ecc_dbe_max"),
                    None if xid is None else int(xid),
                    version,
                ]
            )
        self.transport.insert(
            self.layout.table("gpu_rollups_1m"),
            (*ROLLUP_COLUMNS[:5], *COUNT_COLUMNS, *VALUE_COLUMNS, *MAX_COLUMNS, "version"),
            payload(rows),
            self._settings(),
        )
        hours = {(Resolution.HOUR.floor(m), i, g) for m, i, g in touched}
        self._resum("gpu_rollups_1h", "gpu_rollups_1m", "toStartOfHour", hours, version)
        days = {(Resolution.DAY.floor(h), i, g) for h, i, g in hours}
        self._resum("gpu_rollups_1d", "gpu_rollups_1h", "toStartOfDay", days, version)
        return len(rows)

    def _resum(
        self,
        into: str,
        source: str,
        floor: str,
        buckets: set[tuple[datetime, str, int]],
        version: int,
    ) -> None:
        """Sum ``buckets``' rows of ``source`` (FINAL) into ``into``'s rows, replacing them."""
        keys = ", ".join(f"({quote(i)}, {g}, {quote(_bucket(b))})" for b, i, g in sorted(buckets))
        instances = ", ".join(quote(i) for i in sorted({i for _, i, _ in buckets}))
        lo, hi = min(b for b, _, _ in buckets), max(b for b, _, _ in buckets)
        sums = ", ".join(f"sum({c}) AS {c}" for c in SUM_COLUMNS)
        maxes = ", ".join(f"max({c}) AS {c}" for c in MAX_COLUMNS)
        self.transport.command(
            f"INSERT INTO {self.layout.table(into)} (bucket, instance, gpu_index, name,"
            f" gpu_slice, {', '.join(SUM_COLUMNS)}, {', '.join(MAX_COLUMNS)}, version)"
            f" SELECT toDateTime({floor}(bucket), 'UTC') AS b, instance, gpu_index, max(name),"
            f" max(gpu_slice), {sums}, {maxes}, toUInt64({version})"
            f" FROM {self.layout.table(source)} FINAL"
            f" WHERE instance IN ({instances}) AND bucket >= {quote(_bucket(lo))}"
            f" AND bucket < toDateTime({quote(_bucket(hi))}, 'UTC') + INTERVAL 1 DAY"
            f" AND (instance, gpu_index, toDateTime({floor}(bucket), 'UTC')) IN ({keys})"
            " GROUP BY b, instance, gpu_index"
            + (" SETTINGS distributed_foreground_insert = 1" if self.layout.cluster else "")
        )


class GpuRollupReads:
    """The ``SampleStore`` reads of the GPU rollups from ClickHouse."""

    def __init__(self, transport: Transport, layout: Layout) -> None:
        self.transport = transport
        self.layout = layout

    def hourly_gpu_usage(self, start: datetime, end: datetime) -> list[GpuHour]:
        """``storage.purchasing.hourly_gpu_usage`` from ``gpu_rollups_1h``."""
        lo, hi = Resolution.HOUR.ceil(start), Resolution.HOUR.floor(end)
        rows = self.transport.rows(
            "SELECT toUnixTimestamp(bucket), instance, name, gpu_slice, sum(covered_s),"
            f" sum(util_s), sum(util_weighted_s) FROM {self.layout.table('gpu_rollups_1h')} FINAL"
            f" WHERE bucket >= {quote(_bucket(lo))} AND bucket < {quote(_bucket(hi))}"
            " GROUP BY bucket, instance, name, gpu_slice"
        )
        out: dict[tuple[datetime, str, str], list[float]] = {}
        for at, instance, gpu_name, gpu_slice, covered, util, weighted in rows:
            part = parse_slice(str(gpu_slice or ""))
            if part is None:
                share, name = 1.0, str(gpu_name or "")
            else:
                share, name = float(part.fraction), str(gpu_name or "").split(" MIG ")[0]
            key = (datetime.fromtimestamp(int(at), UTC), str(instance), name)
            sums = out.setdefault(key, [0.0, 0.0, 0.0])
            sums[0] += max(float(covered or 0.0), 0.0) * share
            sums[1] += max(float(util or 0.0), 0.0) * share
            sums[2] += max(float(weighted or 0.0), 0.0) * share
        return [
            GpuHour(at, instance, name, sums[0], sums[1], sums[2])
            for (at, instance, name), sums in sorted(out.items())
        ]

    def util_sums(
        self,
        window: Window,
        instances: Collection[str] | None = None,
        finest: Resolution = Resolution.MINUTE,
    ) -> tuple[float, int]:
        """``storage.gpu_reads.util_sums``: Σ utilisation and the samples that reported it over
        ``window`` (raw samples at the edges, the rollups between, as ``core.window.split``
        covers it); ``instances`` narrows the GPUs read."""
        if instances is not None and not instances:
            return 0.0, 0
        pinned = (
            "" if instances is None else f" AND instance IN ({', '.join(map(quote, instances))})"
        )
        total, count = 0.0, 0
        for seg in split(window, finest):
            if seg.raw:
                rows = self.transport.rows(
                    "SELECT sum(util_gpu), count()"
                    f" FROM {self.layout.table('gpu_samples')} FINAL"
                    f" WHERE ts >= {quote(_text(seg.start))} AND ts < {quote(_text(seg.end))}"
                    f" AND util_gpu IS NOT NULL{pinned}"
                )
            else:
                assert seg.resolution is not None
                table = self.layout.table(f"gpu_rollups_{seg.resolution.value}")
                rows = self.transport.rows(
                    f"SELECT sum(util_gpu_sum), sum(util_gpu_n) FROM {table} FINAL"
                    f" WHERE bucket >= {quote(_bucket(seg.start))}"
                    f" AND bucket < {quote(_bucket(seg.end))}{pinned}"
                )
            if rows:
                total += float(rows[0][0] or 0.0)
                count += int(rows[0][1] or 0)
        return total, count
