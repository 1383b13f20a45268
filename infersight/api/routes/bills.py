"""Reconciliation with the cloud bill (``service.reconcile``): FOCUS imports and the drift.

``GET /api/v1/cost/reconciliation?start=&end=`` (or ``range``, default the 7 days that end
now; ``basis=billed|effective``) answers billed vs modelled cost per UTC day and instance, the
drift, the unmatched lines both ways, the other charges and the effective price per GPU-hour
the bill implies. ``POST /api/v1/cost/bills?name=&key=`` (admin) imports a FOCUS export sent
as the body (CSV, gzip CSV or Parquet, at most the API's body limit: larger files through
``infersight cost import-bill``), all or nothing; ``GET /api/v1/cost/bills`` lists imports,
``DELETE /api/v1/cost/bills/{id}`` (admin) forgets one. ``POST
/api/v1/cost/model/billed-price`` (admin) writes the effective prices into the cost model in
use as per-instance prices, as ``infersight cost use-billed-price`` does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from infersight.api.auth import Scope
from infersight.api.deps import App, requires
from infersight.api.errors import responses
from infersight.api.params import (
    RANGE_PATTERN,
    TIME_PATTERN,
    WINDOW_RULES,
    Id,
    KnownQueryRoute,
    window_of,
)
from infersight.core.errors import InvalidInput
from infersight.core.focus import DEFAULT_KEYS, FOCUS_VERSION, BillMapping
from infersight.core.timestamps import TIME_HELP
from infersight.service import reconcile as rec
from infersight.service.cost_spec import to_document

DEFAULT_RANGE: Final = "7d"
router = APIRouter(prefix="/api/v1", route_class=KnownQueryRoute, tags=["cost"])
_READ = [Depends(requires(Scope.READ))]
_ADMIN = [Depends(requires(Scope.ADMIN))]

Start = Annotated[str | None, Query(pattern=TIME_PATTERN, description=TIME_HELP)]
End = Annotated[str | None, Query(pattern=TIME_PATTERN, description=f"{TIME_HELP} (default: now)")]
Range = Annotated[
    str | None,
    Query(
        alias="range",
        pattern=RANGE_PATTERN,
        description=f"the range that ends now (default {DEFAULT_RANGE}); not with start/end",
    ),
]
Basis = Annotated[
    str,
    Query(
        pattern="^(billed|effective)$",
        description="compare BilledCost (the invoice) or EffectiveCost (amortised)",
    ),
]


def _window(app: App, start: str | None, end: str | None, range_: str | None) -> Any:
    if not (start or end or range_):
        range_ = DEFAULT_RANGE
    return window_of(app, app.clock(), start, end, range_)


@router.get(
    "/cost/reconciliation",
    summary="Billed (FOCUS export) vs modelled cost per day and instance, and the drift",
    description=WINDOW_RULES
    + f" Default range {DEFAULT_RANGE}; at most {rec.MAX_DAYS} UTC days. Per day and instance:"
    " billed (the Usage charges the imported bills name the instance for), modelled (the cost"
    " model's figure for the same instance-day), drift (billed − modelled) and drift_pct,"
    " gpu_hours measured and billed_per_gpu_hour (the effective price). unmatched lists"
    " charges for resources infersight never saw (billed_not_seen) and instance-days a bill"
    " covers with no charge for them (seen_not_billed); other_charges totals purchases,"
    " taxes, credits and adjustments, which are not compared. Money is a decimal string"
    " with six places in currency.",
    dependencies=_READ,
)
def get_reconciliation(
    app: App,
    start: Start = None,
    end: End = None,
    range_: Range = None,
    basis: Basis = "billed",
) -> dict[str, Any]:
    window = _window(app, start, end, range_)
    now = app.clock()
    result = rec.reconcile(
        app.store,
        app.cost_model(),
        window.start,
        window.end,
        basis=basis,
        finest_for=lambda w: app.retention.finest_for(w, now),
    )
    return result.as_dict()


@router.get("/cost/bills", summary="Imported cloud bills (FOCUS), newest first", dependencies=_READ)
def list_bills(app: App) -> dict[str, Any]:
    return {"bills": [rec.import_dict(i) for i in rec.list_imports(app.store)]}


@router.post(
    "/cost/bills",
    summary="Import a cloud bill: a FOCUS export (CSV, gzip CSV or Parquet) (admin)",
    description=f"The body is the file (FOCUS {FOCUS_VERSION} columns), at most the API's body"
    " limit (infersight cost import-bill reads larger files). `key` (repeatable) says where a"
    " line names its instance, tried in order: ResourceId, ResourceName or tag:KEY (default "
    + ", ".join(DEFAULT_KEYS)
    + "). All or nothing: an empty body, or a row that cannot be read, refuses the file (400,"
    " each problem with its row and column); a file imported before is 409.",
    dependencies=_ADMIN,
    responses=responses(409),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                media: {"schema": {"type": "string", "format": "binary"}}
                for media in ("text/csv", "application/gzip", "application/vnd.apache.parquet")
            },
        }
    },
)
async def import_bill(
    request: Request,
    app: App,
    name: Annotated[str, Query(min_length=1, max_length=256, description="the file's name")] = (
        "upload"
    ),
    key: Annotated[list[str] | None, Query(max_length=300)] = None,
) -> dict[str, Any]:
    data = await request.body()
    if not data:
        raise InvalidInput("send the FOCUS file as the request body")
    mapping = BillMapping(tuple(key)) if key else BillMapping()
    now: datetime = app.clock()
    imported = await run_in_threadpool(rec.import_bytes, app.store, data, name, mapping, now)
    return imported.as_dict()


@router.delete(
    "/cost/bills/{bill_id:int}",
    summary="Forget an imported bill and its lines (admin)",
    dependencies=_ADMIN,
    responses=responses(404),
)
def delete_bill(app: App, bill_id: Id) -> dict[str, Any]:
    return {"id": bill_id, "lines_deleted": rec.delete_import(app.store, bill_id)}


@router.post(
    "/cost/model/billed-price",
    summary="Use the prices the bill implies in the cost model in use (admin)",
    description=WINDOW_RULES
    + " Each reconciled instance's billed_per_gpu_hour over the range becomes its"
    " instancePrices entry (onDemandPerHour) in the cost model in use, stored as a new version"
    " of it; `instance` (repeatable) limits it to these. `dry_run=true` answers the document"
    " without storing it.",
    dependencies=_ADMIN,
)
def use_billed_price(
    app: App,
    start: Start = None,
    end: End = None,
    range_: Range = None,
    basis: Basis = "billed",
    instance: Annotated[list[str] | None, Query(max_length=256)] = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    window = _window(app, start, end, range_)
    model, prices = rec.use_billed_price(
        app.store,
        app.cost_model(),
        window.start,
        window.end,
        app.clock(),
        instances=instance,
        basis=basis,
        dry_run=dry_run,
    )
    return {
        "stored": not dry_run,
        "prices": {k: str(v) for k, v in sorted(prices.items())},
        "document": to_document(model),
    }
