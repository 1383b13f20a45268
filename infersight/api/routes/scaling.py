"""``/api/v1/scaling``: the replica recommender's newest recommendation per model, and the
KEDA ``metrics-api`` endpoint a ``ScaledObject`` polls.

``GET /api/v1/scaling`` lists every model's observed and desired instances, the predicted
demand, the input that drove the decision and its reason, and how old it is (``staleness_s``);
a disaggregated model is listed once per pool (``pool``: ``prefill``, ``decode``; "" for a
model served whole). ``GET /api/v1/scaling/keda/{model}`` answers ``{"desiredReplicas": N}`` for
a ``metricType: AverageValue`` trigger (target 1); for a disaggregated model ``?pool=prefill``
or ``?pool=decode`` picks the pool (each pool's Deployment has its own ScaledObject), and a
request without it is answered 400 naming the pools. It never answers a missing or stale
input with a number: a recommendation made with a stale or missing demand, or that no input
sized (no capacity and nothing running hot), or older than the policy's ``stale_after_s``, or
none yet is answered 503 ``unavailable`` (KEDA then applies the ScaledObject's ``fallback``),
an unknown model 404; each refusal is counted in ``infersight_scaling_keda_refusals_total{reason}``
on ``/metrics``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query

from infersight.api.auth import Scope
from infersight.api.deps import App, requires
from infersight.api.errors import responses
from infersight.api.params import KnownQueryRoute
from infersight.core.errors import InvalidInput, NotFound, Unavailable
from infersight.service.scaling import current, current_for

router = APIRouter(
    prefix="/api/v1/scaling",
    dependencies=[Depends(requires(Scope.READ))],
    route_class=KnownQueryRoute,
    tags=["scaling"],
)
Model = Annotated[str, Path(min_length=1, max_length=256)]
Pool = Annotated[
    str | None,
    Query(
        pattern="^(prefill|decode)$",
        description="the pool of a disaggregated model (required for one; ignored otherwise)",
    ),
]


@router.get(
    "",
    summary="The newest replica recommendation of every model (per pool)",
    description="Per model (per pool of a disaggregated model: pool is prefill or decode, "
    "empty for a model served whole): observed and desired instances, the predictive and "
    "reactive "
    "sizes, the predicted demand (req/s over the lead time), the driver and reason of the "
    "decision, the stale inputs, and staleness_s (the recommendation's age). usable is false "
    "(with refusal saying why) where the KEDA endpoint would refuse it.",
)
def scaling(app: App) -> dict[str, Any]:
    return {"models": [c.to_dict() for c in current(app.store, app.clock())]}


@router.get(
    "/keda/{model}",
    summary="Desired replicas of one model for KEDA's metrics-api scaler",
    description='Answers {"desiredReplicas": N} (use metricType: AverageValue, targetValue: '
    '"1" and valueLocation: desiredReplicas). A recommendation made with a stale or missing '
    "demand, one that no input sized, an old one, or none yet is answered 503 (never 0), so "
    "that KEDA's fallback applies; an unknown model 404. A disaggregated model needs "
    "pool=prefill or pool=decode (400 naming its pools without it). Refusals are counted on "
    "/metrics.",
    responses={**responses(400, 404), 503: {"description": "No usable recommendation"}},
)
def keda(app: App, model: Model, pool: Pool = None) -> dict[str, Any]:
    try:
        found = current_for(app.store, model, app.clock(), pool)
    except InvalidInput:
        app.keda_refusals.add("pool_required")
        raise
    except NotFound:
        app.keda_refusals.add("unknown_model")
        raise
    except Unavailable:
        app.keda_refusals.add("no_recommendation")
        raise
    if found.refusal is not None:
        rec = found.recommendation
        app.keda_refusals.add(
            "stale_inputs"
            if found.refusal.startswith("stale")
            else "no_basis"
            if found.refusal.startswith("no input")
            else "old_recommendation"
        )
        raise Unavailable(
            f"no usable recommendation for {model!r}"
            f"{f' ({rec.pool} pool)' if rec.pool else ''}: {found.refusal}",
            details={
                "model": model,
                "pool": rec.pool,
                "stale_inputs": list(rec.stale),
                "age_s": found.age_s,
            },
        )
    return {
        "desiredReplicas": found.recommendation.desired,
        "model": model,
        "pool": found.recommendation.pool,
        "driver": found.recommendation.driver,
        "staleness_s": round(found.age_s, 3),
    }
