"""A token limited to several tenants reads their union, never more (issue 32).

Tenants A, B and C are stored on both stores over three hours (so answers are built from raw
edges and minute/hour rollups alike); C's requests are many and a hundred times slower, so any
of its data that leaked into an answer would move a count or a percentile. For every route a
scoped token may reach (``KnownQueryRoute.honours_tenants``; a new one fails this test until it
is covered here), the ``read@A|B`` token's answer equals the A∪B truth computed here from the
records: counts exactly, exact percentiles as numpy's, sketched ones as a sketch of the same
values, and C never named."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from infersight.api.params import KnownQueryRoute
from infersight.core.records import RequestRecord
from infersight.core.sketch import QuantileSketch
from infersight.core.timestamps import iso
from infersight.storage.writer import open_writer
from tests.api.conftest import ADMIN_TOKEN, Api
from tests.doubles import NOW
from tests.factories import make_records

UNION_TOKEN = "union-token-0123456789"
SINGLE_TOKEN = "single-token-0123456789"
TOKENS = f"admin:{ADMIN_TOKEN},read@A|B:{UNION_TOKEN},read@C:{SINGLE_TOKEN}"
START = NOW - timedelta(hours=3, minutes=7, seconds=13)  # not on a minute: raw edges
END = NOW - timedelta(minutes=2, seconds=41)
QS = (0.5, 0.9, 0.99)
#: The routes this test reads with a scoped token (every one that honours the scope).
COVERED = {
    "/api/v1/latency",
    "/api/v1/throughput",
    "/api/v1/breakdown",
    "/api/v1/baselines/{name}/compare",
}


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.fixture
def api(make_api: Callable[..., Api]) -> Api:
    return make_api(api_tokens=TOKENS)


@pytest.fixture
def records(store) -> list[RequestRecord]:
    rng = np.random.default_rng(32)
    span = timedelta(hours=3, minutes=30)
    ab = make_records(rng, NOW - span, 1500, span=span, tenants=("A", "B"))
    c = [
        replace(r, tenant="C", ttft_s=r.ttft_s * 100, e2e_s=r.e2e_s * 100)
        for r in make_records(rng, NOW - span, 3000, span=span, tenants=("C",))
    ]
    rows = ab + c
    open_writer(store.engine).write_requests(rows)
    return rows


def _picked(records: list[RequestRecord], tenants: set[str]) -> list[RequestRecord]:
    return [r for r in records if r.tenant in tenants and START <= r.start < END]


def _window() -> dict[str, str]:
    return {"start": iso(START), "end": iso(END)}


def test_every_route_a_scoped_token_may_reach_is_covered(api: Api) -> None:
    def walk(routes: list[Any]) -> Iterator[Any]:
        for route in routes:
            included = getattr(route, "original_router", None)  # FastAPI's included router
            yield from walk(included.routes) if included is not None else (route,)

    scoped = {
        route.path
        for route in walk(api.app.routes)
        if isinstance(route, KnownQueryRoute) and route.honours_tenants
    }
    assert scoped == COVERED, "a route that honours tenant scopes needs its no-leak check here"


def test_a_token_of_several_tenants_reads_their_union_and_nothing_else(
    api: Api, records: list[RequestRecord]
) -> None:
    union = bearer(UNION_TOKEN)
    truth = _picked(records, {"A", "B"})
    assert truth
    assert len(_picked(records, {"C"})) > len(truth)  # C would show if it leaked

    # Throughput: one group (the union) and per tenant.
    body = api.get("/api/v1/throughput", params=_window(), headers=union).json()
    assert [g["requests"] for g in body["groups"]] == [len(truth)]
    assert body["groups"][0]["output_tokens"] == sum(r.output_tokens or 0 for r in truth)
    per = api.get(
        "/api/v1/throughput", params={**_window(), "group_by": "tenant"}, headers=union
    ).json()
    assert {g["labels"]["tenant"]: g["requests"] for g in per["groups"]} == {
        t: len(_picked(records, {t})) for t in ("A", "B")
    }

    # Latency, exact and sketched, over the union and per tenant.
    ttft = np.array([r.ttft_s for r in truth])
    exact = api.get(
        "/api/v1/latency",
        params={**_window(), "metric": "ttft", "method": "exact", "quantiles": "0.5,0.9,0.99"},
        headers=union,
    ).json()
    (group,) = exact["groups"]
    assert group["count"] == len(truth)
    for q, value in zip(QS, np.quantile(ttft, QS), strict=True):
        assert group["quantiles"][str(q)] == pytest.approx(value, rel=1e-9)
    sketched = api.get(
        "/api/v1/latency",
        params={**_window(), "metric": "ttft", "method": "sketch", "quantiles": "0.5,0.9,0.99"},
        headers=union,
    ).json()
    (group,) = sketched["groups"]
    assert group["count"] == len(truth)
    expected = QuantileSketch.of(ttft)
    for q in QS:
        assert group["quantiles"][str(q)] == pytest.approx(expected.quantile(q), rel=1e-9)
    by_tenant = api.get(
        "/api/v1/latency",
        params={**_window(), "metric": "e2e", "group_by": "tenant,model", "method": "sketch"},
        headers=union,
    ).json()
    assert {g["labels"]["tenant"] for g in by_tenant["groups"]} == {"A", "B"}
    assert sum(g["count"] for g in by_tenant["groups"]) == len(truth)

    # Breakdown: the union's requests and end-to-end seconds.
    rows = api.get("/api/v1/breakdown", params=_window(), headers=union).json()["groups"]
    assert [g["requests"] for g in rows] == [len(truth)]
    assert rows[0]["e2e_seconds_total"] == pytest.approx(sum(r.e2e_s or 0 for r in truth))

    # A baseline comparison: the window side is the union's.
    captured = api.request(
        "POST",
        "/api/v1/baselines",
        json={"name": "a-only", "tenant": "A", **_window()},
        headers=bearer(ADMIN_TOKEN),
    )
    assert captured.status_code in (200, 201), captured.text
    compared = api.get("/api/v1/baselines/a-only/compare", params=_window(), headers=union)
    assert compared.status_code == 200, compared.text
    assert "C" not in {m.get("tenant") for m in [compared.json().get("labels", {})]}

    # Naming a tenant still narrows to it; one outside the scope is refused.
    one = api.get("/api/v1/throughput", params={**_window(), "tenant": "B"}, headers=union)
    assert [g["requests"] for g in one.json()["groups"]] == [len(_picked(records, {"B"}))]
    for path in ("/api/v1/latency", "/api/v1/throughput", "/api/v1/breakdown"):
        refused = api.get(path, params={**_window(), "tenant": "C"}, headers=union)
        assert refused.status_code == 403, path


def test_a_baseline_outside_the_scope_is_not_compared(api: Api, records) -> None:
    admin = bearer(ADMIN_TOKEN)
    for name, tenant in (("every", None), ("c-only", "C")):
        body: dict[str, Any] = {"name": name, **_window()}
        if tenant:
            body["tenant"] = tenant
        assert api.request("POST", "/api/v1/baselines", json=body, headers=admin).is_success
        refused = api.get(
            f"/api/v1/baselines/{name}/compare", params=_window(), headers=bearer(UNION_TOKEN)
        )
        assert refused.status_code == 403, name
        assert "tenant" in refused.json()["error"]["message"]
    assert api.get(
        "/api/v1/baselines/c-only/compare", params=_window(), headers=bearer(SINGLE_TOKEN)
    ).is_success
