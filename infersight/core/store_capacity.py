"""What a fleet costs the store: rows, bytes, partitions, WAL and write IOPS per day.

A pure model of ``storage``'s layout (``storage.tables``), for sizing a PostgreSQL primary
before a fleet ships into it (``docs/capacity.md``). What writes rows, and how many:

* ``requests``: one row per request; daily partitions, kept ``raw_days``.
* ``request_rollups``: one row per series (model, instance, tenant, priority) per minute, hour
  and day bucket that holds at least one request; one sketch per latency stage the engine
  reports. Each shipment rewrites the rows it touches (counters merged, sketches re-encoded).
* ``gpu_samples``: one row per GPU per sampling interval; ``gpu_rollups``: one row per GPU per
  minute / hour / day bucket that holds a sample.
* ``server_samples``: one row per instance per scrape; ``server_engine_samples``: one row per
  data-parallel engine per scrape when an instance runs two or more.
* ``good_token_counts``: counted once per closed day by the maintenance job, per set of good
  limits, per series, for each hour and for the day.

The per-row byte and WAL constants below are not estimates: ``bench/bench_store_size.py``
measured them on PostgreSQL 15 (``pg_total_relation_size`` after ``VACUUM FULL``: heap,
indexes and TOAST; ``pg_wal_lsn_diff`` around each phase) and prints the model beside what it
measures, so they can be re-measured; ``tests/storage/test_store_capacity.py`` holds the model
to a real store. Sketch sizes depend on how many requests a bucket holds and how widely their
latencies spread; ``SKETCH_BYTES`` was measured on the benchmark's log-normal latencies.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.retention import RetentionPolicy

DAY_S: Final = 86_400.0
PAGE_BYTES: Final = 8192
#: The partitioned raw tables (``storage.tables.PARTITIONED``; a test keeps them equal).
PARTITIONED_TABLES: Final = (
    "requests",
    "gpu_samples",
    "server_samples",
    "server_engine_samples",
    "client_requests",
    "request_parts",
    "trace_attributions",
)
#: Rollup resolutions and their bucket lengths in seconds (``core.window.Resolution``).
RESOLUTIONS: Final = (("1m", 60.0), ("1h", 3600.0), ("1d", DAY_S))

# -- measured constants (bench/bench_store_size.py; PostgreSQL 15, compacted) ---------------

#: Bytes per row, heap + indexes + TOAST, once the table is compact.
ROW_BYTES: Final = {
    "requests": 300.0,
    "gpu_samples": 259.0,
    "server_samples": 239.0,
    "server_engine_samples": 205.0,
    "gpu_rollups": 528.0,
    "good_token_counts": 133.0,  # not yet measured apart from its first page (16 rows)
}
#: A table's (or partition's) size holding one row: its heap page, each index's meta page
#: and root, TOAST's index; paid once per partition before the rows' own bytes.
FIXED_BYTES: Final = {
    "requests": 32_768,
    "request_rollups": 32_768,
    "gpu_samples": 49_152,
    "gpu_rollups": 32_768,
    "server_samples": 49_152,
    "server_engine_samples": 40_960,
    "good_token_counts": 32_768,
}
#: A request rollup row without its sketches: key, counters, tuple header, primary-key entry.
ROLLUP_ROW_BYTES: Final = 330.0  # 230 at 10 min, 408 at 1 h of the benchmark: page fill
#: Bytes of one serialised sketch (``QuantileSketch.to_bytes``) by the values it holds,
#: interpolated in log(n) between the points.
SKETCH_BYTES: Final = (
    (1, 72.0),
    (2, 86.9),
    (4, 118.4),
    (8, 181.3),
    (16, 292.3),
    (32, 135.8),
    (100, 195.8),
    (300, 267.1),
    (1000, 345.4),
    (3000, 436.6),
    (10_000, 556.1),
    (100_000, 752.0),
)
#: WAL bytes per raw row stored: a request row alone (its index entry and record framing
#: included, as a binary COPY writes it); a GPU sample with its share of the GPU rollup
#: updates (shipped every 10 s); a server or engine sample row.
WAL_PER_ROW: Final = {
    "requests": 362.0,
    "gpu_samples": 953.0,
    "server_samples": 446.0,
}
#: WAL bytes per byte of a rollup row rewritten by a shipment (the new tuple version; full
#: page images after a checkpoint included).
WAL_PER_ROLLUP_BYTE: Final = 0.91


class Arrivals(StrEnum):
    """How requests fall into buckets: ``poisson`` (a fleet), ``even`` (the benchmark)."""

    POISSON = "poisson"
    EVEN = "even"


@dataclass(frozen=True, slots=True)
class Fleet:
    """A fleet as the store sees it. A series is one (model, instance, tenant, priority);
    the model assumes every instance serves ``models_per_instance`` models and every tenant
    sends every priority to every instance (an upper bound on the rollup keys)."""

    requests_per_s: float
    instances: int
    models_per_instance: int = 1
    tenants: int = 1
    priorities: int = 1
    #: Latency stages each request reports (sketch columns filled, of nine).
    stages: int = 6
    gpus_per_instance: int = 8
    gpu_interval_s: float = 2.0
    scrape_interval_s: float = 15.0
    #: Data-parallel engines per server (two or more write ``server_engine_samples``).
    engines_per_instance: int = 1
    ship_interval_s: float = 2.0
    sample_ship_interval_s: float = 10.0
    #: Sets of good limits (SLOs, cost models) good tokens are counted for.
    good_limit_sets: int = 1
    arrivals: Arrivals = Arrivals.POISSON

    def __post_init__(self) -> None:
        if not self.requests_per_s >= 0 or not math.isfinite(self.requests_per_s):
            raise InvalidInput("the request rate must be a non-negative number")
        for name in ("instances", "models_per_instance", "tenants", "priorities"):
            if not 1 <= getattr(self, name) <= 10_000_000:
                raise InvalidInput(f"{name} must be between 1 and 10000000")
        if not 0 <= self.stages <= 9:
            raise InvalidInput("stages must be between 0 and 9")
        for name in ("gpus_per_instance", "engines_per_instance", "good_limit_sets"):
            if not 0 <= getattr(self, name) <= 100_000:
                raise InvalidInput(f"{name} must be between 0 and 100000")
        for name in (
            "gpu_interval_s",
            "scrape_interval_s",
            "ship_interval_s",
            "sample_ship_interval_s",
        ):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise InvalidInput(f"{name} must be a positive number of seconds")

    @property
    def series(self) -> int:
        return self.instances * self.models_per_instance * self.tenants * self.priorities


@dataclass(frozen=True, slots=True)
class TableLoad:
    """One table's rows and bytes written per ``span_s`` seconds, and kept in steady state."""

    table: str
    rows: float
    bytes: float
    kept_rows: float = 0.0
    kept_bytes: float = 0.0


