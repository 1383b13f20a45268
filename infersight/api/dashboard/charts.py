"""Charts for the dashboard, rendered on the server as SVG (no JavaScript library, no CDN).

Three shapes cover every page: a time-series line chart (one line per series, gaps where a
bucket has no data, a hover column per bucket whose tooltip lists every series' value, and a
legend whose items toggle their line in ``static/app.js``), a heatmap (time × latency bins)
and horizontal stacked bars (the stage breakdown). Every text that reaches the SVG is escaped
here; the templates insert the result as markup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from html import escape
from itertools import pairwise
from typing import Final

from markupsafe import Markup

Format = Callable[[float], str]
#: Ten colours far apart from each other (no two oranges or two greens side by side).
PALETTE: Final = (
    "#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed",
    "#0891b2", "#db2777", "#65a30d", "#475569", "#92400e",
)  # fmt: skip


def colours(count: int) -> list[str]:
    """``count`` colours for the series of one chart, none repeated: the palette's for up to
    ten, else hues spread around the circle (golden-angle steps) in three lightnesses."""
    if count <= len(PALETTE):
        return list(PALETTE[:count])
    out = []
    for i in range(count):
        hue = (i * 137.508) % 360
        light = (38, 52, 66)[i % 3]
        out.append(f"hsl({hue:.1f},{70 if light < 60 else 60}%,{light}%)")
    return out


_W, _H = 760, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 76, 16, 12, 28
_TIME_STEPS: Final = (
    60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
)  # fmt: skip


#: A time-series chart has at most this many buckets: fine enough to draw a line, few enough to
#: hover (3 h at one point a minute is 180).
CHART_POINTS: Final = 200
#: Bucket lengths a chart may use, in seconds: each a whole number of minutes, hours or days.
BUCKET_STEPS: Final = (
    60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
)  # fmt: skip


def bucket_seconds(span_s: float, finest_s: int = 60, max_points: int = CHART_POINTS) -> int:
    """The bucket length of a chart over ``span_s`` seconds: the shortest ``BUCKET_STEPS``
    entry that is a whole number of ``finest_s`` (the finest rollup still kept for the range)
    and gives at most ``max_points`` buckets. A 3-hour range gets minutes, a day ten minutes,
    a week hours; only retention (``finest_s``) makes a range coarser than that."""
    for step in BUCKET_STEPS:
        if step >= finest_s and step % finest_s == 0 and span_s / step <= max_points:
            return step
    return max(BUCKET_STEPS[-1], finest_s)


def _safe(html: str) -> Markup:
    """Mark this module's output as markup: every text placed in it went through ``escape``."""
    return Markup(html)  # noqa: S704 - the only place markup is made, from escaped parts


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    points: Sequence[tuple[datetime, float | None]]


# -- number formats ---------------------------------------------------------------------------


def seconds(value: float) -> str:
    """Latency: µs, ms or s with three significant digits (a gap may be negative)."""
    if value == 0:
        return "0"
    if value < 0:
        return "−" + seconds(-value)
    if value < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s"


def percent(value: float) -> str:
    return f"{value * 100:.3g} %"


def plain(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value / 1e9:.3g} G"
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g} M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.3g} k"
    if magnitude >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def unit(suffix: str, base: Format = plain) -> Format:
    return lambda value: f"{base(value)} {suffix}".replace("  ", " ")


