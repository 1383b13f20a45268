"""What several pages share: the buckets and step of their charts, and the filter menus."""

from __future__ import annotations

from datetime import datetime, timedelta

from api.context import AppContext
from api.dashboard.context import Context
from core.query import Selector
from core.records import GROUP_LABELS
from core.window import Resolution
from storage import timeseries


def bucket_times(ctx: Context, step: Resolution) -> list[datetime]:
    """Every bucket start of ``step`` that overlaps the range (gaps are drawn as gaps)."""
    at, out = step.floor(ctx.window.start), []
    while at < ctx.window.end:
        out.append(at)
        at += timedelta(seconds=step.seconds)
    return out


def chart_step(app: AppContext, ctx: Context) -> Resolution:
    """The context's step, coarsened to what the retention policy still keeps."""
    finest: Resolution = app.retention.finest_for(ctx.window, ctx.now)
    order = (Resolution.MINUTE, Resolution.HOUR, Resolution.DAY)
    return max(ctx.step, finest, key=order.index)


def label_step(ctx: Context) -> Resolution:
    """Rollups the filter menus read: hours, or days for ranges longer than 8 days."""
    return Resolution.DAY if ctx.step is Resolution.DAY else Resolution.HOUR


def menus(app: AppContext, ctx: Context) -> dict[str, list[str]]:
    """Each filter's choices: the values seen in the range, narrowed by the *other* filters."""
    sets = timeseries.label_sets(app.engine, ctx.window, label_step(ctx))
    out = {}
    for position, name in enumerate(GROUP_LABELS):
        if name == "priority":
            continue
        others = Selector(**{k: v for k, v in ctx.filters.items() if k != name})
        values = {
            s[position] for s in sets if others.matches(dict(zip(GROUP_LABELS, s, strict=True)))
        }
        chosen = ctx.filters.get(name)
        if chosen:
            values.add(chosen)  # keep the choice visible even when nothing matches it now
        out[name] = sorted(v for v in values if v)
    return out