@dataclass(frozen=True, slots=True)
class StoreLoad:
    """The store's load for a fleet over ``span_s`` (a day unless asked for less)."""

    span_s: float
    tables: tuple[TableLoad, ...]
    wal_by_phase: dict[str, float]
    commits: float
    partitions: int
    rollup_rows_by_resolution: dict[str, float] = field(default_factory=dict)

    def table(self, name: str) -> TableLoad:
        return next(t for t in self.tables if t.table == name)

    @property
    def rows(self) -> float:
        return sum(t.rows for t in self.tables)

    @property
    def bytes(self) -> float:
        return sum(t.bytes for t in self.tables)

    @property
    def kept_bytes(self) -> float:
        return sum(t.kept_bytes for t in self.tables)

    @property
    def wal_bytes(self) -> float:
        return sum(self.wal_by_phase.values())


def sketch_bytes(values: float) -> float:
    """Bytes of a sketch holding ``values`` values (``SKETCH_BYTES``, log-interpolated)."""
    if values <= 0:
        return 0.0
    points = SKETCH_BYTES
    if values <= points[0][0]:
        return points[0][1]
    if values >= points[-1][0]:
        return points[-1][1]
    i = bisect_right([n for n, _ in points], values)
    (n0, b0), (n1, b1) = points[i - 1], points[i]
    share = (math.log(values) - math.log(n0)) / (math.log(n1) - math.log(n0))
    return b0 + share * (b1 - b0)


def _occupied(rate_per_s: float, bucket_s: float, arrivals: Arrivals) -> float:
    """The share of a series' buckets that hold at least one request."""
    expected = rate_per_s * bucket_s
    if arrivals is Arrivals.EVEN:
        return min(1.0, expected)
    return -math.expm1(-expected)


def _buckets(span_s: float, bucket_s: float) -> float:
    """Buckets a span starting on a day boundary touches."""
    return math.ceil(span_s / bucket_s - 1e-9)


