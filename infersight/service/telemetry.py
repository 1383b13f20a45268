"""Reads of the fleet's telemetry that the query routes (``/api/v1/latency``, ``/throughput``,
``/breakdown``, ``/latency/gap``, ``/engines``, ``/pools``), the dashboard's pages and
``/metrics`` share: latency quantiles, throughput, the stage breakdown with the client stage,
the client ↔ engine gap, the servers' engine figures, disaggregated pools, and the time series
(request counts and merged sketches per bucket, label sets, GPU and engine samples) the charts
are drawn from.

Each function reads the store's telemetry concerns (``storage.seam``: requests, clients,
samples) and answers ``core`` types or the store's row types, re-exported here so that the
edges name them without importing ``storage``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from infersight.core.gap import ClientStage, GapGroup, client_stages, gap_report
from infersight.core.model_names import ModelAliases
from infersight.core.query import Breakdown, LatencyResult, Method, Selector, Throughput
from infersight.core.sketch import QuantileSketch
from infersight.core.window import Resolution, Window
from infersight.storage.seam import (
    HOT_MARGIN,
    Counts,
    EngineBucket,
    EngineSummary,
    GpuBucket,
    PoolLine,
    RequestPeak,
    ServerSummary,
    disaggregated,
)

if TYPE_CHECKING:
    from infersight.storage.seam import LabelKey, Store

__all__ = [
    "HOT_MARGIN",
    "ClientGap",
    "Counts",
    "EngineBucket",
    "EngineSummary",
    "GpuBucket",
    "PoolLine",
    "RequestPeak",
    "ServerSummary",
    "breakdown",
    "bucket_sketches",
    "client_gap",
    "client_stages_of",
    "disaggregated",
    "engine_series",
    "engine_summaries",
    "first_seen",
    "gpu_series",
    "label_sets",
    "latencies",
    "latency",
    "pool_summaries",
    "request_peaks",
    "request_series",
    "server_summaries",
    "throughput",
]


def latency(
    store: Store,
    metric: str,
    window: Window,
    selector: Selector,
    group_by: Sequence[str],
    quantiles: Sequence[float],
    method: Method,
    *,
    finest: Resolution,
    exact_max_rows: int,
) -> LatencyResult:
    """Quantiles of ``metric`` per group over ``window``: exact from raw rows up to
    ``exact_max_rows`` requests (``Method.AUTO``), else from merged sketches."""
    return store.requests.latency(
        metric,
        window,
        selector,
        group_by,
        quantiles,
        method,
        finest=finest,
        exact_max_rows=exact_max_rows,
    )


def latencies(
    store: Store,
    metrics: Sequence[str],
    window: Window,
    selector: Selector,
    group_by: Sequence[str],
    quantiles: Sequence[float],
    *,
    finest: Resolution,
) -> dict[str, LatencyResult]:
    """Sketch quantiles of several metrics per group, read in one pass over ``window``."""
    return store.requests.latencies(metrics, window, selector, group_by, quantiles, finest=finest)


def throughput(
    store: Store,
    window: Window,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    *,
    finest: Resolution,
) -> list[Throughput]:
    """Requests, errors and tokens (and their rates) per group over ``window``."""
    return store.requests.throughput(window, selector, group_by, finest=finest)


def breakdown(
    store: Store,
    window: Window,
    selector: Selector,
    group_by: Sequence[str],
    *,
    finest: Resolution,
) -> list[Breakdown]:
    """Each stage's share of the requests' end-to-end time per group."""
    return store.requests.breakdown(window, selector, group_by, finest=finest)


def client_stages_of(
    store: Store,
    window: Window,
    aliases: ModelAliases,
    selector: Selector,
    group_by: Sequence[str],
) -> dict[tuple[str, ...], ClientStage]:
    """The client stage of each group of a breakdown: the time the group's clients waited
    beyond the server's end to end, from the window's client calls joined to them."""
    calls = store.clients.read_pairs(window, aliases)
    return client_stages(calls.pairs, group_by, selector.items(), selector.tenants)


@dataclass(frozen=True, slots=True)
class ClientGap:
    """The client ↔ engine gap per model and tenant (``core.gap``)."""

    groups: list[GapGroup]
    truncated: bool
    """More calls were in the window than were read (the newest were)."""


def client_gap(
    store: Store,
    window: Window,
    aliases: ModelAliases,
    quantiles: Sequence[float],
    *,
    model: str | None = None,
    tenant: str | None = None,
) -> ClientGap:
    """Client calls of ``window`` (of ``model``, compared through ``aliases``, and ``tenant``
    when given) joined by trace id to the server's records: the gap per model and tenant."""
    read = store.clients.read_pairs(window, aliases, model=model, tenant=tenant)
    return ClientGap(gap_report(read.pairs, aliases, quantiles), read.truncated)


