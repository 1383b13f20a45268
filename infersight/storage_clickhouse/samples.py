"""Server scrapes in ClickHouse (issue #36): their writer and the ``SampleStore`` reads of them.

The writer stores each scrape once by the SQL store's key, (time, instance), as the request
writer does (``storage_clickhouse.writer``): a batch is split by day, the keys already stored
are read and dropped, and the rest is inserted with an insert deduplication token made from
the fresh keys — the engines' rows first, then the instances'. A crash between the two inserts
is repaired by a replay of the same scrapes: they are still not stored, the same token makes
the engines' insert a no-op, and the instances' rows are inserted. Within a batch a key that
repeats keeps its last copy (the SQL writer's rule). A scrape's engines are stored only with
the scrape itself.

``HybridSamples`` answers ``server_summaries``, ``engine_summaries``, ``engine_series``,
``server_gauges`` and ``server_evidence`` from these tables with the SQL store's definitions
(``storage.server_engines``, ``storage.scaling_reads.server_gauges``,
``storage.cost.server_evidence``), and ``gpu_utilisation``, ``gpu_series``,
``gpu_utilization_of`` and ``hourly_gpu_usage`` from the GPU samples and their rollups
(``storage_clickhouse.gpu_rollups``, which the writer keeps after each batch). Cost still reads
the SQL store's GPU rollups (docs/past-one-primary.md says why).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

from infersight.core.accept import AcceptWindow
from infersight.core.attribution import DIMENSIONS
from infersight.core.gpu_intervals import GPU_ROLLUP_MEANS, GPU_ROLLUP_REASONS, plan
from infersight.core.purchasing import GpuHour
from infersight.core.query import Selector
from infersight.core.samples import (
    BENIGN_REASONS,
    SERVER_METRIC_FIELDS,
    THROTTLE_REASONS,
    GpuSample,
    ServerSample,
)
from infersight.core.window import Resolution, Segment, Window
from infersight.storage.seam import (
    HOT_MARGIN,
    EngineBucket,
    EngineSummary,
    Gauges,
    GpuBucket,
    SampleStore,
    ServerEvidence,
    ServerSummary,
)
from infersight.storage_clickhouse.gpu_rollups import GpuRollupReads, GpuRollups
from infersight.storage_clickhouse.reads import _raw_where, _rollup_where
from infersight.storage_clickhouse.samples_schema import (
    ENGINE_COLUMNS,
    GPU_COLUMNS,
    SERVER_COLUMNS,
)
from infersight.storage_clickhouse.schema import Layout
from infersight.storage_clickhouse.transport import Transport, quote
from infersight.storage_clickhouse.writer import SAMPLED, AcceptingWriter, payload

#: Keys looked up per statement.
LOOKUP: Final = 2_000
#: The most engines (or servers) one summary lists: ``storage.server_engines.MAX_ENGINE_ROWS``.
MAX_ENGINE_ROWS: Final = 1024
#: The most instances a gauge read pins: ``storage.scaling_reads.MAX_MODELS``.
MAX_INSTANCES: Final = 1_000
#: The figures ``server_summaries`` averages: ``storage.server_engines.SERVER_FIGURES``.
SERVER_FIGURES: Final = (
    "kv_cache_usage",
    "prefix_cache_hit_ratio",
    "spec_acceptance_rate",
    "spec_accept_length",
    "requests_running",
    "requests_waiting",
    "requests_deferred",
)
#: The GPU fields ``gpu_series`` averages: ``storage.timeseries.GPU_MEANS``.
GPU_MEANS: Final = (
    "util_gpu",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "sm_clock_mhz",
)
#: GPU charts over windows up to this long read raw samples: ``storage.timeseries``'s.
GPU_ROLLUP_MIN_S: Final = 6 * 3600.0
#: Windows up to this long resolve a selector's instances from raw rows too:
#: ``storage.baselines.RAW_INSTANCES_MAX_S``.
RAW_INSTANCES_MAX_S: Final = 86400.0
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)

ServerKey = tuple[int, str]
GpuKey = tuple[int, str, int]


def _micros(ts: datetime) -> int:
    return (ts - _EPOCH) // _MICRO


def _at(micros: Any) -> datetime:
    return _EPOCH + timedelta(microseconds=int(micros))


def _text(ts: datetime) -> str:
    return f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _in(values: Collection[str]) -> str:
    return ", ".join(quote(v) for v in sorted(values))


class SampleWriter(AcceptingWriter):
    """``core.write.Sink``'s ``write_server_samples`` into ClickHouse (see the module)."""

    def __init__(
        self,
        transport: Transport,
        layout: Layout,
        accept: AcceptWindow | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__(transport, layout, accept, clock)
        self.rollups = GpuRollups(transport, layout)

    def write_server_samples(self, samples: Sequence[ServerSample]) -> int:
        """Store ``samples`` (each key once) with their engines; how many were stored now."""
        samples = self.accepted(samples, SAMPLED)
        by_key: dict[ServerKey, ServerSample] = {}
        for sample in samples:
            by_key[(_micros(sample.ts), sample.instance)] = sample
        by_day: dict[date, list[ServerSample]] = defaultdict(list)
        for sample in by_key.values():
            by_day[sample.ts.astimezone(UTC).date()].append(sample)
        return sum(self._store_day(by_day[day]) for day in sorted(by_day))

    def _stored(self, samples: Sequence[ServerSample]) -> set[ServerKey]:
        out: set[ServerKey] = set()
        ordered = sorted(samples, key=lambda s: (s.ts, s.instance))
        table = self.layout.table("server_samples")
        for i in range(0, len(ordered), LOOKUP):
            part = ordered[i : i + LOOKUP]
            keys = ", ".join(f"({quote(s.instance)}, {_micros(s.ts)})" for s in part)
            rows = self.transport.rows(
                f"SELECT toUnixTimestamp64Micro(ts), instance FROM {table}"
                f" WHERE instance IN ({_in({s.instance for s in part})})"
                f" AND ts >= {quote(_text(part[0].ts))} AND ts <= {quote(_text(part[-1].ts))}"
                f" AND (instance, toUnixTimestamp64Micro(ts)) IN ({keys})"
            )
            out.update((int(m), str(i)) for m, i in rows)
        return out

    def _store_day(self, samples: Sequence[ServerSample]) -> int:
        stored = self._stored(samples)
        fresh = [s for s in samples if (_micros(s.ts), s.instance) not in stored]
        if not fresh:
            return 0
        digest = hashlib.sha256()
        for micros, instance in sorted((_micros(s.ts), s.instance) for s in fresh):
            digest.update(f"{micros}/{instance};".encode())
        token = digest.hexdigest()
        settings: dict[str, Any] = {"input_format_parallel_parsing": 0}
        if self.layout.cluster:
            settings["distributed_foreground_insert"] = 1
        engines = [
            [_text(s.ts), s.instance, e.rank, *(getattr(e, n) for n in SERVER_METRIC_FIELDS)]
            for s in fresh
            for e in s.per_engine
        ]
        if engines:
            self.transport.insert(
                self.layout.table("server_engine_samples"),
                ENGINE_COLUMNS,
                payload(engines),
                {**settings, "insert_deduplication_token": "e" + token},
            )
        rows = [[_text(s.ts), *(getattr(s, n) for n in SERVER_COLUMNS[1:])] for s in fresh]
        self.transport.insert(
            self.layout.table("server_samples"),
            SERVER_COLUMNS,
            payload(rows),
            {**settings, "insert_deduplication_token": "s" + token},
        )
        return len(fresh)

    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int:
        """Store ``samples`` (each key once); how many were stored now."""
        samples = self.accepted(samples, SAMPLED)
        by_key: dict[GpuKey, GpuSample] = {}
        for sample in samples:
            by_key[(_micros(sample.ts), sample.instance, sample.gpu_index)] = sample
        by_day: dict[date, list[GpuSample]] = defaultdict(list)
        for sample in by_key.values():
            by_day[sample.ts.astimezone(UTC).date()].append(sample)
        stored = sum(self._store_gpu_day(by_day[day]) for day in sorted(by_day))
        # Every minute the batch touches is rolled up again, stored now or before: a replay
        # after a failure between the samples and their rollups completes the rollups.
        self.rollups.refresh(list(by_key.values()))
        return stored

    def _stored_gpu(self, samples: Sequence[GpuSample]) -> set[GpuKey]:
        out: set[GpuKey] = set()
        ordered = sorted(samples, key=lambda s: (s.ts, s.instance, s.gpu_index))
        table = self.layout.table("gpu_samples")
        for i in range(0, len(ordered), LOOKUP):
            part = ordered[i : i + LOOKUP]
            keys = ", ".join(
                f"({quote(s.instance)}, {int(s.gpu_index)}, {_micros(s.ts)})" for s in part
            )
            rows = self.transport.rows(
                f"SELECT toUnixTimestamp64Micro(ts), instance, gpu_index FROM {table}"
                f" WHERE instance IN ({_in({s.instance for s in part})})"
                f" AND ts >= {quote(_text(part[0].ts))} AND ts <= {quote(_text(part[-1].ts))}"
                f" AND (instance, gpu_index, toUnixTimestamp64Micro(ts)) IN ({keys})"
            )
            out.update((int(m), str(i), int(g)) for m, i, g in rows)
        return out

    def _store_gpu_day(self, samples: Sequence[GpuSample]) -> int:
        stored = self._stored_gpu(samples)
        fresh = [s for s in samples if (_micros(s.ts), s.instance, s.gpu_index) not in stored]
        if not fresh:
            return 0
        digest = hashlib.sha256()
        for micros, instance, index in sorted(
            (_micros(s.ts), s.instance, s.gpu_index) for s in fresh
        ):
            digest.update(f"{micros}/{instance}/{index};".encode())
        settings: dict[str, Any] = {
            "input_format_parallel_parsing": 0,
            "insert_deduplication_token": "g" + digest.hexdigest(),
        }
        if self.layout.cluster:
            settings["distributed_foreground_insert"] = 1
        rows = []
        for s in fresh:
            row: list[Any] = [_text(s.ts)]
            for name in GPU_COLUMNS[1:]:
                value = getattr(s, name)
                row.append(",".join(value) if name == "throttle_reasons" else value)
            rows.append(row)
        self.transport.insert(
            self.layout.table("gpu_samples"), GPU_COLUMNS, payload(rows), settings
        )
        return len(fresh)


def _rank_order(rank: str) -> tuple[int, str]:
    return (int(rank), "") if rank.isdigit() else (1 << 62, rank)


class SampleReads:
    """The server-scrape reads of ``SampleStore`` from ClickHouse."""

    def __init__(self, transport: Transport, layout: Layout) -> None:
        self.transport = transport
        self.layout = layout
        self.rollups = GpuRollupReads(transport, layout)

    def _where(self, window: Window, instances: Collection[str] | None) -> str:
        where = f"ts >= {quote(_text(window.start))} AND ts < {quote(_text(window.end))}"
        if instances is not None:
            if not instances:
                return "0"
            where += f" AND instance IN ({_in(instances)})"
        return where

    def server_summaries(
        self, window: Window, instances: Sequence[str] | None = None
    ) -> list[ServerSummary]:
        means = ", ".join(f"avg({name})" for name in SERVER_FIGURES)
        rows = self.transport.rows(
            f"SELECT instance, max(engine), count(), {means}"
            f" FROM {self.layout.table('server_samples')} FINAL"
            f" WHERE {self._where(window, instances)}"
            f" GROUP BY instance ORDER BY instance LIMIT {MAX_ENGINE_ROWS}"
        )
        return [
            ServerSummary(
                instance=str(r[0]),
                dialect=str(r[1] or ""),
                samples=int(r[2]),
                figures={
                    name: _float(value) for name, value in zip(SERVER_FIGURES, r[3:], strict=True)
                },
            )
            for r in rows
        ]

    def engine_summaries(
        self, window: Window, instances: Sequence[str] | None = None
    ) -> list[EngineSummary]:
        rows = self.transport.rows(
            "SELECT instance, rank, count(), avg(kv_cache_usage), max(kv_cache_usage),"
            " avg(requests_running), avg(requests_waiting), avg(prefix_cache_hit_ratio)"
            f" FROM {self.layout.table('server_engine_samples')} FINAL"
            f" WHERE {self._where(window, instances)}"
            f" GROUP BY instance, rank ORDER BY instance, rank LIMIT {MAX_ENGINE_ROWS}"
        )
        by_instance: dict[str, list[EngineSummary]] = defaultdict(list)
        for r in rows:
            kv, kv_max, running, waiting, prefix = (_float(v) for v in r[3:])
            by_instance[str(r[0])].append(
                EngineSummary(str(r[0]), str(r[1]), int(r[2]), kv, kv_max, running, waiting, prefix)
            )
        out: list[EngineSummary] = []
        for instance in sorted(by_instance):
            mine = sorted(by_instance[instance], key=lambda s: _rank_order(s.rank))
            usages = [s.kv_cache_usage for s in mine if s.kv_cache_usage is not None]
            mean = sum(usages) / len(usages) if usages else None
            for s in mine:
                hot = (
                    mean is not None
                    and s.kv_cache_usage is not None
                    and s.kv_cache_usage >= mean + HOT_MARGIN
                )
                out.append(
                    EngineSummary(
                        s.instance,
                        s.rank,
                        s.samples,
                        s.kv_cache_usage,
                        s.kv_cache_usage_max,
                        s.requests_running,
                        s.requests_waiting,
                        s.prefix_cache_hit_ratio,
                        hot,
                    )
                )
        return out

    def engine_series(
        self, window: Window, step_s: int, instances: Sequence[str] | None = None
    ) -> list[EngineBucket]:
        if step_s < 1:
            raise ValueError("step_s must be at least one second")
        step = int(step_s)
        rows = self.transport.rows(
            f"SELECT instance, rank, intDiv(toUnixTimestamp(ts), {step}) * {step} AS at,"
            " avg(kv_cache_usage), avg(requests_running), avg(requests_waiting)"
            f" FROM {self.layout.table('server_engine_samples')} FINAL"
            f" WHERE {self._where(window, instances)}"
            " GROUP BY instance, rank, at"
        )
        out = [
            EngineBucket(
                str(r[0]),
                str(r[1]),
                datetime.fromtimestamp(int(r[2]), UTC),
                *(_float(v) for v in r[3:]),
            )
            for r in rows
        ]
        return sorted(out, key=lambda b: (b.bucket, b.instance, _rank_order(b.rank)))

    def server_gauges(
        self, model: str, window: Window, instances: Collection[str] | None = None
    ) -> Gauges:
        pinned = None if instances is None else sorted(instances)[:MAX_INSTANCES]
        # argMax of a tuple: a NULL figure of the newest scrape stays NULL (argMax of a
        # Nullable column alone would skip to an older scrape's figure).
        rows = self.transport.rows(
            "SELECT instance, toUnixTimestamp64Micro(max(ts)), argMax(tuple(requests_waiting,"
            " requests_deferred, kv_cache_usage, kv_cache_usage_max), ts)"
            f" FROM {self.layout.table('server_samples')} FINAL"
            f" WHERE model = {quote(model)} AND {self._where(window, pinned)}"
            " GROUP BY instance ORDER BY instance"
        )
        newest = [(str(r[0]), _at(r[1]), *r[2]) for r in rows]
        return Gauges(
            newest=max((row[1] for row in newest), default=None),
            instances=tuple(row[0] for row in newest),
            waiting=tuple(
                max(0.0, float(waiting) - float(deferred or 0.0))
                for _, _, waiting, deferred, _, _ in newest
                if waiting is not None
            ),
            kv_usage=tuple(
                float(usage_max if usage_max is not None else usage)
                for _, _, _, _, usage, usage_max in newest
                if usage is not None or usage_max is not None
            ),
        )

    def server_evidence(self, window: Window) -> dict[str, ServerEvidence]:
        rows = self.transport.rows(
            "SELECT instance, max(engine), avg(requests_running), avg(requests_waiting),"
            " avg(prefix_cache_hit_ratio), avg(kv_cache_usage)"
            f" FROM {self.layout.table('server_samples')} FINAL"
            f" WHERE {self._where(window, None)} GROUP BY instance"
        )
        return {
            str(r[0]): ServerEvidence(str(r[0]), str(r[1] or ""), *(_float(v) for v in r[2:]))
            for r in rows
        }

    def gpu_utilisation(
        self, instances: Sequence[str], window: Window
    ) -> tuple[float | None, datetime | None]:
        if not instances:
            return None, None
        rows = self.transport.rows(
            "SELECT count(), avg(util_gpu), toUnixTimestamp64Micro(max(ts))"
            f" FROM {self.layout.table('gpu_samples')} FINAL"
            f" WHERE {self._where(window, list(instances)[:MAX_INSTANCES])}"
            " AND util_gpu IS NOT NULL"
        )
        if not rows or not rows[0][0]:
            return None, None
        return float(rows[0][1]), _at(rows[0][2])

    def gpu_utilization_of(
        self, window: Window, selector: Selector, finest: Resolution = Resolution.MINUTE
    ) -> float | None:
        """``storage.baselines.gpu_utilization``: the mean utilisation per sample of the
        instances that served ``selector``'s requests (day rollups, and raw rows for windows up
        to a day), summed from raw samples at the window's edges and the GPU rollups between."""
        instances: set[str] | None = None
        if selector.narrowed:
            days = Segment(Resolution.DAY.floor(window.start), window.end, Resolution.DAY)
            found = self.transport.rows(
                f"SELECT DISTINCT instance FROM {self.layout.table('request_rollups_1d')}"
                f" WHERE {_rollup_where(days, selector)}"
            )
            instances = {str(r[0]) for r in found}
            if window.seconds <= RAW_INSTANCES_MAX_S:
                found = self.transport.rows(
                    f"SELECT DISTINCT instance FROM {self.layout.table('requests')}"
                    f" WHERE {_raw_where(window, selector)}"
                )
                instances |= {str(r[0]) for r in found}
        total, count = self.rollups.util_sums(window, instances, finest)
        return None if not count else min(1.0, max(0.0, total / count))

    def _raw_gpu_rows(
        self, window: Window, step: int, instances: Sequence[str] | None
    ) -> list[list[Any]]:
        means = ", ".join(f"avg({name})" for name in GPU_MEANS)
        return self.transport.rows(
            f"SELECT instance, gpu_index, intDiv(toUnixTimestamp(ts), {step}) * {step} AS at,"
            f" throttle_reasons, count(), {means}, max(ecc_sbe_total), max(ecc_dbe_total),"
            f" max(xid_last), max(name) FROM {self.layout.table('gpu_samples')} FINAL"
            f" WHERE {self._where(window, instances)}"
            " GROUP BY instance, gpu_index, at, throttle_reasons"
        )

    def raw_gpu_series(
        self, window: Window, step_s: int, instances: Sequence[str] | None = None
    ) -> list[GpuBucket]:
        """``gpu_series`` from raw samples, as ``storage.timeseries`` reads them: per GPU, step
        bucket and list of clock-event reasons the means and counts, weighed back together by
        sample count."""
        slots = _GpuSlots()
        slots.add_raw(self._raw_gpu_rows(window, int(step_s), instances))
        return slots.buckets()

    def rolled_gpu_series(
        self,
        window: Window,
        step_s: int,
        instances: Sequence[str] | None = None,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[GpuBucket]:
        """``gpu_series`` over a long window with a step of whole minutes, as
        ``storage.timeseries`` reads it: the GPU rollups at the coarsest resolution dividing the
        step (no finer than ``finest``), raw samples at the ragged edges."""
        step = int(step_s)
        coarsest = next(r for r in (Resolution.DAY, Resolution.HOUR, Resolution.MINUTE)
                        if step % r.seconds == 0)  # fmt: skip
        slots = _GpuSlots()
        if instances is not None and not instances:
            return []
        pinned = "" if instances is None else f" AND instance IN ({_in(instances)})"
        sums = ", ".join(
            f"sum({name}_{part})" for name in GPU_ROLLUP_MEANS for part in ("sum", "n")
        )
        reasons = ", ".join(f"sum(reason_{r})" for r in GPU_ROLLUP_REASONS)
        for seg in plan(window, coarsest, finest):
            if seg.resolution is None:
                slots.add_raw(self._raw_gpu_rows(Window(seg.start, seg.end), step, instances))
                continue
            table = self.layout.table(f"gpu_rollups_{seg.resolution.value}")
            slots.add_rollups(
                self.transport.rows(
                    f"SELECT instance, gpu_index,"
                    f" intDiv(toUnixTimestamp(bucket), {step}) * {step} AS at, sum(samples),"
                    f" {sums}, sum(throttled_samples), {reasons}, max(ecc_sbe_max),"
                    f" max(ecc_dbe_max), max(xid_max), max(name) FROM {table} FINAL"
                    f" WHERE bucket >= {quote(_text(seg.start)[:19])}"
                    f" AND bucket < {quote(_text(seg.end)[:19])}{pinned}"
                    " GROUP BY instance, gpu_index, at"
                )
            )
        return slots.buckets()


class _GpuSlots:
    """Per (GPU, step bucket): samples, per-field sums and counts, throttle counts, maxima
    (``storage.timeseries._GpuAcc``'s)."""

    def __init__(self) -> None:
        self.slots: dict[tuple[int, str, int], dict[str, Any]] = {}

    def _slot(self, at: Any, instance: Any, index: Any) -> dict[str, Any]:
        key = (int(at), str(instance), int(index))
        slot = self.slots.get(key)
        if slot is None:
            slot = self.slots[key] = {
                "samples": 0, "sums": [0.0] * len(GPU_MEANS), "counts": [0] * len(GPU_MEANS),
                "throttled": 0, "reasons": defaultdict(int), "maxima": [None, None, None],
                "name": "",
            }  # fmt: skip
        return slot

    @staticmethod
    def _maxima(slot: dict[str, Any], values: Sequence[Any], name: Any) -> None:
        for i, value in enumerate(values):
            if value is not None:
                held = slot["maxima"][i]
                slot["maxima"][i] = value if held is None else max(held, value)
        slot["name"] = max(slot["name"], str(name or ""))

    def add_raw(self, rows: Sequence[Sequence[Any]]) -> None:
        n = len(GPU_MEANS)
        for row in rows:
            instance, index, at, reasons, count = row[:5]
            count = int(count)
            slot = self._slot(at, instance, index)
            slot["samples"] += count
            for i, mean in enumerate(row[5 : 5 + n]):
                if mean is not None:
                    slot["sums"][i] += float(mean) * count
                    slot["counts"][i] += count
            hard = [r for r in str(reasons).split(",") if r and r not in BENIGN_REASONS]
            if hard:
                slot["throttled"] += count
                for reason in hard:
                    if reason in THROTTLE_REASONS:
                        slot["reasons"][reason] += count
            self._maxima(slot, row[5 + n : 8 + n], row[8 + n])

    def add_rollups(self, rows: Sequence[Sequence[Any]]) -> None:
        n, k = len(GPU_ROLLUP_MEANS), len(GPU_ROLLUP_REASONS)
        for row in rows:
            instance, index, at, samples = row[:4]
            slot = self._slot(at, instance, index)
            slot["samples"] += int(samples)
            for i in range(n):
                slot["sums"][i] += float(row[4 + 2 * i])
                slot["counts"][i] += int(row[5 + 2 * i])
            slot["throttled"] += int(row[4 + 2 * n])
            for j, reason in enumerate(GPU_ROLLUP_REASONS):
                if row[5 + 2 * n + j]:
                    slot["reasons"][reason] += int(row[5 + 2 * n + j])
            self._maxima(slot, row[5 + 2 * n + k : 8 + 2 * n + k], row[8 + 2 * n + k])

    def buckets(self) -> list[GpuBucket]:
        n = len(GPU_MEANS)
        out = []
        for (at, instance, index), slot in sorted(self.slots.items()):
            sbe, dbe, xid = slot["maxima"]
            out.append(
                GpuBucket(
                    instance=instance,
                    gpu_index=index,
                    bucket=datetime.fromtimestamp(at, UTC),
                    samples=slot["samples"],
                    means={
                        GPU_MEANS[i]: slot["sums"][i] / slot["counts"][i]
                        for i in range(n)
                        if slot["counts"][i]
                    },
                    throttled_samples=slot["throttled"],
                    reasons=dict(slot["reasons"]),
                    ecc_sbe_total=_float(sbe),
                    ecc_dbe_total=_float(dbe),
                    xid_last=None if xid is None else int(xid),
                    name=slot["name"],
                )
            )
        return out


#: The mean GPU utilisation of the instances that served a selector naming an attributed
#: label (``baselines.gpu_utilization_of``, which resolves them as attributed).
AttributedUtilisation = Callable[[Window, Selector, Resolution], "float | None"]


class HybridSamples:
    """``SampleStore``: the server-scrape and GPU reads from ClickHouse; any other read is the
    SQL store's (reached through ``__getattr__``). ``attributed``: the GPU utilisation of a
    selector that names an attributed label (without it, the SQL store's)."""

    def __init__(
        self, sql: SampleStore, reads: SampleReads, attributed: AttributedUtilisation | None = None
    ) -> None:
        self._sql = sql
        self._reads = reads
        self._attributed = attributed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)

    def server_summaries(
        self, window: Window, instances: Sequence[str] | None = None
    ) -> list[ServerSummary]:
        return self._reads.server_summaries(window, instances)

    def engine_summaries(
        self, window: Window, instances: Sequence[str] | None = None
    ) -> list[EngineSummary]:
        return self._reads.engine_summaries(window, instances)

    def engine_series(
        self, window: Window, step_s: int, instances: Sequence[str] | None = None
    ) -> list[EngineBucket]:
        return self._reads.engine_series(window, step_s, instances)

    def server_gauges(
        self, model: str, window: Window, instances: Collection[str] | None = None
    ) -> Gauges:
        return self._reads.server_gauges(model, window, instances)

    def server_evidence(self, window: Window) -> dict[str, ServerEvidence]:
        return self._reads.server_evidence(window)

    def gpu_utilisation(
        self, instances: Sequence[str], window: Window
    ) -> tuple[float | None, datetime | None]:
        return self._reads.gpu_utilisation(instances, window)

    def gpu_utilization_of(
        self, window: Window, selector: Selector, finest: Resolution = Resolution.MINUTE
    ) -> float | None:
        """From ClickHouse's GPU rollups; for a selector naming a label attribution may fill
        in after a request is stored (tenant, team, workload, adapter: ClickHouse's raw rows
        and rollups hold them as shipped), over the instances resolved as attributed
        (``attributed``)."""
        named = {n for n, _ in selector.items()} | {n for n, _ in selector.excluded}
        if named & set(DIMENSIONS) or selector.tenants is not None:
            if self._attributed is not None:
                return self._attributed(window, selector, finest)
            return self._sql.gpu_utilization_of(window, selector, finest)
        return self._reads.gpu_utilization_of(window, selector, finest)

    def hourly_gpu_usage(self, start: datetime, end: datetime) -> list[GpuHour]:
        return self._reads.rollups.hourly_gpu_usage(start, end)

    def gpu_series(
        self,
        window: Window,
        step_s: int,
        instances: Sequence[str] | None = None,
        finest: Resolution = Resolution.MINUTE,
        *,
        raw_only: bool = False,
    ) -> list[GpuBucket]:
        """From raw samples in ClickHouse where the SQL store reads raw samples alone (a short
        window, a step of seconds, ``raw_only``); from ClickHouse's GPU rollups otherwise."""
        if step_s < 1:
            raise ValueError("step_s must be at least one second")
        if raw_only or step_s % 60 or window.seconds <= GPU_ROLLUP_MIN_S:
            return self._reads.raw_gpu_series(window, step_s, instances)
        return self._reads.rolled_gpu_series(window, step_s, instances, finest)
