"""Cost queries: what a window of GPU time cost, per model / instance / tenant / priority.

``cost(engine, window, model, selector, group_by)`` is the one entry point (the API, the
dashboard, the weekly report, capacity planning and ``/metrics`` all call it); the math is
``core.cost``'s. Three reads feed it:

* **GPU usage** (``gpu_usage``): one aggregate per (instance, GPU). A sample stands for the
  time until the next sample of the same GPU, at most ``model.sample_gap_s`` (a longer silence
  means the sidecar or the instance was gone, and is not billed); the last sample in the window
  stands for the time to the window's end, with the same cap. Utilisation is time-weighted;
  energy is the increase of NVML's total-energy counter to the next sample when that comes
  within the gap (a reset counts from zero), else power × the seconds billed. Windows longer
  than ``ROLLUP_MIN_S`` under the default gap are read from ``gpu_rollups`` with raw samples
  only at the edges, which gives the same figures (``storage.gpu_rollup``); idle time under a
  floor off the utilisation histogram's 5 % edges is then interpolated in its bin
  (``idle_method`` says which).
* **Served work** (``series_usage``): requests, tokens and prefill / decode request-seconds
  per series (model, instance, tenant, priority), from raw rows at the window's edges and
  rollups in between (``core.window.split``): the sums of the prefill and decode sketches.
* **Good tokens**: tokens of successful requests within their SLO: each series is held to the
  latency SLOs that cover it (stored SLOs, ``core.goodput``), or to the cost model's
  ``GoodRequest`` limits where none does; each line and the result say which (a measurement
  the engine did not report does not fail a request). Counted exactly: whole hours and days
  from ``storage.good_tokens`` (each counted once from raw rows per set of limits and kept, so
  they outlive raw retention), the minutes at the window's ends from raw rows.
  Where neither has every request of the window, ``CostResult.good_tokens_exact`` is ``False``.

Cost models applied by operators are kept by ``storage.cost_models`` (re-exported here).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import (
    CompoundSelect,
    Connection,
    Engine,
    Select,
    bindparam,
    func,
    literal_column,
    select,
    union_all,
)

from infersight.core.cost import (
    ZERO,
    CostModel,
    CostResult,
    GoodRequest,
    GpuUsage,
    SeriesUsage,
    decimal_of,
    priced,
)
from infersight.core.goodput import GoodLimits, GoodPolicy, GoodRule
from infersight.core.query import Selector, check_group_by
from infersight.core.records import GROUP_LABELS
from infersight.core.sketch import header_totals
from infersight.core.slo import SloSpec
from infersight.core.window import Resolution, Segment, Window, split
from infersight.storage import good_tokens, gpu_reads, gpu_rollup
from infersight.storage.cost_models import (
    find_model,
    get_model,
    list_models,
    model_from_json,
    model_to_json,
    put_model,
)
from infersight.storage.slo_store import list_slos
from infersight.storage.sql import (
    segment_values,
    segment_where,
    sketch_header,
    span_where,
    spans_values,
)
from infersight.storage.tables import request_parts, request_rollups, requests, server_samples

LabelKey = tuple[str, ...]
_SERIES: Final = GROUP_LABELS
_N: Final = len(_SERIES)
#: Windows up to this long read GPU time from raw samples (a few thousand rows a GPU).
ROLLUP_MIN_S: Final = 6 * 3600.0


def gpu_usage(
    connection: Connection,
    window: Window,
    model: CostModel,
    instance: str | None = None,
    finest: Resolution = Resolution.MINUTE,
    *,
    raw_only: bool = False,
) -> list[GpuUsage]:
    """One ``GpuUsage`` per (instance, GPU) that sampled within ``window``.

    Windows longer than ``ROLLUP_MIN_S``, or older than minute retention (whose raw samples
    are gone too, by default), under the rollups' sample gap are read from
    ``gpu_rollups`` with raw samples at the edges (the same answer, but for idle time under a
    utilisation floor off the histogram's 5 % edges, which is interpolated: see
    ``storage.gpu_rollup``); others, and all with ``raw_only``, from raw samples.
    """
    floor = model.idle_utilisation_floor
    gap = float(model.sample_gap_s)
    if gap == gpu_rollup.ROLLUP_GAP_S and _rolled(window, finest) and not raw_only:
        parts = gpu_reads.covered_time(connection, window, floor, instance, finest)
    else:
        parts = gpu_reads.raw_intervals(
            connection, window.start, window.end, window.end, gap, floor, instance
        )
    out = []
    for (name, index), part in parts.items():
        seconds = decimal_of(part.covered_s, 3)
        out.append(
            GpuUsage(
                instance=name,
                gpu_index=index,
                name=part.name,
                gpu_seconds=seconds,
                idle_seconds=min(seconds, decimal_of(max(part.idle_s, 0.0), 3)),
                energy_j=decimal_of(max(part.energy_j, 0.0), 3),
                util_seconds=part.util_s,
                util_weighted=part.util_weighted_s,
                gpu_slice=part.gpu_slice,
            )
        )
    return sorted(out, key=lambda u: (u.instance, u.gpu_index))


def _rolled(window: Window, finest: Resolution) -> bool:
    """Whether GPU time over ``window`` comes from the rollups: long windows, and windows
    beyond minute retention, where raw samples no longer exist."""
    return window.seconds > ROLLUP_MIN_S or finest is not Resolution.MINUTE


def idle_method(
    floor: float,
    window: Window,
    gap: float = gpu_rollup.ROLLUP_GAP_S,
    finest: Resolution = Resolution.MINUTE,
) -> str:
    """How ``cost`` answers idle time for ``floor`` over ``window``: ``exact``, or
    ``interpolated`` where rollups serve the window and the floor is off a histogram edge."""
    rolled = gap == gpu_rollup.ROLLUP_GAP_S and _rolled(window, finest)
    return "interpolated" if rolled and not gpu_rollup.floor_on_edge(floor) else "exact"


# -- served work ----------------------------------------------------------------------------


@dataclass
class _Acc:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    good_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    #: Users' requests a P/D proxy split (those with a KV-transfer time).
    split: int = 0


def series_usage(
    connection: Connection,
    window: Window,
    good: GoodPolicy | GoodRequest,
    instance: str | None = None,
    finest: Resolution = Resolution.MINUTE,
    pending: list[dict[str, Any]] | None = None,
    rules: dict[LabelKey, GoodRule] | None = None,
) -> tuple[list[SeriesUsage], bool]:
    """What every series served over ``window``, and whether good tokens are exact.

    Each series' good tokens are measured against the limits ``good`` holds it to (a bare
    ``GoodRequest``: the same limits for all, basis ``cost_model``); the rule of each series is
    put in ``rules``. Good tokens of whole hours and days come from ``storage.good_tokens``
    (buckets it kept, or raw rows); buckets freshly counted from complete raw rows are added to
    ``pending`` for the caller to keep once its read is done.
    """
    policy = good if isinstance(good, GoodPolicy) else GoodPolicy((), good.limits)
    acc: dict[LabelKey, _Acc] = defaultdict(_Acc)
    rolled: dict[good_tokens.Bucket, dict[LabelKey, int]] = defaultdict(dict)
    segments = split(window, finest)
    for segment, rows in zip(segments, _segment_rows(connection, segments, instance), strict=True):
        if segment.raw:
            for row in rows:
                a = acc[tuple(row[:_N])]
                requests_, input_, output, prefill, decode, split_ = row[_N:]
                a.requests += int(requests_)
                a.input_tokens += int(input_)
                a.output_tokens += int(output)
                a.prefill_s += float(prefill)
                a.decode_s += float(decode)
                a.split += int(split_)
            continue
        for row in rows:
            key = tuple(row[:_N])
            requests_, input_, output, prefill, decode, bucket, transfer = row[_N:]
            if segment.resolution in good_tokens.KEPT:
                rolled[(segment.resolution, bucket)][key] = int(requests_)
            a = acc[key]
            a.requests += int(requests_)
            a.input_tokens += int(input_)
            a.output_tokens += int(output)
            if prefill is not None:
                a.prefill_s += header_totals(prefill)[1]
            if decode is not None:
                a.decode_s += header_totals(decode)[1]
            if transfer is not None:
                a.split += header_totals(transfer)[0]
    bases, exact = _good_tokens(
        connection, acc, policy, rolled, _unkept(segments), instance, pending, rules
    )
    series = [
        SeriesUsage(
            labels=dict(zip(_SERIES, key, strict=True)),
            requests=a.requests,
            input_tokens=a.input_tokens,
            output_tokens=a.output_tokens,
            good_tokens=a.good_tokens,
            prefill_s=decimal_of(a.prefill_s),
            decode_s=decimal_of(a.decode_s),
            good_basis=bases[key],
            role="decode" if a.split else "",
        )
        for key, a in sorted(acc.items())
        if a.requests
    ]
    return series, exact


def _segment_rows(
    connection: Connection, segments: Sequence[Segment], instance: str | None
) -> list[list[Sequence[Any]]]:
    """Each segment's rows for ``series_usage`` (raw edges: per series; rollup segments: per
    rollup row), from one statement for the raw edges and one for the rollup segments: each
    a ``UNION ALL`` of the per-segment reads it replaces, tagged with the segment (the same
    rows, in the same order per segment, as one statement per segment)."""
    out: list[list[Sequence[Any]]] = [[] for _ in segments]
    one: dict[str, Any] = {} if instance is None else {"instance": instance}
    raw = [k for k, segment in enumerate(segments) if segment.raw]
    rolled = [k for k, segment in enumerate(segments) if not segment.raw]
    if raw:
        values = {**one, **spans_values((segments[k].start, segments[k].end) for k in raw)}
        query = _raw_series_query(len(raw), instance is not None)
        for row in connection.execute(query, values).all():
            out[raw[row[0]]].append(tuple(row)[1:])
    if rolled:
        resolutions, bounds = segment_values([segments[k] for k in rolled])
        query = _rollup_series_query(resolutions, instance is not None)
        for row in connection.execute(query, {**bounds, **one}).all():
            out[rolled[row[0]]].append(tuple(row)[1:])
    return out


@lru_cache(maxsize=16)
def _raw_series_query(parts: int, one_instance: bool) -> CompoundSelect[Any]:
    """``series_usage``'s read of raw rows per series in each of ``parts`` spans
    ``[lo_K, hi_K)`` (of ``instance``), tagged with ``K``: built once per shape with its values
    as parameters (building and keying a statement again for every read cost more CPU than
    running it)."""
    r = requests.c
    keys = [r[name] for name in _SERIES]
    reads = []
    for part in range(parts):
        where = [span_where(r.start, part)]
        if one_instance:
            where.append(r.instance == bindparam("instance"))
        reads.append(
            select(
                literal_column(str(part)).label("part"),
                *keys,
                func.count(),
                func.coalesce(func.sum(r.input_tokens), 0),
                func.coalesce(func.sum(r.output_tokens), 0),
                func.coalesce(func.sum(r.prefill_s), 0.0),
                func.coalesce(func.sum(r.decode_s), 0.0),
                func.count(r.kv_transfer_s),
            )
            .where(*where)
            .group_by(*keys)
        )
    return union_all(*reads)


@lru_cache(maxsize=64)
def _rollup_series_query(resolutions: tuple[str, ...], one_instance: bool) -> CompoundSelect[Any]:
    """``series_usage``'s read of the rollup rows of each segment ``K`` (resolution
    ``resolutions[K]``, buckets in ``[lo_K, hi_K)``, of ``instance``), tagged with ``K``; built
    once per shape as ``_raw_series_query``."""
    u = request_rollups.c
    reads = []
    for part, resolution in enumerate(resolutions):
        where = [segment_where(request_rollups, part, resolution)]
        if one_instance:
            where.append(u.instance == bindparam("instance"))
        reads.append(
            select(
                literal_column(str(part)).label("part"),
                *(u[name] for name in _SERIES),
                u.requests,
                u.input_tokens,
                u.output_tokens,
                # Only each sketch's header (its count and sum), not its buckets.
                sketch_header("prefill_s"),
                sketch_header("decode_s"),
                u.bucket,
                sketch_header("kv_transfer_s"),
            ).where(*where)
        )
    return union_all(*reads)


def prefill_leg_usage(
    connection: Connection, window: Window, instance: str | None = None
) -> list[SeriesUsage]:
    """The prefill pool's work over ``window``: one series per (model, prefill instance,
    tenant, priority, adapter) of the prefill legs it ran (``request_parts``), weighted by
    their prefill time (their TTFT, else their end to end time, where an engine reported no
    prefill), with no requests or tokens of their own — those are the users', counted once
    on the decode side. Raw rows only: legs are not rolled up, so past the raw retention a
    prefill instance's cost is no longer attributed (it stays the instance's)."""
    values: dict[str, Any] = {"lo": window.start, "hi": window.end}
    if instance is not None:
        values["instance"] = instance
    return [
        SeriesUsage(
            labels=dict(zip(_SERIES, row[:_N], strict=True)),
            prefill_s=decimal_of(float(row[_N])),
            role="prefill",
        )
        for row in connection.execute(_prefill_legs_query(instance is not None), values)
    ]


@lru_cache(maxsize=4)
def _prefill_legs_query(one_instance: bool) -> Select[Any]:
    """``prefill_leg_usage``'s read, built once per shape as ``_raw_series_query``."""
    c = request_parts.c
    where = [c.start >= bindparam("lo"), c.start < bindparam("hi")]
    if one_instance:
        where.append(c.instance == bindparam("instance"))
    keys = [c[name] for name in _SERIES]
    return (
        select(*keys, func.coalesce(func.sum(func.coalesce(c.prefill_s, c.ttft_s, c.e2e_s)), 0.0))
        .where(*where)
        .group_by(*keys)
    )


