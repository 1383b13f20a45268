"""``/api/v1/alerts`` (incidents, with their diagnosis), ``POST /api/v1/diagnose``, incident
acknowledgement and ``/api/v1/silences``.

An incident is answered with what ``service.incidents`` adds to its row: the symptom, the
headline diagnosis, its phase and acknowledgement; one incident with its diagnosis history and
burn-rate timeline as well.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from api.auth import Scope, requires
from api.params import TIME_PATTERN, Id
from core.errors import InvalidInput
from core.query import Selector
from core.records import MAX_LABEL_LEN as MAX_LABEL
from core.timestamps import TIME_HELP, iso, parse_time
from core.window import Window
from service.diagnosis import diagnose_window
from service.incidents import annotate, history_of, incident_dict
from storage import incidents, signals
from storage import silences as silence_store

router = APIRouter(prefix="/api/v1")
_READ = [Depends(requires(Scope.READ))]
_ADMIN = [Depends(requires(Scope.ADMIN))]
MAX_DIAGNOSIS_WINDOW = timedelta(days=1)
STATES = list(incidents.STATES)


@router.get("/alerts", dependencies=_READ, summary="Incidents, newest first")
def alerts(
    request: Request,
    state: Annotated[
        str, Query(description="firing, resolved or all", json_schema_extra={"enum": STATES})
    ] = "firing",
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> dict[str, Any]:
    found = incidents.list_incidents(request.app.state.engine, state, limit)
    # symptom, diagnosis and acknowledgement are stored by the diagnosis seam (service.diagnosis).
    notes = annotate(request.app.state.engine, found)
    return {"alerts": [{**incident_dict(i), **notes[i.id]} for i in found]}


@router.get(
    "/alerts/{incident_id:int}",
    dependencies=_READ,
    summary="One incident with its diagnosis history and burn-rate timeline",
)
def alert(request: Request, incident_id: Id) -> dict[str, Any]:
    engine = request.app.state.engine
    incident = incidents.get_incident(engine, incident_id)
    notes = annotate(engine, [incident])
    return {
        **incident_dict(incident),
        **notes[incident.id],
        **history_of(engine, incident.id),
    }


class DiagnoseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start: str = Field(pattern=TIME_PATTERN, description=TIME_HELP)
    end: str = Field(pattern=TIME_PATTERN, description=TIME_HELP)
    model: str | None = Field(None, max_length=MAX_LABEL)
    instance: str | None = Field(None, max_length=MAX_LABEL)
    tenant: str | None = Field(None, max_length=MAX_LABEL)
    priority: str | None = Field(None, max_length=MAX_LABEL)
    reference_start: str | None = Field(
        None, pattern=TIME_PATTERN, description="default: the same length before start"
    )
    reference_end: str | None = Field(None, pattern=TIME_PATTERN)


@router.post(
    "/diagnose",
    dependencies=_READ,
    summary="Diagnose any window (symptom → cause)",
    description="start must be before end and the window at most one day long; give both "
    "reference_start and reference_end or neither. A request that breaks these is answered 400.",
)
def post_diagnose(request: Request, body: DiagnoseBody) -> dict[str, Any]:
    window = Window(parse_time("start", body.start), parse_time("end", body.end))
    if window.end - window.start > MAX_DIAGNOSIS_WINDOW:
        raise InvalidInput("a diagnosis window covers at most one day")
    reference = None
    if (body.reference_start is None) != (body.reference_end is None):
        raise InvalidInput("give both reference_start and reference_end, or neither")
    if body.reference_start is not None and body.reference_end is not None:
        reference = Window(
            parse_time("reference_start", body.reference_start),
            parse_time("reference_end", body.reference_end),
        )
    selector = Selector(body.model, body.instance, body.tenant, body.priority)
    state = request.app.state
    result = diagnose_window(state.engine, window, selector, state.rules, reference)
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
    "/alerts/{incident_id:int}/acknowledge",
    dependencies=_ADMIN,
    summary="Acknowledge an incident",
)
def acknowledge(request: Request, incident_id: Id, body: AckBody | None = None) -> dict[str, Any]:
    state = request.app.state
    note = signals.acknowledge(state.engine, incident_id, (body or AckBody()).by, state.clock())
    assert note.acknowledged_at is not None
    return {
        "id": incident_id,
        "acknowledged_at": iso(note.acknowledged_at),
        "acknowledged_by": note.acknowledged_by,
    }


class SilenceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    matchers: dict[str, str]
    ends_at: str | None = Field(None, pattern=TIME_PATTERN, description=TIME_HELP)
    duration_s: Annotated[float | None, Field(gt=0, le=90 * 86400)] = None
    starts_at: str | None = Field(None, pattern=TIME_PATTERN, description=TIME_HELP)
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
def create_silence(request: Request, body: SilenceBody) -> dict[str, Any]:
    now: datetime = request.app.state.clock()
    starts = parse_time("starts_at", body.starts_at) if body.starts_at else now
    if (body.ends_at is None) == (body.duration_s is None):
        raise InvalidInput("give ends_at or duration_s")
    ends = (
        parse_time("ends_at", body.ends_at)
        if body.ends_at
        else starts + timedelta(seconds=body.duration_s or 0.0)
    )
    new = silence_store.NewSilence(body.matchers, starts, ends, body.created_by, body.comment)
    return silence_store.add(request.app.state.engine, new, now).to_dict()


@router.get("/silences", dependencies=_READ, summary="Silences in force now")
def list_silences(request: Request) -> dict[str, Any]:
    state = request.app.state
    return {"silences": [s.to_dict() for s in silence_store.active(state.engine, state.clock())]}


@router.delete(
    "/silences/{silence_id:int}", dependencies=_ADMIN, status_code=204, summary="End a silence"
)
def delete_silence(request: Request, silence_id: Id) -> Response:
    state = request.app.state
    silence_store.expire(state.engine, silence_id, state.clock())
    return Response(status_code=204)
