"""One incident's page (``/ui/incidents/{id}``): its lifecycle at a glance.

The headline diagnosis (the onset's, or one raised over it), the burn rates each evaluation
saw (``service.incidents.history_of``) as a chart of the windows its severity's rules watch, the
evidence at onset (the symptom kept from the page), what evidence was missing, and the
diagnosis history with the lifecycle steps (recovering, burning again, resolved).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.formatting import duration_text
from infersight.api.params import MAX_ID
from infersight.core.budget import is_money_alert
from infersight.core.burn import Incident, Policy
from infersight.core.errors import Forbidden, InvalidInput
from infersight.core.profile import ranked_shares, summary_header, summary_rows
from infersight.core.window import format_duration, parse_duration
from infersight.service import incidents
from infersight.service.profiles import incident_profiles

NAME: Final = "incidents"
"""The page the navigation marks."""
TEMPLATE: Final = "incident.html"
DEFAULT_RANGE: Final = "24h"
#: Margin of the chart before the opening and after the resolution (or now).
_MARGIN: Final = timedelta(minutes=5)


def page(app: AppContext, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    return {**detail(app, ctx, incident_id_of(query)), "duration_text": duration_text}


def incident_id_of(query: dict[str, str]) -> int:
    text = query.get("incident_id", "")
    if not text.isdigit() or len(text) > 18 or not 1 <= int(text) <= MAX_ID:
        raise InvalidInput("an incident id is a positive whole number")
    return int(text)


def watched_windows(policy: Policy, incident: Incident) -> list[str]:
    """The windows of the rules at the incident's severity, shortest first."""
    windows = {
        w
        for r in policy.rules
        if r.severity is incident.severity
        for w in (r.short_window, r.long_window)
    }
    return [format_duration(w) for w in sorted(windows or set(policy.windows))]


def thresholds(policy: Policy, incident: Incident) -> list[str]:
    return [
        f"{r.burn_rate:g}× over {format_duration(r.long_window)} and "
        f"{format_duration(r.short_window)}"
        for r in policy.rules
        if r.severity is incident.severity
    ]


def money_thresholds(incident: Incident, headline: dict[str, Any] | None) -> list[str]:
    """A money alert's own thresholds: its budget's rules of the incident's severity and the
    spend thresholds, or the cost step's rise."""
    budget = (headline or {}).get("budget")
    if not isinstance(budget, dict):
        return ["cost per million tokens 25 % or more above the same hours of the last 7 days"]
    out = [
        f"{r['burn_rate']:g}× over {r['long_window']} and {r['short_window']}"
        for r in budget.get("rules") or []
        if r.get("severity") == incident.severity.value
    ]
    spent = ", ".join(f"{float(t):.0%}" for t in budget.get("thresholds") or [])
    return [*out, f"spend reaching {spent} of the budget"] if spent else out


def burn_chart(
    points: list[dict[str, Any]], windows: list[str], start: datetime, end: datetime
) -> Any:
    series = []
    for window in windows:
        values = [
            (datetime.fromisoformat(p["at"].replace("Z", "+00:00")), p["burn_rates"].get(window))
            for p in points
        ]
        series.append(svg.Series(f"{window} burn rate", values))
    return svg.line_chart(
        series, start, end, svg.unit("×"), label="burn rate per window over the incident"
    )


def by_window(rates: dict[str, float]) -> list[tuple[str, float]]:
    """Burn rates shortest window first (5m, 30m, 1h, …, 3d), not in the text's order (a
    window that does not parse goes last)."""

    def key(item: tuple[str, float]) -> tuple[int, timedelta, str]:
        try:
            return 0, parse_duration(item[0]), item[0]
        except InvalidInput:
            return 1, timedelta(0), item[0]

    return sorted(rates.items(), key=key)


def detail(app: AppContext, ctx: Context, incident_id: int) -> dict[str, Any]:
    incident = incidents.get_incident(app.store, incident_id)
    if ctx.tenants is not None and not incidents.within(app.store, incident, ctx.tenants):
        raise Forbidden(
            f"Incident #{incident_id} belongs to SLO {incident.slo!r}, which covers other tenants "
            f"than yours ({', '.join(sorted(ctx.tenants))}): it needs an unscoped token.",
            details={"tenants": sorted(ctx.tenants)},
        )
    note = incidents.annotate(app.store, [incident])[incident.id]
    kept = incidents.history_of(app.store, incident.id)
    windows = watched_windows(app.policy, incident)
    start = incident.opened_at - _MARGIN
    end = (incident.resolved_at or ctx.now) + _MARGIN
    chart = burn_chart(kept["burn_points"], windows, start, min(end, ctx.now))
    history = kept["history"]
    onset = next((h for h in history if h["verdict"] == "onset"), None)
    headline = note["diagnosis"]
    raised = [h for h in history if h["verdict"] == "raised"]
    named = [h for h in history if h["diagnosis"] is not None and h["cause"] != "unknown"]
    latest = named[-1] if named else None
    rules = thresholds(app.policy, incident)
    if is_money_alert(incident.slo):  # a budget's or a cost step's (``service.budgets``)
        windows = [w for w, _ in by_window(dict(incident.burn_rates))]
        chart = burn_chart(kept["burn_points"], windows, start, min(end, ctx.now))
        rules = money_thresholds(incident, headline)
    return {
        "incident": incident,
        "note": note,
        "headline": headline,
        "onset": onset,
        "raised": raised[-1] if raised else None,
        "history": list(reversed(history)),
        "missing": list((headline or {}).get("missing_evidence") or []),
        "burn_chart": chart,
        "onset_burns": by_window((note.get("symptom") or {}).get("burn_rates") or {}),
        "thresholds": rules,
        "diagnoses": sum(h["diagnosis"] is not None for h in history),
        "elsewhere": latest if _elsewhere(headline, latest) else None,
        **profile_of(app, incident, headline),
    }


#: Rows of the profile's bar lists.
PROFILE_ROWS: Final = 12


def profile_of(
    app: AppContext, incident: Incident, headline: dict[str, Any] | None
) -> dict[str, Any]:
    """The incident's newest profile (``service.profiles``) for its section: the profile, its
    limits' shares largest first, and the hottest functions and modules (bar lists)."""
    profile = incident_profiles(app.store, [incident.id]).get(incident.id)
    instance = (headline or {}).get("instance") or (profile.instance if profile else "")
    out: dict[str, Any] = {"profile": profile, "profile_instance": instance}
    result = profile.result if profile is not None else None
    if result:
        # Read defensively: a summary stored before results were validated may be malformed.
        measured = result.get("measured")
        measured = {str(m) for m in measured} if isinstance(measured, list) else set()
        out["profile_run"] = summary_header(result)
        out["profile_shares"] = ranked_shares(result.get("shares"))
        out["profile_functions"] = summary_rows(result.get("self"), PROFILE_ROWS)
        out["profile_modules"] = summary_rows(result.get("modules"), PROFILE_ROWS)
        out["profile_unmeasured"] = sorted({"gil", "lock"} - measured)
    return out


def _elsewhere(headline: dict[str, Any] | None, latest: dict[str, Any] | None) -> bool:
    """The newest diagnosis that names a cause names another cause or instance than the
    headline: kept out of the headline, but worth showing."""
    if headline is None or latest is None:
        return False
    return (latest["cause"], latest["instance"]) != (headline["cause"], headline.get("instance"))
