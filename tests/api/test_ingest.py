"""Central ingest (``POST /api/v1/ingest``): a batch is stored once, whatever the replays, only
for an ingest token, and a bad body stores nothing (both stores)."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text

from infersight.core.attribution import Attribution
from infersight.core.client import ClientRecord
from infersight.core.samples import EngineSample, GpuSample, ServerSample
from infersight.core.wire import MEDIA_TYPE, WireKind, decode_batch, encode_batch
from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN, Api
from tests.conftest import Store
from tests.doubles import NOW
from tests.factories import make_records

INGEST_TOKEN = "ingest-token-0123456789"
TOKENS = f"read:{READ_TOKEN},admin:{ADMIN_TOKEN},ingest:{INGEST_TOKEN}"
T0 = NOW - timedelta(hours=1)


def _post(api: Api, body: bytes, token: str | None = INGEST_TOKEN, **headers: str) -> Any:
    sent = {"Content-Type": MEDIA_TYPE, **headers}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    return api.request("POST", "/api/v1/ingest", content=body, headers=sent)


def _count(store: Store, table: str) -> int:
    with store.engine.connect() as connection:
        return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api(api_tokens=TOKENS)


def _batches() -> dict[WireKind, list[Any]]:
    records = make_records(np.random.default_rng(7), T0, 300, span=timedelta(minutes=30))
    clients = [
        ClientRecord(f"{n + 1:032x}", f"{n + 1:016x}", T0, model="m", e2e_s=1.0) for n in range(5)
    ]
    gpus = [
        GpuSample(ts=T0 + timedelta(seconds=s), instance="node-1", gpu_index=0, power_w=300.0)
        for s in range(10)
    ]
    engines = (EngineSample(rank="0", requests_running=1.0),)
    servers = [
        ServerSample(
            ts=T0 + timedelta(seconds=s),
            instance="node-1",
            engine="vllm",
            requests_running=3.0,
            per_engine=engines,
        )
        for s in range(10)
    ]
    return {
        WireKind.RECORD: records,
        WireKind.CLIENT: clients,
        WireKind.GPU: gpus,
        WireKind.SERVER: servers,
    }


TABLES = {
    WireKind.RECORD: "requests",
    WireKind.CLIENT: "client_requests",
    WireKind.GPU: "gpu_samples",
    WireKind.SERVER: "server_samples",
}


def test_the_wire_round_trips_every_kind_exactly() -> None:
    for kind, items in _batches().items():
        assert decode_batch(encode_batch(kind, items)) == (kind, items)


@pytest.mark.parametrize("kind", list(TABLES), ids=lambda k: k.name.lower())
def test_a_batch_is_stored_once_however_often_it_is_replayed(
    api: Api, store: Store, kind: WireKind
) -> None:
    items = _batches()[kind]
    body = gzip.compress(encode_batch(kind, items))
    first = _post(api, body, **{"Content-Encoding": "gzip"})
    assert first.status_code == 200, first.text
    assert _count(store, TABLES[kind]) == len(items)
    for _ in range(2):  # the answer was lost: the sidecar sends the same batch again
        again = _post(api, body, **{"Content-Encoding": "gzip"})
        assert again.status_code == 200, again.text
    assert _count(store, TABLES[kind]) == len(items)
    answer = again.json()
    if kind in (WireKind.RECORD, WireKind.CLIENT):
        assert answer["inserted"] == 0
        assert answer["duplicates"] == len(items)
    else:
        assert answer["stored"] == 0
    if kind is WireKind.SERVER:
        assert _count(store, "server_engine_samples") == len(items)


def test_records_read_back_exactly(api: Api, store: Store) -> None:
    records = _batches()[WireKind.RECORD]
    assert _post(api, encode_batch(WireKind.RECORD, records)).status_code == 200
    with store.engine.connect() as connection:
        rows = connection.execute(text("SELECT span_id, ttft_s, output_tokens FROM requests"))
        stored = {row.span_id: (row.ttft_s, row.output_tokens) for row in rows}
    assert stored == {r.span_id: (r.ttft_s, r.output_tokens) for r in records}


@pytest.mark.parametrize(
    ("token", "status"),
    [(None, 401), ("not-a-token-0123456789", 401), (READ_TOKEN, 403), (ADMIN_TOKEN, 403)],
    ids=["missing", "unknown", "read", "admin"],
)
def test_only_an_ingest_token_ships(api: Api, store: Store, token: str | None, status: int) -> None:
    body = encode_batch(WireKind.RECORD, _batches()[WireKind.RECORD])
    answer = _post(api, body, token=token)
    assert answer.status_code == status, answer.text
    assert api.get("/api/v1/ingest/ping", headers=_bearer(token)).status_code == status
    assert _count(store, "requests") == 0


def _bearer(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


def test_an_ingest_token_reads_nothing(api: Api) -> None:
    assert api.get("/api/v1/ingest/ping", headers=_bearer(INGEST_TOKEN)).json() == {"ok": True}
    answer = api.get("/api/v1/slos", headers=_bearer(INGEST_TOKEN))
    assert answer.status_code == 403


def test_a_bad_batch_stores_nothing(api: Api, store: Store) -> None:
    records = _batches()[WireKind.RECORD]
    good = encode_batch(WireKind.RECORD, records)
    bad = good.replace(b'"vllm"', b'"nope"', 1)  # one entry with an unknown engine
    cases = {
        "bad entry": (bad, {}),
        "truncated": (good[:-10], {}),
        "trailing bytes": (good + b"x", {}),
        "not a batch": (b"hello world, not a batch", {}),
        "bad gzip": (b"\x1f\x8bnot gzip", {"Content-Encoding": "gzip"}),
        "other encoding": (good, {"Content-Encoding": "br"}),
    }
    for name, (body, headers) in cases.items():
        answer = _post(api, body, **headers)
        assert answer.status_code == 400, (name, answer.text)
        assert answer.json()["error"]["code"] == "invalid_input", name
    wrong_type = _post(api, good, **{"Content-Type": "application/json"})
    assert wrong_type.status_code == 400
    assert _count(store, "requests") == 0


def test_an_attribution_with_a_control_character_is_refused_and_stores_nothing(
    api: Api, store: Store
) -> None:
    """Kind 7 from a hostile or broken sidecar: a NUL in a tenant is refused (400) before the
    store sees it (PostgreSQL would fail the insert: 500, retried by the sidecar for ever)."""
    good = Attribution("a" * 32, "b" * 16, T0, 1.0, tenant="acme12", source="litellm")
    body = encode_batch(WireKind.ATTRIBUTION, [good])
    answer = _post(api, body.replace(b'"acme12"', b'"\\u0000"', 1))  # the same length
    assert answer.status_code == 400, answer.text
    assert "control characters" in answer.json()["error"]["message"]
    assert _count(store, "trace_attributions") == 0
    assert _post(api, body).status_code == 200
    assert _count(store, "trace_attributions") == 1


def test_a_body_that_inflates_too_far_is_refused(api: Api, store: Store) -> None:
    bomb = gzip.compress(b"\0" * (65 * 1024 * 1024))
    answer = _post(api, bomb, **{"Content-Encoding": "gzip"})
    assert answer.status_code == 413, answer.text
    assert _count(store, "requests") == 0