def _good_tokens(
    connection: Connection,
    acc: dict[LabelKey, _Acc],
    policy: GoodPolicy,
    rolled: dict[good_tokens.Bucket, dict[LabelKey, int]],
    ranges: list[tuple[datetime, datetime]],
    instance: str | None,
    pending: list[dict[str, Any]] | None,
    rules: dict[LabelKey, GoodRule] | None,
) -> tuple[dict[LabelKey, str], bool]:
    """Add each series' good tokens to ``acc``, counted once per set of limits for the series
    held to it; the basis of each series, and whether every request was counted."""
    held: dict[GoodLimits, list[LabelKey]] = defaultdict(list)
    bases: dict[LabelKey, str] = {}
    for key in sorted(k for k, a in acc.items() if a.requests):
        rule = policy.rule_for(dict(zip(_SERIES, key, strict=True)))
        held[rule.limits].append(key)
        bases[key] = rule.basis.value
        if rules is not None:
            rules[key] = rule
    counted_requests = 0
    for limits, series in sorted(held.items(), key=lambda item: item[0].key):
        counted = good_tokens.count(connection, limits, rolled, ranges, instance, series=series)
        for key, tokens in counted.good_tokens.items():
            acc[key].good_tokens += tokens
        counted_requests += counted.requests
        if pending is not None:
            pending += counted.to_keep
    return bases, counted_requests == sum(a.requests for a in acc.values())


