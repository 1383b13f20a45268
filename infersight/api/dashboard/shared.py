"""What several pages share: the buckets and step of their charts, and the filter menus.

A chart's bucket (``ChartStep``) is chosen from the range (``charts.bucket_seconds``: at most
``charts.CHART_POINTS`` buckets, so a 3-hour range is drawn a minute at a time and a day ten
minutes at a time) and read from the finest rollups retention still keeps for the range;
``request_series`` and ``bucket_sketches`` add those rollup buckets up into chart buckets,
reading the coarsest rollups that fit inside a chart bucket (hours for a 6-hour bucket) and
the finest ones only at the ragged ends of the range.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from infersight.api.context import AppContext
from infersight.api.dashboard.charts import bucket_seconds
from infersight.api.dashboard.context import Context
from infersight.core.query import Selector
from infersight.core.records import GROUP_LABELS
from infersight.core.sketch import QuantileSketch
from infersight.core.window import RESOLUTIONS_COARSE_FIRST, Resolution, Window, format_duration
from infersight.service import telemetry
from infersight.service.telemetry import Counts

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Step(Protocol):
    @property
    def seconds(self) -> int: ...

    def floor(self, ts: datetime) -> datetime: ...


@dataclass(frozen=True, slots=True)
class ChartStep:
    """One chart bucket: ``seconds`` long, added up from ``rollups`` buckets."""

    seconds: int
    rollups: Resolution

    @property
    def value(self) -> str:
        """How the page names it (``1m``, ``10m``, ``6h``)."""
        return format_duration(timedelta(seconds=self.seconds))

    @property
    def coarsest(self) -> Resolution:
        """The coarsest rollups whose buckets each lie inside one chart bucket (a 6-hour chart
        bucket adds up hour rows, a day one day rows); never finer than ``rollups``."""
        return next(
            r
            for r in RESOLUTIONS_COARSE_FIRST
            if self.seconds % r.seconds == 0 or r is self.rollups
        )

    def floor(self, ts: datetime) -> datetime:
        offset = int((ts - _EPOCH).total_seconds() // self.seconds) * self.seconds
        return _EPOCH + timedelta(seconds=offset)


def bucket_times(ctx: Context, step: Step) -> list[datetime]:
    """Every bucket start of ``step`` that overlaps the range (gaps are drawn as gaps)."""
    at, out = step.floor(ctx.window.start), []
    while at < ctx.window.end:
        out.append(at)
        at += timedelta(seconds=step.seconds)
    return out


def chart_step(app: AppContext, ctx: Context) -> ChartStep:
    """The range's chart bucket, no finer than the rollups retention still keeps for it."""
    finest: Resolution = app.retention.finest_for(ctx.window, ctx.now)
    return ChartStep(bucket_seconds(ctx.window.seconds, finest.seconds), finest)


def covered_s(ctx: Context, step_s: int, buckets: Sequence[datetime]) -> float:
    """Seconds of the range that hold data: from the first bucket with requests to the end of
    the last (within the range). A rate over the whole range would count the empty part."""
    if not buckets:
        return 0.0
    first = max(min(buckets), ctx.window.start)
    last = min(max(buckets) + timedelta(seconds=step_s), ctx.window.end)
    return max((last - first).total_seconds(), 0.0)


def bucket_span_s(at: datetime, step: ChartStep, window: Window) -> float:
    """Seconds of the bucket starting ``at`` that lie inside ``window``: a rate in a bucket cut
    by the window's ends (the newest one, at "now") divides by this, not by the whole step, so
    a chart does not dip at its right edge."""
    end = min(at + timedelta(seconds=step.seconds), window.end)
    return max((end - max(at, window.start)).total_seconds(), 1.0)


def request_series(
    app: AppContext,
    window: Window,
    step: ChartStep,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
) -> dict[tuple[str, ...], dict[datetime, Counts]]:
    """``service.telemetry.request_series`` per chart bucket (rollup buckets added up)."""
    found = telemetry.request_series(
        app.store,
        window,
        step.rollups,
        selector,
        group_by,
        coarsest=step.coarsest,
        # added up per chart bucket by the database (what the loop below would do)
        bucket_s=step.seconds if step.seconds % step.rollups.seconds == 0 else None,
    )
    out: dict[tuple[str, ...], dict[datetime, Counts]] = {}
    for labels, buckets in found.items():
        summed: dict[datetime, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for at, c in buckets.items():
            total = summed[step.floor(at)]
            for i, value in enumerate((c.requests, c.errors, c.input_tokens, c.output_tokens)):
                total[i] += value
        out[labels] = {at: Counts(*v) for at, v in sorted(summed.items())}
    return out


def bucket_sketches(
    app: AppContext,
    metric: str,
    window: Window,
    step: ChartStep,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
) -> dict[tuple[str, ...], dict[datetime, QuantileSketch]]:
    """``service.telemetry.bucket_sketches`` per chart bucket (rollup sketches merged)."""
    return bucket_sketches_many(app, (metric,), window, step, selector, group_by)[metric]


def bucket_sketches_many(
    app: AppContext,
    metrics: Sequence[str],
    window: Window,
    step: ChartStep,
    selector: Selector = Selector(),
    group_by: Sequence[str] = (),
) -> dict[str, dict[tuple[str, ...], dict[datetime, QuantileSketch]]]:
    """Per metric, one merged sketch per group per chart bucket, all metrics in one read;
    chart buckets whose rollup rows did not change are not decoded again
    (``storage.sketch_cache``)."""
    return telemetry.bucket_sketches(
        app.store,
        metrics,
        window,
        step.rollups,
        step.seconds,
        selector,
        group_by,
        coarsest=step.coarsest,
    )


def label_step(ctx: Context) -> Resolution:
    """Rollups the filter menus read: hours, or days for ranges longer than 8 days."""
    return Resolution.DAY if ctx.step is Resolution.DAY else Resolution.HOUR


def menus(app: AppContext, ctx: Context) -> dict[str, list[str]]:
    """Each filter's choices: the values seen in the range, narrowed by the *other* filters."""
    sets = telemetry.label_sets(app.store, ctx.window, label_step(ctx))
    out = {}
    for position, name in enumerate(GROUP_LABELS):
        if name == "priority":
            continue
        # A viewer limited to tenants: choices seen in their requests alone.
        others = Selector(**{k: v for k, v in ctx.filters.items() if k != name}).within(ctx.tenants)
        values = {
            s[position] for s in sets if others.matches(dict(zip(GROUP_LABELS, s, strict=True)))
        }
        chosen = ctx.filters.get(name)
        if chosen:
            values.add(chosen)  # keep the choice visible even when nothing matches it now
        out[name] = sorted(v for v in values if v)
    return out
