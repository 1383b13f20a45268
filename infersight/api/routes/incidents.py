"""``/api/v1/incidents`` (with their diagnosis), ``POST /api/v1/diagnose``, incident
acknowledgement and ``/api/v1/silences``.

An incident is answered with what ``service.incidents`` adds to its row: the symptom, the
headline diagnosis, its phase and acknowledgement; one incident with its diagnosis history and
burn-rate timeline as well. The paths incidents had before (``/api/v1/alerts…``) answer
``308 Permanent Redirect`` to their ``/api/v1/incidents…`` successor (query string kept, with
``Deprecation`` and ``Link: rel="successor-version"``); they are not in the OpenAPI document.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from infersight.api.auth import Scope
from infersight.api.deps import App, requires
from infersight.api.params import Id, Instant, KnownQueryRoute, TenantScope, instant
from infersight.core.errors import Forbidden, InvalidInput
from infersight.core.query import Selector
from infersight.core.records import MAX_LABEL_LEN as MAX_LABEL
from infersight.core.timestamps import iso
from infersight.core.window import Window
from infersight.service import incidents
from infersight.service.diagnosis import diagnose_window

router = APIRouter(prefix="/api/v1", route_class=KnownQueryRoute, tags=["incidents"])
_READ = [Depends(requires(Scope.READ))]
_ADMIN = [Depends(requires(Scope.ADMIN))]
MAX_DIAGNOSIS_WINDOW = timedelta(days=1)
STATES = list(incidents.STATES)
#: When ``/api/v1/alerts`` became ``/api/v1/incidents`` (the ``Deprecation`` header, RFC 9745).
ALERTS_DEPRECATED_AT: Final = datetime(2026, 12, 2, tzinfo=UTC)


@router.get("/incidents", dependencies=_READ, summary="Incidents, newest first")
def list_incidents(
    app: App,
    tenants: TenantScope,
    state: Annotated[
        str, Query(description="firing, resolved or all", json_schema_extra={"enum": STATES})
    ] = "firing",
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    # A token limited to tenants: the incidents of its SLOs alone. Symptom, diagnosis and
    # acknowledgement are stored by the diagnosis seam (service.diagnosis).
    found = incidents.list_incidents(app.store, state, limit, tenants=tenants)
    return {"incidents": [i.to_dict() for i in found]}


@router.get(
    "/incidents/{incident_id:int}",
    dependencies=_READ,
    summary="One incident with its diagnosis history and burn-rate timeline",
)
def get_incident(app: App, incident_id: Id, tenants: TenantScope) -> dict[str, Any]:
    incident = incidents.get_incident(app.store, incident_id)
    if not incidents.within(app.store, incident, tenants):
        raise Forbidden(
            f"this token is limited to tenants, and incident {incident_id}'s SLO covers other "
            "tenants (or every one)",
            details={"tenants": sorted(tenants or ())},
        )
    notes = incidents.annotate(app.store, [incident])
    return {
        **incidents.incident_dict(incident),
        **notes[incident.id],
        **incidents.history_of(app.store, incident.id),
    }


class DiagnoseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start: Instant
    end: Instant
    model: str | None = Field(None, max_length=MAX_LABEL)
    instance: str | None = Field(None, max_length=MAX_LABEL)
    tenant: str | None = Field(None, max_length=MAX_LABEL)
    priority: str | None = Field(None, max_length=MAX_LABEL)
    reference_start: Instant | None = Field(
        None, description="default: the same length before start"
    )
    reference_end: Instant | None = None


@router.post(
    "/diagnose",
    dependencies=_READ,
    summary="Diagnose any window (symptom → cause)",
    description="start must be before end and the window at most one day long; give both "
    "reference_start and reference_end or neither. A request that breaks these is answered 400.",
)
def post_diagnose(app: App, body: DiagnoseBody) -> dict[str, Any]:
    window = Window(instant("start", body.start), instant("end", body.end))
    if window.end - window.start > MAX_DIAGNOSIS_WINDOW:
        raise InvalidInput("a diagnosis window covers at most one day")
    reference = None
    if (body.reference_start is None) != (body.reference_end is None):
        raise InvalidInput("give both reference_start and reference_end, or neither")
    if body.reference_start is not None and body.reference_end is not None:
        reference = Window(
            instant("reference_start", body.reference_start),
            instant("reference_end", body.reference_end),
        )
    selector = Selector(body.model, body.instance, body.tenant, body.priority)
    result = diagnose_window(app.store, window, selector, app.rules, reference, app.aliases)
    reference = reference or window.preceding()
    return {
        **result.to_dict(),
        "window": {"start": iso(window.start), "end": iso(window.end)},
        "reference": {"start": iso(reference.start), "end": iso(reference.end)},
    }


class AckBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    by: str = Field("", max_length=128)


@router.post(
    "/incidents/{incident_id:int}/acknowledge",
    dependencies=_ADMIN,
    summary="Acknowledge an incident",
)
def acknowledge(app: App, incident_id: Id, body: AckBody | None = None) -> dict[str, Any]:
    note = incidents.acknowledge(app.store, incident_id, (body or AckBody()).by, app.clock())
    assert note.acknowledged_at is not None
    return {
        "id": incident_id,
        "acknowledged_at": iso(note.acknowledged_at),
        "acknowledged_by": note.acknowledged_by,
    }


class SilenceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    matchers: dict[str, str]
    ends_at: Instant | None = None
    duration_s: Annotated[float | None, Field(gt=0, le=90 * 86400)] = None
    starts_at: Instant | None = None
    created_by: str = Field("", max_length=128)
    comment: str = Field("", max_length=1024)


@router.post(
    "/silences",
    dependencies=_ADMIN,
    status_code=201,
    summary="Create a silence",
    description="Give ends_at or duration_s (not both); matchers name slo, severity, model, "
    "instance, tenant or priority, and the silence must end after it starts and within 90 "
    "days. A request that breaks these is answered 400.",
)
def create_silence(app: App, body: SilenceBody) -> dict[str, Any]:
    now: datetime = app.clock()
    starts = instant("starts_at", body.starts_at) if body.starts_at is not None else now
    if (body.ends_at is None) == (body.duration_s is None):
        raise InvalidInput("give ends_at or duration_s")
    ends = (
        instant("ends_at", body.ends_at)
        if body.ends_at is not None
        else starts + timedelta(seconds=body.duration_s or 0.0)
    )
    return incidents.add_silence(
        app.store,
        body.matchers,
        starts,
        ends,
        now,
        created_by=body.created_by,
        comment=body.comment,
    ).to_dict()


@router.get("/silences", dependencies=_READ, summary="Silences in force now")
def list_silences(app: App) -> dict[str, Any]:
    return {"silences": [s.to_dict() for s in incidents.active_silences(app.store, app.clock())]}


@router.delete(
    "/silences/{silence_id:int}", dependencies=_ADMIN, status_code=204, summary="End a silence"
)
def delete_silence(app: App, silence_id: Id) -> Response:
    incidents.end_silence(app.store, silence_id, app.clock())
    return Response(status_code=204)


# -- the paths incidents had before ----------------------------------------------------------


def _successor(request: Request) -> Response:
    """``308`` from ``/api/v1/alerts…`` to ``/api/v1/incidents…``, the query string kept."""
    new = "/api/v1/incidents" + request.url.path.removeprefix("/api/v1/alerts")
    location = f"{new}?{request.url.query}" if request.url.query else new
    return Response(
        status_code=308,
        headers={
            "Location": location,
            "Deprecation": f"@{int(ALERTS_DEPRECATED_AT.timestamp())}",
            "Link": f'<{new}>; rel="successor-version"',
        },
    )


for _old, _methods in (
    ("/alerts", ["GET"]),
    ("/alerts/{incident_id:int}", ["GET"]),
    ("/alerts/{incident_id:int}/acknowledge", ["POST"]),
):
    # A plain APIRoute: the redirect keeps whatever query it is given for its successor to judge.
    router.add_api_route(
        _old, _successor, methods=_methods, include_in_schema=False, route_class_override=APIRoute
    )