def _unkept(segments: Sequence[Segment]) -> list[tuple[datetime, datetime]]:
    """The ranges of a window outside its hour and day segments (good tokens from raw rows)."""
    out: list[tuple[datetime, datetime]] = []
    for seg in segments:
        if seg.resolution in good_tokens.KEPT:
            continue
        if out and out[-1][1] == seg.start:
            out[-1] = (out[-1][0], seg.end)
        else:
            out.append((seg.start, seg.end))
    return out


# -- the cost of a window -------------------------------------------------------------------


def good_policy(
    engine: Engine, model: CostModel, slos: Sequence[SloSpec] | None = None
) -> GoodPolicy:
    """Good tokens under the stored SLOs (or ``slos``), else ``model``'s ``goodRequest``."""
    return GoodPolicy.of(list_slos(engine) if slos is None else slos, model.good.limits)


def cost(
    engine: Engine,
    window: Window,
    model: CostModel,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
    *,
    finest: Resolution = Resolution.MINUTE,
    slos: Sequence[SloSpec] | None = None,
) -> CostResult:
    """Cost, tokens, good tokens, energy, utilisation and idle cost per group over ``window``.

    Every instance that sampled GPUs or served requests in the window is priced and its cost
    attributed to the series it served (``core.cost``); the groups are the attributed lines
    of the series ``selector`` picks, summed per ``group_by`` labels, sorted by labels.
    ``total`` sums the same lines, so the groups add up to it exactly. Good tokens are held to
    the stored SLOs (or ``slos``) covering each series, else to ``model``'s ``goodRequest``;
    ``good_rules`` says which limits held for which series.
    """
    groups = check_group_by(group_by)
    pending: list[dict[str, Any]] = []
    rules: dict[LabelKey, GoodRule] = {}
    policy = good_policy(engine, model, slos)
    with engine.connect() as connection:
        usage = gpu_usage(connection, window, model, selector.instance, finest)
        series, exact = series_usage(
            connection, window, policy, selector.instance, finest, pending, rules
        )
        series += prefill_leg_usage(connection, window, selector.instance)
    good_tokens.keep(engine, pending)
    return priced(
        window, model, selector, groups, usage, series, good_tokens_exact=exact, rules=rules
    )


# -- evidence for savings -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerEvidence:
    """Means of an instance's scraped server gauges over a window (``None``: not reported)."""

    instance: str
    engine: str
    requests_running: float | None
    requests_waiting: float | None
    prefix_cache_hit_ratio: float | None
    kv_cache_usage: float | None


def server_evidence(engine: Engine, window: Window) -> dict[str, ServerEvidence]:
    s = server_samples.c
    query = (
        select(
            s.instance,
            func.max(s.engine),
            func.avg(s.requests_running),
            func.avg(s.requests_waiting),
            func.avg(s.prefix_cache_hit_ratio),
            func.avg(s.kv_cache_usage),
        )
        .where(s.ts >= window.start, s.ts < window.end)
        .group_by(s.instance)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return {
        row[0]: ServerEvidence(
            row[0], row[1] or "", *(None if v is None else float(v) for v in row[2:])
        )
        for row in rows
    }


__all__ = [
    "ZERO",
    "ServerEvidence",
    "cost",
    "find_model",
    "get_model",
    "gpu_usage",
    "idle_method",
    "list_models",
    "model_from_json",
    "model_to_json",
    "put_model",
    "series_usage",
    "server_evidence",
]
