"""How the pages write values: numbers, durations, money, model names, diagnosis signals and
baseline comparisons.

``FILTERS`` and ``HELPERS`` are what ``api.dashboard.routes`` gives the templates; the
view-models write their labels and legends with the same functions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from markupsafe import Markup

from infersight.api.dashboard import charts as svg
from infersight.core.baseline_compare import Direction, MetricComparison
from infersight.core.profile import PHRASES as PROFILE_PHRASES
from infersight.core.signals import SIGNALS
from infersight.core.timestamps import iso
from infersight.core.window import format_duration
from infersight.service.cost_view import unit_cost_text


def short_model(model: str) -> str:
    """``meta-llama/Llama-3.1-8B-Instruct`` → ``Llama-3.1-8B-Instruct`` (legends, bar labels)."""
    return model.rpartition("/")[2] or model or "—"


def instance_series_name(model: str, instance: str) -> str:
    return f"{instance} ({short_model(model)})"


def money(amount: Decimal | None, currency: str, places: int = 2) -> str:
    if amount is None:
        return "–"
    return f"{amount:,.{places}f} {currency}"


def duration_text(start: datetime, end: datetime) -> str:
    seconds = int((end - start).total_seconds())
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def duration(delta: timedelta) -> str:
    days, rest = divmod(int(delta.total_seconds()), 86400)
    if days and not rest:
        return f"{days} days" if days > 1 else "1 day"
    return format_duration(delta)


def burn(rate: float) -> str:
    if rate >= 10:
        return f"{rate:,.0f}×"
    return f"{rate:.2g}×" if rate else "0"


def signal_label(name: str) -> str:
    """A diagnosis signal in words (``core.signals.SIGNALS``: ``unit: meaning``)."""
    limit = name.removeprefix("profile:")
    if limit != name:  # a profile's share (``alerts.diagnose.with_profile``)
        return f"profile: share of busy samples {PROFILE_PHRASES.get(limit, limit)}"
    meaning = SIGNALS.get(name, "").partition(": ")[2]
    return meaning or name.replace("_", " ")


def signal_value(name: str, value: float | None) -> str:
    if value is None:
        return "–"
    if name.startswith("profile:"):
        return f"{value * 100:.0f} %"
    unit = SIGNALS.get(name, "").partition(":")[0]
    if unit == "s":
        return svg.seconds(value)
    if unit == "ratio":
        return f"{value * 100:.3g} %"
    if unit in ("count", "tokens", ""):
        return svg.plain(value)
    return f"{svg.plain(value)} {unit}"


# -- comparison cells ---------------------------------------------------------------------


def metric_value(m: MetricComparison, value: float | None, currency: str = "") -> str:
    """A compared metric's value in its unit; a unit cost in the active cost model's
    ``currency`` with significant digits (``service.cost_view.unit_cost_text``)."""
    if value is None:
        return "–"
    if m.unit == "s":
        return svg.seconds(value)
    if m.unit == "ratio":
        return f"{value * 100:.3g} %"
    if m.unit == "currency":
        return unit_cost_text(Decimal(str(value)), currency)
    return f"{svg.plain(value)} {m.unit}"


def metric_change(m: MetricComparison) -> str:
    if m.change is None:
        return "–"
    if m.absolute:
        return f"{m.change * 100:+.2f} pp" if m.unit == "ratio" else f"{m.change:+.3g}"
    return f"{m.change * 100:+.1f} %"


def change_bar(m: MetricComparison) -> Markup:
    """The change and its interval on a symmetric axis, with the threshold on the worse side;
    for a metric not compared (measured on one side only), why."""
    if m.change is None:
        return Markup('<span class="muted small metric-note">{}</span>').format(m.note)
    values = [abs(m.change), m.threshold * 2]
    values += [abs(v) for v in (m.ci_low, m.ci_high) if v is not None]
    scale = max(values) or 1.0

    def pos(value: float) -> float:
        return 50 + max(-1.0, min(1.0, value / scale)) * 48

    parts = ['<div class="change"><span class="zero"></span>']
    if m.direction is not Direction.NEUTRAL:
        sign = 1 if m.direction is Direction.LOWER_IS_BETTER else -1
        parts.append(f'<span class="threshold" style="left:{pos(sign * m.threshold):.1f}%"></span>')
    if m.ci_low is not None and m.ci_high is not None:
        left, right = pos(m.ci_low), pos(m.ci_high)
        parts.append(f'<span class="ci" style="left:{left:.1f}%;width:{right - left:.1f}%"></span>')
    kind = "worse" if m.worse else ("better" if m.change and m.direction.value != "neutral" else "")
    parts.append(f'<span class="est {kind}" style="left:{pos(m.change):.1f}%"></span></div>')
    return Markup("".join(parts))  # noqa: S704 - numbers and fixed class names only


#: The templates' filters: ``{{ value | seconds }}`` and so on; ``None`` is written as a dash.
FILTERS: Final[dict[str, Callable[..., str]]] = {
    "seconds": lambda v: "–" if v is None else svg.seconds(v),
    "percent": lambda v, digits=1: "–" if v is None else f"{v * 100:.{digits}f} %",
    "number": lambda v: "–" if v is None else svg.plain(v),
    "iso": lambda v: "" if v is None else iso(v),
    "when": lambda v: "" if v is None else v.strftime("%Y-%m-%d %H:%M UTC"),
    "duration": duration,
    "objective": lambda v: f"{v * 100:.6g} %",
    "burn": burn,
}
#: The templates' functions.
HELPERS: Final[dict[str, Callable[..., Any]]] = {
    "signal_label": signal_label,
    "signal_value": signal_value,
    "metric_value": metric_value,
    "metric_change": metric_change,
    "change_bar": change_bar,
}