# -- axes -------------------------------------------------------------------------------------


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[low, high]``."""
    if not math.isfinite(low) or not math.isfinite(high) or high <= low:
        high = low + 1.0
    raw = (high - low) / max(count, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first, last = math.floor(low / step), math.ceil(high / step)
    return [round(i * step, 12) for i in range(first, last + 1)]


def _time_ticks(start: datetime, end: datetime) -> list[datetime]:
    span = (end - start).total_seconds()
    step = next((s for s in _TIME_STEPS if span / s <= 7), _TIME_STEPS[-1])
    epoch = math.ceil(start.timestamp() / step) * step
    out = []
    while epoch <= end.timestamp():
        out.append(datetime.fromtimestamp(epoch, UTC))
        epoch += step
    return out


def _time_label(at: datetime, span: timedelta) -> str:
    if span <= timedelta(days=1):
        return at.strftime("%H:%M")
    if span <= timedelta(days=3):
        return at.strftime("%d %b %H:%M")
    return at.strftime("%d %b")


def _empty(message: str, height: int = _H, width: int = _W) -> Markup:
    return _safe(
        f'<svg class="chart empty" viewBox="0 0 {width} {height}" role="img">'
        f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" class="muted">'
        f"{escape(message)}</text></svg>"
    )


# -- line chart -------------------------------------------------------------------------------


def line_chart(
    series: Sequence[Series],
    start: datetime,
    end: datetime,
    fmt: Format = plain,
    *,
    label: str,
    y_max: float | None = None,
    empty: str = "no data in this range",
    height: int = _H,
    width: int = _W,
    band: Band | None = None,
) -> Markup:
    """Lines over ``[start, end)``; ``y_max`` pins the axis (e.g. 1.0 for ratios); ``band``
    shades the area between its low and high points under the lines (e.g. a forecast range).

    ``width`` is the drawing's own width: a chart in a narrow column takes a smaller one so
    that its text keeps about the page's size when the SVG is scaled to the column.
    """
    values = [v for s in series for _, v in s.points if v is not None and math.isfinite(v)]
    if band is not None:
        values += [v for _, _, v in band.points if math.isfinite(v)]
    if not values:
        return _empty(empty, height, width)
    top = y_max if y_max is not None else max(values) * 1.08 or 1.0
    ticks = nice_ticks(0.0, top)
    top = max(ticks[-1], top)
    x0, x1, y0, y1 = _LEFT, width - _RIGHT, height - _BOTTOM, _TOP
    t0, t1 = start.timestamp(), max(end.timestamp(), start.timestamp() + 1)
    scale_x, scale_y = (x1 - x0) / (t1 - t0), (y0 - y1) / top

    def x(at: datetime) -> float:
        return x0 + (at.timestamp() - t0) * scale_x

    def y(value: float) -> float:
        return y0 - value * scale_y

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}" data-series-count="{len(series)}">'
    ]
    parts += _grid(ticks, fmt, y, x0, x1)
    if band is not None:
        parts += _band(band, x, lambda v: y(min(v, top)))
    span = end - start
    for tick in _time_ticks(start, end):
        parts.append(
            f'<text class="axis" x="{x(tick):.1f}" y="{y0 + 16}" text-anchor="middle">'
            f"{escape(_time_label(tick, span))}</text>"
        )
    palette = colours(len(series))
    for i, s in enumerate(series):
        colour = palette[i]
        parts.append(f'<g class="series" data-series="{i}">')
        for run in _runs(s.points):
            points = " ".join(f"{x(at):.1f},{y(min(v, top)):.1f}" for at, v in run)
            if len(run) == 1:
                cx, cy = points.split(",")
                parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="{colour}"/>')
            else:
                parts.append(
                    f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" '
                    f'points="{points}"/>'
                )
        parts.append("</g>")
    parts += _hover_columns(series, fmt, x, x0, x1, y0, y1)
    parts.append("</svg>")
    return _safe("".join(parts)) + legend(series)


#: A band's fill: neutral, so that the lines over it keep their colours.
BAND_FILL: Final = "#9aa5b8"


@dataclass(frozen=True, slots=True)
class Band:
    """A shaded range: ``(at, low, high)`` per bucket; a missing bucket breaks it."""

    name: str
    points: Sequence[tuple[datetime, float, float]]


def _band(band: Band, x: Callable[[datetime], float], y: Callable[[float], float]) -> list[str]:
    runs: list[list[tuple[datetime, float, float]]] = [[]]
    ordered = sorted(band.points)
    gap = _band_gap(ordered)  # once, not once per point
    for i, point in enumerate(ordered):
        if i and point[0] - ordered[i - 1][0] > gap:
            runs.append([])
        runs[-1].append(point)
    out = [f'<g class="band"><title>{escape(band.name)}</title>']
    for run in runs:
        if len(run) < 2:
            continue
        upper = [f"{x(at):.1f},{y(high):.1f}" for at, _, high in run]
        lower = [f"{x(at):.1f},{y(low):.1f}" for at, low, _ in reversed(run)]
        out.append(
            f'<polygon fill="{BAND_FILL}" fill-opacity="0.35" stroke="none" '
            f'points="{" ".join(upper + lower)}"/>'
        )
    out.append("</g>")
    return out


def _band_gap(points: Sequence[tuple[datetime, float, float]]) -> timedelta:
    """Twice the usual spacing of ``points``: a longer gap breaks the band."""
    if len(points) < 2:
        return timedelta(0)
    gaps = sorted(b[0] - a[0] for a, b in pairwise(points))
    return 2 * gaps[len(gaps) // 2]


def _grid(
    ticks: Sequence[float], fmt: Format, y: Callable[[float], float], x0: float, x1: float
) -> list[str]:
    out = []
    for tick in ticks:
        yy = y(tick)
        out.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{yy:.1f}" y2="{yy:.1f}"/>')
        out.append(
            f'<text class="axis" x="{x0 - 6}" y="{yy + 4:.1f}" text-anchor="end">'
            f"{escape(fmt(tick))}</text>"
        )
    return out


def _runs(
    points: Sequence[tuple[datetime, float | None]],
) -> list[list[tuple[datetime, float]]]:
    """Consecutive points with values (a missing bucket breaks the line)."""
    runs: list[list[tuple[datetime, float]]] = [[]]
    for at, value in points:
        if value is None or not math.isfinite(value):
            if runs[-1]:
                runs.append([])
            continue
        runs[-1].append((at, value))
    return [r for r in runs if r]


def _hover_columns(
    series: Sequence[Series],
    fmt: Format,
    x: Callable[[datetime], float],
    x0: float,
    x1: float,
    y0: float,
    y1: float,
) -> list[str]:
    """One transparent column per bucket whose tooltip lists each series' value there."""
    at_times: dict[datetime, list[str]] = {}
    for s in series:
        for at, value in s.points:
            if value is not None and math.isfinite(value):
                at_times.setdefault(at, []).append(f"{s.name}: {fmt(value)}")
    times = sorted(at_times)
    if not times:
        return []
    out = ['<g class="hover">']
    for i, at in enumerate(times):
        left = x0 if i == 0 else (x(times[i - 1]) + x(at)) / 2
        right = x1 if i == len(times) - 1 else (x(at) + x(times[i + 1])) / 2
        text = at.strftime("%Y-%m-%d %H:%M UTC") + "\n" + "\n".join(at_times[at])
        out.append(
            f'<rect x="{left:.1f}" y="{y1}" width="{max(right - left, 0.5):.1f}" '
            f'height="{y0 - y1}"><title>{escape(text)}</title></rect>'
        )
    out.append("</g>")
    return out


