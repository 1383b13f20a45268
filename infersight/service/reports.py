"""Weekly cost reports: the data, storage, the Slack summary and the scheduled job (the
renderings, JSON → CSV / HTML with SVG charts / Slack, are ``service.report_render``'s).

A weekly report covers one ISO week (Monday 00:00 to Monday 00:00 in the report time zone).
Its numbers are exactly what ``GET /api/v1/cost`` answers for the same windows: the report
embeds the API's JSON for the week by model and by instance and for each day, so the two
cannot drift apart; its ``purchasing`` section is what ``GET /api/v1/purchasing`` answers for
the week (the reserved / on-demand split and the idle windows, ``service.purchasing``), with
the fill what-if applied to the week's cost per million tokens; its ``reconciliation`` section
is what ``GET /api/v1/cost/reconciliation`` answers for the week (which figures were checked
against an imported cloud bill, the drift, the unmatched lines); its ``attribution`` section
is what ``GET /api/v1/cost/attribution`` answers for the week by tenant, team and workload
(usage, idle and allocation with goodput). Savings opportunities come
from ``core.savings`` with the evidence that triggered them. ``WeeklyReports`` is the job
``infersight serve`` schedules (default Monday 09:00): it reports the week that ended, stores
every rendering, and enqueues a short summary with a link in the notification outbox for
Slack (idempotent per week). ``list_reports`` and ``get_report`` read the stored ones.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from itertools import pairwise
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from infersight.core.attribution import DEFAULT_TOP_N, GROUPING_DIMENSIONS
from infersight.core.cost import CostLine, CostModel, CostResult, quantize
from infersight.core.errors import ConfigurationError, InvalidInput, NotFound
from infersight.core.savings import RULES, InstanceFacts, find_savings
from infersight.core.timestamps import iso
from infersight.core.window import Window
from infersight.service.attribution import attributed_from
from infersight.service.cost_view import amount, cost_dict, good_basis, good_text
from infersight.service.evaluation import FinestFor
from infersight.service.purchasing import purchasing, purchasing_dict
from infersight.service.reconcile import reconcile
from infersight.service.report_render import (
    CSV_COLUMNS,
    render_csv,
    render_html,
    slack_payload,
    summary_line,
)
from infersight.storage.seam import MAX_REPORTS, ReportInfo, Store, StoredReport

__all__ = [
    "KIND",
    "MAX_LIST",
    "EmptyReport",
    "Generated",
    "ReportInfo",
    "StoredReport",
    "WeeklyReports",
    "build_weekly",
    "current_week",
    "day_windows",
    "default_week",
    "get_report",
    "list_reports",
    "minute_text",
    "no_data_notice",
    "parse_schedule",
    "parse_week",
    "previous_week",
    "week_of",
    "week_window",
    "zone",
]

log = logging.getLogger(__name__)
KIND: Final = "weekly"
#: The most stored reports one listing answers.
MAX_LIST: Final = MAX_REPORTS
_WEEK = re.compile(r"^(\d{4})-W(\d{2})$")
_DAYS: Final = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: The first and last Mondays whose week (eight local midnights, a day to spare either side
#: for the time zone's offset) every date and datetime computation can represent.
_FIRST_MONDAY: Final = date.fromordinal(date.min.toordinal() + 7 - date.min.weekday())
_LAST_MONDAY: Final = date.fromordinal(date.max.toordinal() - 8 - (date.max.weekday() - 8) % 7)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"unknown time zone {name!r}", details={"zone": name}) from None


def parse_week(period: str) -> date:
    """``2026-W48`` → the Monday of that ISO week.

    A week whose window cannot be represented (its days, with a day to spare either side for
    the report time zone's offset, must lie between ``date.min`` and ``date.max``: 9999-W52
    ends in the year 10000) is refused as ``InvalidInput`` like a malformed one, so no window
    computed from it overflows.
    """
    match = _WEEK.match(period.strip())
    if not match:
        raise InvalidInput("a week is written like 2026-W48", details={"week": period[:32]})
    try:
        monday = date.fromisocalendar(int(match[1]), int(match[2]), 1)
    except ValueError:
        raise InvalidInput("no such ISO week", details={"week": period[:32]}) from None
    if not _FIRST_MONDAY <= monday <= _LAST_MONDAY:
        raise InvalidInput(
            f"{period.strip()} is outside the weeks a report can cover "
            f"({week_of(_FIRST_MONDAY)} to {week_of(_LAST_MONDAY)})",
            details={"week": period[:32]},
        )
    return monday


def week_of(day: date) -> str:
    year, week, _ = day.isocalendar()
    return f"{year:04d}-W{week:02d}"


def previous_week(now: datetime, tz: ZoneInfo) -> str:
    """The ISO week that ended most recently at ``now`` in ``tz``."""
    return week_of(now.astimezone(tz).date() - timedelta(days=7))


def current_week(now: datetime, tz: ZoneInfo) -> str:
    """The ISO week in progress at ``now`` in ``tz``."""
    return week_of(now.astimezone(tz).date())


def default_week(now: datetime, tz: ZoneInfo, *, partial: bool) -> str:
    """The week a report covers when none is named: the week in progress when a partial
    report is asked for (what ``--partial`` is for), else the week that ended last."""
    return current_week(now, tz) if partial else previous_week(now, tz)


def minute_text(at: datetime) -> str:
    """``2026-12-06 16:30 UTC``: a time as a title shows it (no seconds, no microseconds)."""
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


class EmptyReport(NotFound):
    """A week with no data at all in the store: no report is stored for it (issue 35)."""

    code = "no_data"


def _midnight(day: date, tz: ZoneInfo) -> datetime:
    return datetime.combine(day, time(), tzinfo=tz)


def day_windows(period: str, tz: ZoneInfo) -> list[tuple[date, Window]]:
    """The seven local days of the week (23 or 25 hours long across a DST change)."""
    monday = parse_week(period)
    days = [monday + timedelta(days=i) for i in range(8)]
    return [
        (day, Window(_midnight(day, tz), _midnight(after, tz))) for day, after in pairwise(days)
    ]


def week_window(period: str, tz: ZoneInfo) -> Window:
    monday = parse_week(period)
    return Window(_midnight(monday, tz), _midnight(monday + timedelta(days=7), tz))


def parse_schedule(text: str) -> dict[str, Any]:
    """``mon 09:00`` → APScheduler cron fields (day_of_week, hour, minute)."""
    parts = text.strip().lower().split()
    if len(parts) == 2 and parts[0] in _DAYS and re.fullmatch(r"\d{1,2}:\d{2}", parts[1]):
        hour, minute = (int(p) for p in parts[1].split(":"))
        if hour < 24 and minute < 60:
            return {"day_of_week": parts[0], "hour": hour, "minute": minute}
    raise ConfigurationError(
        "report_schedule must be DAY HH:MM, e.g. 'mon 09:00'", details={"schedule": text[:32]}
    )


# -- the report's data ----------------------------------------------------------------------


def _facts(
    result: CostResult, model: CostModel, evidence: Mapping[str, Any]
) -> list[InstanceFacts]:
    """Per-instance facts for the savings rules, from a (model, instance) cost result."""
    lines: dict[str, list[CostLine]] = {}
    for line in result.groups:
        lines.setdefault(line.labels["instance"], []).append(line)
    out = []
    for instance in result.instances:
        mine = lines.get(instance.instance, [])
        main = max(mine, key=lambda line: line.cost, default=None)
        split = sum((line.input_cost + line.output_cost for line in mine), Decimal(0))
        seen = evidence.get(instance.instance)
        price = model.price_for(
            instance.instance, instance.gpu_names[0] if instance.gpu_names else ""
        )
        out.append(
            InstanceFacts(
                instance=instance.instance,
                model=main.labels["model"] if main is not None else "",
                engine=seen.engine if seen is not None else "",
                cost=instance.total.amount,
                idle_cost=instance.idle_cost.amount,
                input_cost=sum((line.input_cost for line in mine), Decimal(0)),
                output_cost=sum((line.output_cost for line in mine), Decimal(0)),
                gpu_cost=instance.gpu_cost.amount,
                price_per_gpu_hour=None if price is None else price.blended_per_hour,
                utilisation=instance.utilisation,
                served=instance.served,
                tokens=sum(line.tokens for line in mine),
                good_tokens=sum(line.good_tokens for line in mine),
                prefill_share=float(sum((line.input_cost for line in mine), Decimal(0)) / split)
                if split
                else None,
                requests_running=seen.requests_running if seen is not None else None,
                requests_waiting=seen.requests_waiting if seen is not None else None,
                prefix_cache_hit_ratio=seen.prefix_cache_hit_ratio if seen is not None else None,
            )
        )
    return out


def _cheapest(model: CostModel) -> Decimal | None:
    prices = [p.blended_per_hour for p in model.gpu_prices.values() if p.blended_per_hour > 0]
    return min(prices, default=None)


def no_data_notice(period: str, window: Window, result: CostResult) -> str | None:
    """What is said of a window that holds nothing: no request, no GPU sample (such a week is
    refused, ``EmptyReport``, rather than stored as a report of zeros)."""
    if result.total.requests or result.instances or result.unmetered:
        return None
    return (
        f"no data recorded for {period} in this store: no requests and no GPU samples between "
        f"{iso(window.start)} and {iso(window.end)}, so no report was made. Check the week "
        "(--week; --partial reports the week in progress) and the store (--store, "
        "INFERSIGHT_DATABASE_URL)."
    )


def build_weekly(
    store: Store,
    model: CostModel,
    period: str,
    timezone: str,
    finest_for: FinestFor,
    now: datetime,
    *,
    partial: bool = False,
    attribution_top_n: int = DEFAULT_TOP_N,
) -> dict[str, Any]:
    """The weekly report's JSON body (see the module docstring).

    ``partial`` reports the week to date: the window (and its last day) ends at ``now``.
    """
    tz = zone(timezone)
    window = week_window(period, tz)
    days = day_windows(period, tz)
    if partial and window.end > now:
        window = Window(window.start, now)
        days = [(d, Window(w.start, min(w.end, now))) for d, w in days if w.start < now]

    def priced(w: Window, group_by: tuple[str, ...]) -> CostResult:
        return store.cost.cost(w, model, group_by=group_by, finest=finest_for(w, now))

    by_model = priced(window, ("model",))
    by_instance = priced(window, ("instance",))
    both = priced(window, ("model", "instance"))
    evidence = store.samples.server_evidence(window)
    savings = find_savings(_facts(both, model, evidence), _cheapest(model))
    total = by_model.total
    unit_cost = total.cost_per_million_tokens
    advice = purchasing(
        store,
        model,
        window,
        timezone=timezone,
        per_million=None if unit_cost is None else unit_cost.amount,
        read_unit_cost=False,
    )
    to_date = partial and window.end == now
    return {
        "kind": KIND,
        "period": period,
        "partial": to_date,
        "title": f"{period}, week to date until {minute_text(now)}" if to_date else period,
        "notice": no_data_notice(period, window, both),
        "timezone": timezone,
        "start": iso(window.start),
        "end": iso(window.end),
        "generated_at": iso(now),
        "currency": model.currency,
        "cost_model": {"name": model.name, "example_prices": model.example},
        "summary": {
            "cost": amount(total.cost),
            "idle_cost": amount(total.idle_cost),
            "gpu_hours": amount(total.gpu_hours),
            "tokens": total.tokens,
            "cost_per_million_tokens": _text(total.cost_per_million_tokens),
            "cost_per_million_good_tokens": _text(total.cost_per_million_good_tokens),
            "good_basis": good_basis(by_model),
            "good_tokens_note": good_text(by_model),
            "utilisation": total.utilisation,
            "tokens_per_joule": total.tokens_per_joule,
        },
        "by_model": cost_dict(by_model),
        "by_instance": cost_dict(by_instance),
        "daily": [{"date": day.isoformat(), **cost_dict(priced(w, ()))} for day, w in days],
        "purchasing": purchasing_dict(advice),
        "reconciliation": reconcile(
            store, model, window.start, window.end, finest_for=lambda w: finest_for(w, now)
        ).as_dict(),
        # Who spent it: per tenant, team and workload, usage + idle = allocation (issue 34).
        "attribution": {
            d: attributed_from(priced(window, (d,)), attribution_top_n).to_json()
            for d in GROUPING_DIMENSIONS
        },
        "savings": [
            {
                "rank": rank,
                "kind": o.kind,
                "category": o.category.name.lower(),
                "scope": o.scope,
                "action": o.action,
                "evidence": [
                    {"signal": e.signal, "value": e.value, "threshold": e.threshold}
                    for e in o.evidence
                ],
                "estimated_saving": amount(o.estimated_saving),
                "assumption": o.assumption,
                "rule": RULES[o.kind],
            }
            for rank, o in enumerate(savings, start=1)
        ],
    }


def _text(money: Any) -> str | None:
    return None if money is None else amount(money.amount)


# -- generation, storage and the job --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Generated:
    id: int
    period: str
    body: dict[str, Any]
    html: str
    csv: str


class WeeklyReports:
    """Generates, stores and announces weekly reports; called by the scheduler with ``now``."""

    def __init__(
        self,
        store: Store,
        model: Callable[[], CostModel],
        timezone: str,
        finest_for: FinestFor,
        notifiers: Collection[str] = (),
        base_url: str = "",
        attribution_top_n: int = DEFAULT_TOP_N,
    ) -> None:
        # A scheduled batch job, not an interactive read: a week of a large fleet's rollups
        # may take longer than an API answer's statement bound (its lock waits keep theirs).
        self.store = store.long_running()
        self.model = model
        self.timezone = timezone
        self.tz = zone(timezone)
        self.finest_for = finest_for
        self.notifiers = set(notifiers)
        self.base_url = base_url.rstrip("/")
        #: Tenants, teams and workloads kept apart in the report's attribution section.
        self.attribution_top_n = attribution_top_n

    def generate(self, period: str, now: datetime, *, partial: bool = False) -> Generated:
        """Build and store the report of ``period`` (replacing an earlier one).

        A week that has not ended is refused unless ``partial``: then the report covers the
        week to date (and is replaced by the whole week's once that is generated).
        """
        window = week_window(period, self.tz)
        if window.start >= now:
            raise InvalidInput(
                f"{period} has not started yet",
                details={"week": period, "starts": iso(window.start)},
            )
        if window.end > now and not partial:
            raise InvalidInput(
                f"{period} has not ended yet (it ends {iso(window.end)}); "
                "infersight report weekly --partial (the API: partial=true) reports the week "
                "to date",
                details={"week": period, "ends": iso(window.end)},
            )
        body = build_weekly(
            self.store,
            self.model(),
            period,
            self.timezone,
            self.finest_for,
            now,
            partial=partial,
            attribution_top_n=self.attribution_top_n,
        )
        if body["notice"]:
            # A report of zeros would read like a week that cost nothing: say so, store nothing.
            raise EmptyReport(
                body["notice"],
                details={"week": period, "start": body["start"], "end": body["end"]},
            )
        html, text = render_html(body), render_csv(body)
        report_id = self.store.reports.save(
            KIND,
            period,
            window.start,
            window.end,
            body["currency"],
            now,
            summary_line(body),
            json.dumps(body, sort_keys=True),
            html,
            text,
        )
        return Generated(report_id, period, body, html, text)

    def __call__(self, now: datetime) -> Generated | None:
        """Report the week that ended and post its summary to Slack (once per week); a week
        with no data is logged, not reported (``None``)."""
        try:
            generated = self.generate(previous_week(now, self.tz), now)
        except EmptyReport as empty:
            log.warning("weekly report skipped: %s", empty)
            return None
        if "slack" in self.notifiers:
            link = f"{self.base_url}/api/v1/reports/{generated.id}/html" if self.base_url else ""
            payload = json.dumps(slack_payload(generated.body, link), sort_keys=True)
            self.store.outbox.enqueue("slack", f"report:{KIND}:{generated.period}", payload, now)
        return generated


__all__ = [
    "CSV_COLUMNS",
    "KIND",
    "EmptyReport",
    "Generated",
    "WeeklyReports",
    "build_weekly",
    "current_week",
    "day_windows",
    "default_week",
    "no_data_notice",
    "parse_schedule",
    "parse_week",
    "previous_week",
    "quantize",
    "render_csv",
    "render_html",
    "week_window",
]


def list_reports(store: Store, kind: str | None = None, limit: int = 52) -> list[ReportInfo]:
    """The stored reports (of ``kind``, when given), newest first, at most ``limit``
    (1 … ``MAX_LIST``; ``InvalidInput`` outside)."""
    return store.reports.all(kind, limit)


def get_report(store: Store, report_id: int) -> StoredReport:
    """Stored report ``report_id`` with its JSON, HTML and CSV (``NotFound`` when there is
    none)."""
    return store.reports.get(report_id)