def server_summaries(
    store: Store, window: Window, instances: Sequence[str] | None = None
) -> list[ServerSummary]:
    """Each server's engine figures over ``window`` from its ``/metrics`` (``None``: every
    instance)."""
    return store.samples.server_summaries(window, instances)


def engine_summaries(
    store: Store, window: Window, instances: Sequence[str] | None = None
) -> list[EngineSummary]:
    """The data-parallel engines of the servers that run two or more, over ``window``."""
    return store.samples.engine_summaries(window, instances)


def engine_series(
    store: Store, window: Window, step_s: int, instances: Sequence[str] | None = None
) -> list[EngineBucket]:
    """The data-parallel engines' figures per ``step_s`` bucket."""
    return store.samples.engine_series(window, step_s, instances)


def pool_summaries(store: Store, window: Window) -> list[PoolLine]:
    """Each instance's part in disaggregated prefill/decode serving over ``window``
    (``disaggregated`` says whether any takes part)."""
    return store.requests.pool_summaries(window)


def request_series(
    store: Store,
    window: Window,
    step: Resolution,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    *,
    coarsest: Resolution | None = None,
    bucket_s: int | None = None,
) -> dict[LabelKey, dict[datetime, Counts]]:
    """Request counts per group and bucket of ``step`` rollups (``bucket_s``: added up per
    bucket of that many seconds by the store)."""
    return store.requests.series(window, step, selector, group_by, coarsest, bucket_s)


def request_peaks(
    store: Store, window: Window, step: Resolution, selector: Selector = Selector()
) -> dict[str, RequestPeak]:
    """Per model: its busiest ``step`` bucket's requests over ``window`` (its instances added
    up), all its requests, its first and last bucket and the instances that served it."""
    return store.requests.peaks(window, step, selector)


def bucket_sketches(
    store: Store,
    metrics: Sequence[str],
    window: Window,
    step: Resolution,
    bucket_s: int,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    *,
    coarsest: Resolution | None = None,
) -> dict[str, dict[LabelKey, dict[datetime, QuantileSketch]]]:
    """Per metric, one merged sketch per group and ``bucket_s`` bucket, all metrics in one
    read."""
    return store.requests.bucket_sketches(
        metrics, window, step, bucket_s, selector, group_by, coarsest
    )


def label_sets(store: Store, window: Window, step: Resolution = Resolution.HOUR) -> list[LabelKey]:
    """The label sets (model, instance, tenant, …) seen in ``window``."""
    return store.requests.label_sets(window, step)


def first_seen(store: Store, since: datetime, now: datetime) -> dict[LabelKey, datetime]:
    """Each label set's first request between ``since`` and ``now``."""
    return store.requests.first_seen(since, now)


def gpu_series(
    store: Store,
    window: Window,
    step_s: int,
    instances: Sequence[str] | None,
    finest: Resolution,
) -> list[GpuBucket]:
    """Every GPU's figures per ``step_s`` bucket (``None``: every instance)."""
    return store.samples.gpu_series(window, step_s, instances, finest)
