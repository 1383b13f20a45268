"""The Incidents page: the incidents that overlap the range (and the filters' scope) on a
timeline, each with its stored symptom, diagnosis, evidence and alternatives
(``service.incidents``). ``?state=`` narrows them to the firing or the resolved ones.
"""

from __future__ import annotations

from typing import Any, Final

from infersight.api.context import AppContext
from infersight.api.dashboard import charts as svg
from infersight.api.dashboard.context import Context
from infersight.api.dashboard.formatting import duration_text
from infersight.core.burn import Incident, IncidentState
from infersight.core.errors import InfersightError, InvalidInput
from infersight.core.query import Selector
from infersight.service.diagnosis import selector_of
from infersight.service.incidents import list_incidents

NAME: Final = "incidents"
TITLE: Final = "Incidents"
DEFAULT_RANGE: Final = "24h"
#: The query parameters of this page (besides the range and filters every page reads).
PARAMS: Final = ("state",)
INCIDENT_LIMIT: Final = 500


def page(app: AppContext, ctx: Context, query: dict[str, str]) -> dict[str, Any]:
    which = query.get("state", "all")
    if which not in ("all", "firing", "resolved"):
        raise InvalidInput("state must be all, firing or resolved")
    ctx_s = ctx.with_extra(**({"state": which} if which != "all" else {}))
    return {
        **incident_list(app, ctx_s, which),
        "state_filter": which,
        "ctx": ctx_s,
        "duration_text": duration_text,
    }


def _in_scope(incident: Incident, selector: Selector) -> bool:
    """The incident's scope can include the filtered requests (``*`` includes everything)."""
    try:
        scope = selector_of(incident.scope)
    except InfersightError:
        return True
    return all(getattr(scope, name) in (None, value) for name, value in selector.items())


def _overlaps(incident: Incident, ctx: Context) -> bool:
    ended = incident.resolved_at or ctx.now
    return incident.opened_at < ctx.window.end and ended >= ctx.window.start


def incident_list(app: AppContext, ctx: Context, state_filter: str) -> dict[str, Any]:
    # A viewer limited to tenants: the incidents of its SLOs (service.incidents).
    listed = list_incidents(
        app.store,
        state_filter,
        INCIDENT_LIMIT,
        tenants=ctx.tenants,
        keep=lambda i: _overlaps(i, ctx) and _in_scope(i, ctx.selector),
    )
    found = [i.incident for i in listed]
    rows = [{"incident": i.incident, **i.notes} for i in listed]
    bars = [
        svg.Bar(
            f"#{i.id} {i.slo}",
            max(i.opened_at, ctx.window.start),
            min(i.resolved_at or ctx.now, ctx.window.end),
            i.severity.value if i.phase == "firing" else i.phase,
            f"#{i.id} {i.slo} [{i.scope}] {i.severity.value}, {i.phase}; "
            f"peak burn {i.peak_burn_rate:.1f}×",
            f"incident-{i.id}",
        )
        for i in reversed(found)
    ]
    return {
        "rows": rows,
        "timeline": svg.timeline(bars, ctx.window.start, ctx.window.end, label="incidents"),
        "firing": sum(i.state is IncidentState.FIRING for i in found),
    }
