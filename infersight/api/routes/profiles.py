"""``/api/v1/profiles``: profiles of serving processes, and the sidecars' side of them.

``POST /api/v1/profiles`` asks for one (an ``admin`` token: it makes a sidecar attach a
profiler to a production process) — ``instance``, ``seconds`` (1 … 60), ``rate`` (1 … 200 Hz;
the sidecar caps both to its own bounds) — and answers 202 with the pending profile; 409 while
one is open for the instance; with an ``incident_id``, 400 when there is no such incident and
409 unless its diagnosis names the same instance. ``GET /api/v1/profiles`` lists them (newest
first, by instance or incident) and ``GET /api/v1/profiles/{id}`` reads one: its state
(pending, running, done, failed), the summary (hottest frames folded by module and function,
the host-side limits' shares) or why there is none. ``DELETE /api/v1/profiles/{id}`` (admin)
cancels an open one. Reads fail the overdue ones first (``service.profiles``).

``POST /api/v1/ingest/profiles/claim`` and ``POST /api/v1/ingest/profiles/{id}`` are the
sidecar's (an ``ingest`` token, as central ingest's): claim the oldest pending request of an
instance (with a nonce), and hand back its summary or its reason with that instance and
nonce — a result for any other row, or without the nonce, is refused (409), and a malformed
summary is 400. The claim is not bound to a token: an ingest token may claim any instance's
requests (the sidecars share one token; a leaked ingest token can take a profile request
away from its sidecar, not forge another's result).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from infersight.api.auth import Scope
from infersight.api.deps import App, requires
from infersight.api.errors import responses
from infersight.api.params import Id, KnownQueryRoute
from infersight.core.errors import Conflict, InvalidInput
from infersight.core.profile import (
    DEFAULT_RATE,
    DEFAULT_SECONDS,
    MAX_RATE,
    MAX_SECONDS,
    MIN_RATE,
    MIN_SECONDS,
)
from infersight.core.records import MAX_LABEL_LEN as MAX_LABEL
from infersight.service import profiles as service
from infersight.service.profiles import cancel_profile, request_profile

router = APIRouter(prefix="/api/v1/profiles", route_class=KnownQueryRoute, tags=["profiles"])
ingest_router = APIRouter(
    prefix="/api/v1/ingest/profiles",
    dependencies=[Depends(requires(Scope.INGEST))],
    route_class=KnownQueryRoute,
    tags=["ingest"],
)
_READ = [Depends(requires(Scope.READ))]
_ADMIN = [Depends(requires(Scope.ADMIN))]


class ProfileBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: str = Field(min_length=1, max_length=MAX_LABEL)
    seconds: float = Field(DEFAULT_SECONDS, ge=MIN_SECONDS, le=MAX_SECONDS)
    rate: int = Field(DEFAULT_RATE, ge=MIN_RATE, le=MAX_RATE)
    incident_id: int | None = Field(None, ge=1)
    by: str = Field("", max_length=128, description="Who asks (shown with the profile).")


@router.post(
    "",
    dependencies=_ADMIN,
    status_code=202,
    summary="Ask the instance's sidecar for a profile of its serving process",
    description="Answered 202 with the pending profile; 409 while one is open for the"
    " instance. An incident_id must name a stored incident (400 otherwise, a rule no JSON"
    " Schema states) whose diagnosis names the same instance (409 otherwise).",
    responses=responses(400, 409),
)
def create_profile(app: App, body: ProfileBody) -> dict[str, Any]:
    profile = request_profile(
        app.store, body.instance, app.clock(), seconds=body.seconds, rate=body.rate,
        requested_by=body.by, incident_id=body.incident_id,
    )  # fmt: skip
    return profile.to_dict()


@router.get("", dependencies=_READ, summary="Profiles, newest first")
def list_profiles(
    app: App,
    instance: Annotated[str | None, Query(max_length=MAX_LABEL)] = None,
    incident_id: Annotated[int | None, Query(ge=1)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> dict[str, Any]:
    found = service.list_profiles(app.store, app.clock(), instance=instance,
                                  incident_id=incident_id, limit=limit)  # fmt: skip
    return {"profiles": [p.to_dict() for p in found]}


@router.get(
    "/{profile_id:int}", dependencies=_READ, summary="One profile", responses=responses(404)
)
def get_profile(app: App, profile_id: Id) -> dict[str, Any]:
    return service.get_profile(app.store, profile_id, app.clock()).to_dict()


@router.delete(
    "/{profile_id:int}",
    dependencies=_ADMIN,
    summary="Cancel an open profile",
    responses=responses(404, 409),
)
def delete_profile(app: App, profile_id: Id) -> dict[str, Any]:
    return cancel_profile(app.store, profile_id, app.clock()).to_dict()


class ClaimBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: str = Field(min_length=1, max_length=MAX_LABEL)


class ResultBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instance: str = Field(min_length=1, max_length=MAX_LABEL)
    nonce: str = Field(min_length=16, max_length=128, description="The claim's nonce.")
    result: dict[str, Any] | None = Field(
        None, description="The summary (core.profile.Summary); validated strictly."
    )
    error: str = Field("", max_length=1024)


@ingest_router.post("/claim", summary="A sidecar claims its instance's next profile request")
async def claim(app: App, body: ClaimBody) -> dict[str, Any]:
    got = await run_in_threadpool(service.claim_profile, app.store, body.instance, app.clock())
    return {"request": None if got is None else got.to_dict()}


@ingest_router.post(
    "/{profile_id:int}",
    summary="A sidecar hands back a profile's summary or why there is none",
    responses=responses(400, 409),
)
async def complete(app: App, profile_id: Id, body: ResultBody) -> dict[str, Any]:
    if body.result is None and not body.error:
        raise InvalidInput("a profile result needs a summary or an error")

    def run() -> bool:
        return service.complete_profile(app.store, profile_id, body.result, body.error,
                                        app.clock(), instance=body.instance,
                                        nonce=body.nonce)  # fmt: skip

    if not await run_in_threadpool(run):
        raise Conflict(
            f"profile {profile_id} is not running under a claim of {body.instance} with that "
            "nonce (finished, cancelled, expired, or never claimed by this sidecar)",
            details={"id": profile_id},
        )
    return {"stored": True}