def legend(series: Sequence[Series]) -> Markup:
    if len(series) < 2 and not (series and series[0].name):
        return _safe("")
    palette = colours(len(series))
    items = "".join(
        f'<button type="button" class="legend-item" data-series="{i}">'
        f'<span class="swatch" style="background:{palette[i]}"></span>'
        f"{escape(s.name)}</button>"
        for i, s in enumerate(series)
    )
    return _safe(f'<div class="legend">{items}</div>')


# -- heatmap ----------------------------------------------------------------------------------


def heatmap(
    times: Sequence[datetime],
    edges: Sequence[float],
    counts: Sequence[Sequence[int]],
    step: timedelta,
    fmt: Format = seconds,
    *,
    label: str,
) -> Markup:
    """``counts[t][b]``: requests of bucket ``times[t]`` in ``(edges[b], edges[b + 1]]``."""
    if not times or len(edges) < 2 or not any(any(c) for c in counts):
        return _empty("no latency data in this range")
    height = _H + 20
    x0, x1, y0, y1 = _LEFT + 8, _W - _RIGHT, height - _BOTTOM, _TOP
    start, end = times[0], times[-1] + step
    t0, t1 = start.timestamp(), end.timestamp()
    bins = len(edges) - 1
    cell_h = (y0 - y1) / bins
    peak = max(max(c) for c in counts) or 1
    parts = [
        f'<svg class="chart heatmap" viewBox="0 0 {_W} {height}" role="img" '
        f'aria-label="{escape(label)}">'
    ]
    width = (x1 - x0) * step.total_seconds() / (t1 - t0)
    # Each bin's range and each cell's size are formatted once, not once per cell.
    ranges = [escape(f"{fmt(edges[b])} – {fmt(edges[b + 1])}") for b in range(bins)]
    tops = [f"{y0 - (b + 1) * cell_h:.1f}" for b in range(bins)]
    size = f'width="{width + 0.3:.1f}" height="{cell_h + 0.3:.1f}"'
    for at, column in zip(times, counts, strict=True):
        left = f"{x0 + (at.timestamp() - t0) / (t1 - t0) * (x1 - x0):.1f}"
        when = escape(f"{at:%Y-%m-%d %H:%M} UTC")
        for b, count in enumerate(column):
            if not count:
                continue
            # Square-root scale: the tail stays visible next to the mode.
            level = math.sqrt(count / peak)
            parts.append(
                f'<rect class="cell" x="{left}" y="{tops[b]}" {size} fill="{_heat(level)}">'
                f"<title>{when}\n{ranges[b]}: {count} requests</title></rect>"
            )
    for b in range(0, bins + 1, max(1, bins // 6)):
        yy = y0 - b * cell_h
        parts.append(
            f'<text class="axis" x="{x0 - 6}" y="{yy + 4:.1f}" text-anchor="end">'
            f"{escape(fmt(edges[b]))}</text>"
        )
    for tick in _time_ticks(start, end):
        xx = x0 + (tick.timestamp() - t0) / (t1 - t0) * (x1 - x0)
        parts.append(
            f'<text class="axis" x="{xx:.1f}" y="{y0 + 16}" text-anchor="middle">'
            f"{escape(_time_label(tick, end - start))}</text>"
        )
    parts.append("</svg>")
    return _safe("".join(parts))


def week_grid(
    cells: Sequence[tuple[int, float | None, str]], floor: float, *, label: str
) -> Markup:
    """Hours of the week as a 7 × 24 grid: ``cells`` are (hour of week, utilisation, tooltip);
    colour follows utilisation, hours under ``floor`` are outlined (class ``idle``)."""
    if not any(util is not None for _, util, _ in cells):
        return _empty("no GPU utilisation in this range", height=200)
    days = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    left, top, cell_w, cell_h = 44, 8, (_W - 44 - 8) / 24, 22
    height = top + 7 * cell_h + 22
    parts = [
        f'<svg class="chart week-grid" viewBox="0 0 {_W} {height}" role="img" '
        f'aria-label="{escape(label)}">'
    ]
    for day, name in enumerate(days):
        yy = top + day * cell_h
        parts.append(
            f'<text class="axis" x="{left - 6}" y="{yy + 15:.1f}" text-anchor="end">{name}</text>'
        )
    for hour, util, title in cells:
        day, h = divmod(hour, 24)
        xx, yy = left + h * cell_w, top + day * cell_h
        idle = util is not None and util < floor
        fill = "#e8ebf0" if util is None else _heat(util)
        css = "cell idle" if idle else "cell"
        stroke = ' stroke="#1f4e9c" stroke-width="2"' if idle else ""
        parts.append(
            f'<rect class="{css}" data-hour="{hour}" x="{xx + 1:.1f}" y="{yy + 1:.1f}" '
            f'width="{cell_w - 2:.1f}" height="{cell_h - 2:.1f}" fill="{fill}"{stroke}>'
            f"<title>{escape(title)}</title></rect>"
        )
    for h in range(0, 24, 3):
        parts.append(
            f'<text class="axis" x="{left + h * cell_w:.1f}" y="{top + 7 * cell_h + 14:.1f}">'
            f"{h:02d}:00</text>"
        )
    parts.append("</svg>")
    return _safe("".join(parts))


def _heat(level: float) -> str:
    """Pale yellow → deep red."""
    level = min(1.0, max(0.0, level))
    r = int(255 - 75 * level)
    g = int(240 - 210 * level)
    b = int(200 - 170 * level)
    return f"#{r:02x}{g:02x}{b:02x}"


def log_edges(low: float, high: float, bins: int) -> list[float]:
    """``bins + 1`` logarithmically spaced edges from ``low`` to ``high``."""
    low = max(low, 1e-6)
    high = max(high, low * 1.01)
    ratio = (high / low) ** (1.0 / bins)
    return [low * ratio**i for i in range(bins + 1)]


# -- stacked bars (HTML: they stretch to any width with text at the page's size) ----------


def stacked_bars(
    rows: Sequence[tuple[str, Sequence[tuple[str, float]]]], *, label: str, note: str = ""
) -> Markup:
    """One horizontal bar per row; each part is (name, share of the bar in [0, 1]); ``note``
    (plain text) is shown under the legend."""
    if not rows:
        return _safe('<p class="muted">no requests in this range</p>')
    names = list(dict.fromkeys(name for _, parts in rows for name, _ in parts))
    fill = dict(zip(names, colours(len(names)), strict=True))
    out = [f'<div class="hbars" role="img" aria-label="{escape(label)}">']
    for row_label, parts in rows:
        out.append(
            f'<div class="hbar-row"><span class="hbar-label" title="{escape(row_label)}">'
            f'{escape(row_label)}</span><span class="hbar">'
        )
        for name, raw in parts:
            share = max(0.0, min(1.0, raw))
            if share < 0.0005:
                continue
            text = f"{share * 100:.0f} %" if share >= 0.06 else ""
            out.append(
                f'<span class="part" style="width:{share * 100:.2f}%;'
                f'background:{fill[name]}" title="{escape(f"{name}: {share * 100:.1f} %")}">'
                f"{text}</span>"
            )
        out.append("</span></div>")
    out.append("</div>")
    swatches = "".join(
        f'<span class="legend-static"><span class="swatch" style="background:{fill[n]}">'
        f"</span>{escape(n)}</span>"
        for n in names
    )
    legend = _safe(f'<div class="legend">{swatches}</div>')
    if note:
        legend += _safe(f'<p class="muted small">{escape(note)}</p>')
    return _safe("".join(out)) + legend


# -- timeline ---------------------------------------------------------------------------------

SEVERITY_COLOURS: Final = {
    "page": "#dc2626",
    "ticket": "#d97706",
    "recovering": "#16a34a",
    "resolved": "#94a3b8",
}


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    start: datetime
    end: datetime
    kind: str
    """``page``, ``ticket`` or ``resolved`` (the colour)."""
    title: str
    anchor: str
    """The id of the element the bar links to."""


def timeline(bars: Sequence[Bar], start: datetime, end: datetime, *, label: str) -> Markup:
    """One row per bar over ``[start, end)`` (HTML, positioned in %); a bar links to its anchor."""
    if not bars:
        return _safe('<p class="muted">no incidents in this range</p>')
    t0, t1 = start.timestamp(), max(end.timestamp(), start.timestamp() + 1)

    def pos(at: datetime) -> float:
        return (min(max(at.timestamp(), t0), t1) - t0) / (t1 - t0) * 100

    out = [f'<div class="timeline" role="img" aria-label="{escape(label)}">']
    for bar in bars:
        left = pos(bar.start)
        width = max(pos(bar.end) - left, 0.4)
        out.append(
            f'<div class="tl-row"><span class="tl-label" title="{escape(bar.label)}">'
            f'{escape(bar.label)}</span><span class="tl-track">'
            f'<a class="tl-bar" href="#{escape(bar.anchor)}" title="{escape(bar.title)}" '
            f'style="left:{left:.2f}%;width:{width:.2f}%;'
            f'background:{SEVERITY_COLOURS.get(bar.kind, "#64748b")}"></a></span></div>'
        )
    ticks = "".join(
        f'<span style="left:{pos(t):.2f}%">{escape(_time_label(t, end - start))}</span>'
        for t in _time_ticks(start, end)
    )
    out.append(
        '<div class="tl-row"><span class="tl-label"></span>'
        f'<span class="tl-axis">{ticks}</span></div>'
    )
    out.append("</div>")
    return _safe("".join(out))
