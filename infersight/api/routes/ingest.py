"""``/api/v1/ingest``: central ingest, where sidecars ship instead of to the database.

``POST /api/v1/ingest`` takes one batch of one kind in the wire format of ``core.wire``
(``Content-Type: application/vnd.infersight.batch`` or ``application/octet-stream``, optionally
``Content-Encoding: gzip``; the raw body is bounded by the API's ``max_body_bytes``, the
inflated one by ``core.wire.MAX_INFLATED_BYTES``), validates every entry as the sidecar's
receivers do, and writes the batch through the store writer (``service.ingest``) in one
transaction. It answers 200 only after that transaction committed, so a sidecar deletes from
its spool only what is durable; the writer ignores keys it already has (requests and client
records by span, samples by time, instance and GPU or engine rank), so a batch replayed after a
lost answer is stored once. A malformed batch is 400 and nothing of it is stored; a store that
is down is 503.

A batch of late parallel-sampling sequences (``WireKind.SEQUENCE``) is folded into the
stored requests by the writer's ``fold_sequences``, exactly as a sidecar writing to the store
folds them: in one transaction, each sequence once (a replay is counted as duplicates).
``POST /api/v1/ingest/folded`` (a JSON body ``{"keys": [[trace id, span id], ...]}``, at most
``MAX_FOLDED_KEYS``, no other member) answers which of those sequences were folded already: a
sidecar that restarted asks before shipping what it had spooled before
(``service.ingest.folded``).

``GET /api/v1/ingest/ping`` is the sidecar's probe: one ``SELECT 1`` on the store.

Both require a token of the ``ingest`` scope (``api.auth``): a sidecar's token may only ship,
and a read or admin token cannot ship. The batch goes to the store's ingest concern
(``storage.seam.IngestStore``), behind which another store backend plugs in.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from infersight.api.auth import Scope
from infersight.api.deps import App, requires
from infersight.api.errors import responses
from infersight.api.params import KnownQueryRoute
from infersight.core.errors import InvalidInput
from infersight.core.records import check_ids
from infersight.core.wire import MEDIA_TYPE
from infersight.service import ingest as central

#: Also accepted (and what the OpenAPI document names): the batch's magic says what it is.
_OCTETS = "application/octet-stream"
#: The most keys one ``/folded`` question may hold (the shipper's batches are 2,000).
MAX_FOLDED_KEYS: Final = 20_000

router = APIRouter(
    prefix="/api/v1/ingest",
    dependencies=[Depends(requires(Scope.INGEST))],
    route_class=KnownQueryRoute,
    tags=["ingest"],
)


@router.post(
    "",
    summary="Store one batch shipped by a sidecar (ingest token)",
    responses=responses(400, 413),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {_OCTETS: {"schema": {"type": "string", "format": "binary"}}},
        }
    },
)
async def ingest(request: Request, app: App) -> dict[str, Any]:
    """Answers after the batch's transaction committed; a replay stores nothing twice."""
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media not in (MEDIA_TYPE, _OCTETS):
        raise InvalidInput(f"the body must be {MEDIA_TYPE}", details={"content_type": media})
    body = await request.body()
    encoding = request.headers.get("content-encoding", "").strip().lower()
    return await run_in_threadpool(
        central.store_batch, app.store, body, encoding, app.retention.raw_days, app.clock
    )


def _keys(value: Any) -> list[tuple[str, str]]:
    """The (trace id, span id) keys of a ``/folded`` question, checked."""
    keys = value.get("keys") if isinstance(value, dict) else None
    if not isinstance(keys, list) or len(value) != 1:
        raise InvalidInput('the body must be {"keys": [[trace id, span id], ...]} alone')
    if len(keys) > MAX_FOLDED_KEYS:
        raise InvalidInput(f"at most {MAX_FOLDED_KEYS} keys per question")
    out: list[tuple[str, str]] = []
    for index, key in enumerate(keys):
        if not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key)):
            raise InvalidInput(f"key {index} must be [trace id, span id]", details={"key": index})
        check_ids(key[0], key[1])
        out.append((key[0], key[1]))
    return out


@router.post(
    "/folded",
    summary="Which sequences were folded into stored requests already (ingest token)",
    responses=responses(400),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["keys"],
                        "additionalProperties": False,
                        "properties": {
                            "keys": {
                                "type": "array",
                                "maxItems": MAX_FOLDED_KEYS,
                                "items": {
                                    "type": "array",
                                    "prefixItems": [
                                        {"type": "string", "pattern": "^[0-9a-f]{32}$"},
                                        {"type": "string", "pattern": "^[0-9a-f]{16}$"},
                                    ],
                                    "items": {"type": "string"},
                                    "minItems": 2,
                                    "maxItems": 2,
                                    "description": "[trace id, span id]: 32 and 16 "
                                    "lowercase hex digits, neither all zero",
                                },
                            }
                        },
                    }
                }
            },
        }
    },
)
async def folded(request: Request, app: App) -> dict[str, list[list[str]]]:
    """A restarted sidecar's question before it ships records spooled before its restart."""
    try:
        keys = _keys(json.loads(await request.body()))
    except ValueError:
        raise InvalidInput("the body must be JSON") from None
    done = await run_in_threadpool(
        central.folded, app.store, keys, app.retention.raw_days, app.clock
    )
    return {"folded": sorted([t, s] for t, s in done)}


@router.get("/ping", summary="The sidecar's probe: one round trip to the store (ingest token)")
async def ping(app: App) -> dict[str, bool]:
    await run_in_threadpool(central.ping, app.store, app.retention.raw_days, app.clock)
    return {"ok": True}