def load(
    fleet: Fleet, retention: RetentionPolicy | None = None, span_s: float = DAY_S
) -> StoreLoad:
    """Rows, bytes and WAL the fleet writes in ``span_s`` (from midnight UTC, at most a day),
    with what retention keeps in steady state."""
    retention = retention or RetentionPolicy()
    if not 0 < span_s <= DAY_S:
        raise InvalidInput("the span must be between 0 and one day of seconds")
    scale = DAY_S / span_s  # a span's figures times this: a day's
    tables: list[TableLoad] = []
    keep_raw = retention.raw_days + 1  # today and raw_days before it

    def raw(name: str, rows: float) -> None:
        per_day = rows * scale
        fixed = FIXED_BYTES[name] if rows else 0.0
        tables.append(
            TableLoad(
                name,
                rows,
                rows * ROW_BYTES[name] + fixed,
                per_day * keep_raw,
                per_day * keep_raw * ROW_BYTES[name] + keep_raw * fixed,
            )
        )

    def kept(name: str, rows: float, size: float, kept_rows: float, kept_size: float) -> None:
        fixed = FIXED_BYTES[name] if rows else 0.0
        tables.append(TableLoad(name, rows, size + fixed, kept_rows, kept_size + fixed))

    requests = fleet.requests_per_s * span_s
    raw("requests", requests)
    per_series = fleet.requests_per_s / fleet.series
    rollup_rows = rollup_bytes = kept_rows = kept_bytes = 0.0
    by_resolution: dict[str, float] = {}
    for resolution, bucket_s in RESOLUTIONS:
        share = _occupied(per_series, bucket_s, fleet.arrivals)
        rows = fleet.series * _buckets(span_s, bucket_s) * share
        held = per_series * bucket_s / share if share else 0.0
        size = ROLLUP_ROW_BYTES + fleet.stages * sketch_bytes(held)
        by_resolution[resolution] = rows
        rollup_rows += rows
        rollup_bytes += rows * size
        day_rows = fleet.series * (DAY_S / bucket_s) * share
        kept_rows += day_rows * retention.days_of(resolution)
        kept_bytes += day_rows * retention.days_of(resolution) * size
    kept("request_rollups", rollup_rows, rollup_bytes, kept_rows, kept_bytes)

    gpus = fleet.instances * fleet.gpus_per_instance
    raw("gpu_samples", gpus * span_s / fleet.gpu_interval_s)
    gpu_rollup_rows = gpu_kept = 0.0
    for resolution, bucket_s in RESOLUTIONS:
        share = _occupied(1.0 / fleet.gpu_interval_s, bucket_s, Arrivals.EVEN)
        gpu_rollup_rows += gpus * _buckets(span_s, bucket_s) * share
        gpu_kept += gpus * DAY_S / bucket_s * share * retention.days_of(resolution)
    per_row = ROW_BYTES["gpu_rollups"]
    kept("gpu_rollups", gpu_rollup_rows, gpu_rollup_rows * per_row, gpu_kept, gpu_kept * per_row)
    scrapes = fleet.instances * span_s / fleet.scrape_interval_s
    raw("server_samples", scrapes)
    engines = fleet.engines_per_instance if fleet.engines_per_instance >= 2 else 0
    raw("server_engine_samples", scrapes * engines)

    # Good tokens: per limit set, series and hour holding requests, plus the day.
    hours = by_resolution["1h"]
    good_rows = fleet.good_limit_sets * (hours + by_resolution["1d"])
    kept_good = fleet.good_limit_sets * (
        hours * scale * retention.hour_days + by_resolution["1d"] * scale * retention.day_days
    )
    per_good = ROW_BYTES["good_token_counts"]
    kept("good_token_counts", good_rows, good_rows * per_good, kept_good, kept_good * per_good)

    wal, commits = _wal(fleet, span_s, {t.table: t.rows for t in tables}, by_resolution)
    partitions = len(PARTITIONED_TABLES) * (keep_raw + retention.partition_ahead_days)
    return StoreLoad(span_s, tuple(tables), wal, commits, partitions, by_resolution)


def _wal(
    fleet: Fleet, span_s: float, rows: dict[str, float], by_resolution: dict[str, float]
) -> tuple[dict[str, float], float]:
    """WAL bytes per phase (requests, GPU samples, server samples) and commits: raw rows
    copied, plus every rollup row each shipment rewrites."""
    wal = rows["requests"] * WAL_PER_ROW["requests"]
    shipments = fleet.instances * span_s / fleet.ship_interval_s
    per_shipment = fleet.requests_per_s / fleet.instances * fleet.ship_interval_s
    series_per_instance = fleet.series / fleet.instances
    # A shipment touches each of its instance's series that had a request in it, once per
    # resolution (twice at a minute boundary, rarely: ignored).
    touched = series_per_instance * _occupied(
        per_shipment / series_per_instance, 1.0, fleet.arrivals
    )
    per_series = fleet.requests_per_s / fleet.series
    for resolution, bucket_s in RESOLUTIONS:
        share = _occupied(per_series, bucket_s, fleet.arrivals)
        held = per_series * bucket_s / share if share else 0.0
        # The row as rewritten holds, on average, half of what its bucket ends with.
        size = ROLLUP_ROW_BYTES + fleet.stages * sketch_bytes(max(held / 2, 1.0))
        if by_resolution[resolution]:
            wal += shipments * touched * size * WAL_PER_ROLLUP_BYTE
    phases = {
        "requests": wal,
        "gpu": rows["gpu_samples"] * WAL_PER_ROW["gpu_samples"],
        "server": (rows["server_samples"] + rows["server_engine_samples"])
        * WAL_PER_ROW["server_samples"],
    }
    sample_shipments = fleet.instances * span_s / fleet.sample_ship_interval_s
    server_shipments = (
        fleet.instances * span_s / max(fleet.scrape_interval_s, fleet.sample_ship_interval_s)
    )
    commits = shipments + (sample_shipments if fleet.gpus_per_instance else 0) + server_shipments
    return phases, commits
