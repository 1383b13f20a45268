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
from decimal import Decimal
from typing import Any

import numpy as np
import pytest

from infersight.api.params import KnownQueryRoute
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample
from infersight.core.sketch import QuantileSketch
from infersight.core.timestamps import iso
from infersight.service.evaluation import Evaluator, default_policy
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
    "/api/v1/cost",
    "/api/v1/slos",
    "/api/v1/slos/{name}",
    "/api/v1/incidents",
    "/api/v1/incidents/{incident_id:int}",
    # Budgets: a scoped token sees its tenants' budgets only (tests/cost/test_budget_surfaces).
    "/api/v1/budgets",
    "/api/v1/budgets/{name}",
}
#: Per SLO: the tenant selector (None: every tenant). Each one's TTFT target is missed by
#: every request (1 ms), so each fires an incident.
SLOS = {"slo-a": "A", "slo-b": "B", "slo-c": "C", "slo-all": None}


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
    writer = open_writer(store.engine)
    writer.write_requests(rows)
    writer.write_gpu_samples(
        [
            GpuSample(
                ts=NOW - span + timedelta(seconds=10 * n),
                instance=instance,
                gpu_index=0,
                name="NVIDIA H100 80GB HBM3",
                util_gpu=0.6,
                power_w=500.0,
            )
            for n in range(int(span.total_seconds() // 10))
            for instance in ("gpu-0", "gpu-1")
        ]
    )
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


def _slo(name: str, tenant: str | None) -> str:
    selector = f"{{tenant: {tenant}}}" if tenant else "{}"
    return (
        f"apiVersion: infersight/v1\nkind: SLO\nmetadata: {{name: {name}}}\nspec:\n"
        f"  sli:\n    latency: {{metric: ttft, threshold: 1ms}}\n  selector: {selector}\n"
        f"  window: 28d\n  objective: '99%'\n"
    )


def test_slos_incidents_and_cost_of_a_scoped_token_are_its_tenants_alone(
    api: Api, store, records: list[RequestRecord]
) -> None:
    admin, union = bearer(ADMIN_TOKEN), bearer(UNION_TOKEN)
    for name, tenant in SLOS.items():
        put = api.put(f"/api/v1/slos/{name}", content=_slo(name, tenant), headers=admin)
        assert put.status_code == 201, put.text
    Evaluator(store.sql, default_policy()).run(NOW)
    every = api.get("/api/v1/incidents", headers=admin).json()["incidents"]
    assert {i["slo"] for i in every} == set(SLOS)  # each fired

    # SLOs: those within A|B alone; the others are refused by name.
    listed = api.get("/api/v1/slos", headers=union).json()["slos"]
    assert sorted(s["metadata"]["name"] for s in listed) == ["slo-a", "slo-b"]
    assert api.get("/api/v1/slos/slo-a", headers=union).status_code == 200
    for name in ("slo-c", "slo-all"):
        refused = api.get(f"/api/v1/slos/{name}", headers=union)
        assert refused.status_code == 403, name
        assert "covers other tenants" in refused.json()["error"]["message"]
    only_c = api.get("/api/v1/slos", headers=bearer(SINGLE_TOKEN)).json()["slos"]
    assert [s["metadata"]["name"] for s in only_c] == ["slo-c"]

    # Incidents: those of its SLOs alone, by list and by id.
    mine = api.get("/api/v1/incidents", headers=union).json()["incidents"]
    assert sorted(i["slo"] for i in mine) == ["slo-a", "slo-b"]
    for incident in every:
        one = api.get(f"/api/v1/incidents/{incident['id']}", headers=union)
        assert one.status_code == (200 if incident["slo"] in ("slo-a", "slo-b") else 403)

    # Cost: the lines of A and B (each instance's cost shared out by the time their requests
    # used it), equal to the unlimited answer's A and B lines; no instance's own figures.
    params = {**_window(), "group_by": "tenant"}
    full = api.get("/api/v1/cost", params=params, headers=admin).json()
    scoped = api.get("/api/v1/cost", params=params, headers=union).json()
    truth = {g["labels"]["tenant"]: g for g in full["groups"] if g["labels"]["tenant"] != "C"}
    assert {g["labels"]["tenant"]: g for g in scoped["groups"]} == truth
    assert scoped["groups"][0]["requests"] == len(
        _picked(records, {scoped["groups"][0]["labels"]["tenant"]})
    )
    assert float(full["total"]["cost"]) > 0  # GPU time was priced
    assert scoped["instances"] == []
    assert scoped["unmetered_instances"] == []
    assert scoped["limited_to_tenants"] == ["A", "B"]
    whole = api.get("/api/v1/cost", params=_window(), headers=union).json()["total"]
    assert whole["requests"] == len(_picked(records, {"A", "B"}))
    assert Decimal(whole["cost"]) == sum(Decimal(g["cost"]) for g in truth.values())


def test_the_dashboard_of_a_scoped_token_shows_its_tenants_and_says_what_it_cannot(
    api: Api, store, records: list[RequestRecord]
) -> None:
    admin, union = bearer(ADMIN_TOKEN), {**bearer(UNION_TOKEN), "accept": "text/html"}
    for name, tenant in SLOS.items():
        assert api.put(f"/api/v1/slos/{name}", content=_slo(name, tenant), headers=admin).is_success
    Evaluator(store.sql, default_policy()).run(NOW)
    window = {"start": iso(START), "end": iso(END)}

    page = api.get("/ui/latency", params=window, headers=union)
    assert page.status_code == 200, page.text
    assert 'value="A"' in page.text
    assert 'value="B"' in page.text
    assert 'value="C"' not in page.text  # not even in the tenant menu
    every = api.get("/ui/latency", params=window, headers={**admin, "accept": "text/html"})
    assert 'value="C"' in every.text

    around = {"start": iso(NOW - timedelta(hours=1)), "end": iso(NOW + timedelta(minutes=1))}
    unlimited = api.get("/ui/incidents", params=around, headers={**admin, "accept": "text/html"})
    assert "slo-c" in unlimited.text
    listed = api.get("/ui/incidents", params=around, headers=union)
    assert listed.status_code == 200
    assert "slo-a" in listed.text
    assert "slo-b" in listed.text
    assert "slo-c" not in listed.text
    assert "slo-all" not in listed.text
    for incident in api.get("/api/v1/incidents", headers=admin).json()["incidents"]:
        one = api.get(f"/ui/incidents/{incident['id']}", headers=union)
        assert one.status_code == (200 if incident["slo"] in ("slo-a", "slo-b") else 403)

    for path in ("/ui/overview", "/ui/gpus", "/ui/cost", "/ui/capacity"):
        refused = api.get(path, headers=union)
        assert refused.status_code == 403, path
        assert "sign in with an unscoped read token" in refused.text
        assert "Latency, Incidents" in refused.text
