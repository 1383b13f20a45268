"""Cost per tenant, team and workload split three ways (#34): usage + idle = allocation per
line, and over the lines usage + idle/unallocated = the fleet's total, exactly (``Decimal``),
for requests whose engine spans named no tenant (their traces' gateway spans did); on SQLite
and PostgreSQL, and through the API."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest

from infersight.core.attribution import OTHER
from infersight.core.timestamps import iso
from infersight.service.attribution import UNATTRIBUTED, attributed_cost, attributed_from
from infersight.storage import cost
from tests.conftest import BOTH_STORES, Store, empty_store
from tests.cost.attributed_fleet import TENANTS, WINDOW, write_fleet
from tests.cost.conftest import api_for
from tests.cost.scenario import MODEL


@pytest.fixture(scope="module", params=BOTH_STORES)
def fleet(request: pytest.FixtureRequest) -> Store:
    store = empty_store(request)
    write_fleet(store.engine)
    cost.put_model(store.engine, MODEL, WINDOW.end)
    return store


def _adds_up(answer, instances_total: Decimal) -> None:
    usage = sum((s.usage for s in answer.shares), Decimal(0))
    idle = sum((s.idle for s in answer.shares), Decimal(0))
    allocation = sum((s.allocation for s in answer.shares), Decimal(0))
    assert usage + idle == allocation == answer.fleet_total == instances_total
    for share in answer.shares:
        assert share.usage + share.idle == share.allocation
        assert share.usage >= 0
        assert share.idle >= 0


def test_tenant_shares_add_up_exactly_to_the_fleet_total(fleet: Store) -> None:
    full = cost.cost(fleet.engine, WINDOW, MODEL, group_by=("tenant",))
    instances_total = sum((i.total.amount for i in full.instances), Decimal(0))
    assert instances_total > 0
    answer = attributed_cost(fleet.sql.cost, WINDOW, MODEL, "tenant", top_n=10)
    _adds_up(answer, instances_total)
    by_value = {s.value: s for s in answer.shares}
    assert {v: s.line.requests for v, s in by_value.items() if v} == {
        t: n for t, n in TENANTS.items() if t
    }
    # Each tenant's allocation is GET /api/v1/cost's cost for it; the unattributed line
    # holds the requests no span named and the idle instance, all of whose cost is idle.
    for line in full.groups:
        assert by_value[line.labels["tenant"]].allocation == line.cost
    idle_instance = next(i for i in full.instances if i.instance == "gpu-idle")
    assert by_value[""].idle >= idle_instance.total.amount > 0
    assert by_value[""].label == UNATTRIBUTED
    # gpu-b idled half the window: its tenants carry idle cost beside their usage.
    assert sum((s.idle for s in answer.shares if s.value), Decimal(0)) > 0
    assert answer.attributed_requests == sum(n for t, n in TENANTS.items() if t)


@pytest.mark.parametrize("group_by", [("tenant",), ("team",), ("workload",), ("model", "instance")])
def test_one_read_grouped_again_is_the_read_of_that_grouping(fleet: Store, group_by) -> None:
    """The Cost page reads the range once (by model and adapter) and groups its lines again
    for who spent it: the same groups and total, to the Decimal, as reading that grouping."""
    once = cost.cost(fleet.engine, WINDOW, MODEL, group_by=("model", "adapter"))
    direct = cost.cost(fleet.engine, WINDOW, MODEL, group_by=group_by)
    again = once.regrouped(group_by)
    assert again.group_by == direct.group_by
    assert again.groups == direct.groups
    assert again.total == direct.total
    assert len(again.groups) > 1
    assert attributed_from(once.regrouped(("tenant",)), 10) == attributed_cost(
        fleet.sql.cost, WINDOW, MODEL, "tenant", top_n=10
    )


def test_past_the_top_n_values_are_folded_into_other(fleet: Store) -> None:
    full = cost.cost(fleet.engine, WINDOW, MODEL)
    instances_total = sum((i.total.amount for i in full.instances), Decimal(0))
    answer = attributed_cost(fleet.sql.cost, WINDOW, MODEL, "tenant", top_n=2)
    _adds_up(answer, instances_total)
    assert [s.value for s in answer.shares] == ["acme", "globex", OTHER, ""]
    other = answer.shares[2]
    assert other.folded == 2
    assert other.line.requests == TENANTS["initech"] + TENANTS["umbrella"]
    statement = answer.to_json()["top"]
    assert statement["top_n"] == 2
    assert statement["folded_into_other"] == 2


def test_cost_per_team_and_workload(fleet: Store) -> None:
    full = cost.cost(fleet.engine, WINDOW, MODEL)
    instances_total = sum((i.total.amount for i in full.instances), Decimal(0))
    teams = attributed_cost(fleet.sql.cost, WINDOW, MODEL, "team")
    _adds_up(teams, instances_total)
    assert {s.value: s.line.requests for s in teams.shares} == {
        "search": TENANTS["acme"] + TENANTS["globex"],
        "ads": TENANTS["initech"] + TENANTS["umbrella"],
        "": TENANTS[""],
    }
    workloads = attributed_cost(fleet.sql.cost, WINDOW, MODEL, "workload")
    _adds_up(workloads, instances_total)
    assert {s.value for s in workloads.shares} == {"key-0", "key-1", ""}


def test_goodput_per_tenant(fleet: Store) -> None:
    answer = attributed_cost(fleet.sql.cost, WINDOW, MODEL, "tenant")
    for share in answer.shares:
        line = share.line
        if not line.requests:
            continue
        # One request in four had a 3 s TTFT, over the cost model's 2 s: not good.
        assert 0 < line.good_tokens < line.tokens
        assert share.good_share == pytest.approx(line.good_tokens / line.tokens)
        assert line.cost_per_million_good_tokens is not None
        assert line.cost_per_million_good_tokens.amount > line.cost_per_million_tokens.amount


def test_the_api_answers_the_split(fleet: Store) -> None:
    api = api_for(fleet)
    query = f"start={iso(WINDOW.start)}&end={iso(WINDOW.end)}"
    body = api.get(f"/api/v1/cost/attribution?dimension=tenant&top=2&{query}").json()
    shares = body["shares"]
    assert [s["label"] for s in shares] == ["acme", "globex", OTHER, UNATTRIBUTED]
    fleet_part = body["fleet"]
    total = Decimal(fleet_part["total"])
    assert sum(Decimal(s["allocation"]) for s in shares) == total
    assert Decimal(fleet_part["usage"]) + Decimal(fleet_part["idle_unallocated"]) == total
    assert body["top"] == {
        "dimension": "tenant",
        "top_n": 2,
        "values": 4,
        "folded_into_other": 2,
        "other": OTHER,
    }
    assert shares[0]["goodput"]["good_tokens"] > 0
    refused = api.get(f"/api/v1/cost/attribution?dimension=colour&{query}")
    assert refused.status_code == 400


def test_the_weekly_report_says_who_spent_it(fleet: Store) -> None:
    from datetime import timedelta

    from infersight.core.retention import RetentionPolicy
    from infersight.service.report_render import render_csv, render_html
    from infersight.service.reports import build_weekly

    body = build_weekly(
        fleet.sql,
        MODEL,
        "2026-W50",
        "UTC",
        RetentionPolicy().finest_for,
        WINDOW.start + timedelta(days=8),
        attribution_top_n=3,
    )
    by_tenant = body["attribution"]["tenant"]
    week_cost = Decimal(body["summary"]["cost"])
    assert Decimal(by_tenant["fleet"]["total"]) == week_cost
    assert sum(Decimal(s["allocation"]) for s in by_tenant["shares"]) == week_cost
    usage, idle = by_tenant["fleet"]["usage"], by_tenant["fleet"]["idle_unallocated"]
    assert Decimal(usage) + Decimal(idle) == week_cost
    assert by_tenant["top"]["folded_into_other"] == 1
    assert set(body["attribution"]) == {"tenant", "team", "workload"}
    html = render_html(body)
    assert 'data-section="attribution-tenant"' in html
    assert "the top 3 of 4 by cost, 1 folded into (other)" in html
    # The CSV carries the same shares, one row each (a spreadsheet sums them to the week).
    rows = [r for r in csv.DictReader(io.StringIO(render_csv(body)))
            if r["section"] == "attribution_tenant"]  # fmt: skip
    assert [r["group"] for r in rows] == [s["label"] for s in by_tenant["shares"]]
    assert OTHER in [r["group"] for r in rows]
    assert sum(Decimal(r["cost"]) for r in rows) == week_cost
    assert [r["usage_cost"] for r in rows] == [s["usage"] for s in by_tenant["shares"]]


def test_metrics_carry_the_split_bounded_by_the_top_n(fleet: Store) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    api = api_for(fleet, attribution_top_n=1, metrics_cache_s=0)
    api.clock.now = WINDOW.end
    response = api.get("/metrics")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    hour = Decimal(0)
    for sample in families["infersight_cost_last_hour"].samples:
        hour += Decimal(str(sample.value))
    cost = families["infersight_attributed_cost_last_hour"].samples
    for dimension in ("tenant", "team", "workload"):
        mine = [s for s in cost if s.labels["dimension"] == dimension]
        values = {s.labels["value"] for s in mine}
        assert len(values) <= 1 + 2  # the top 1, (other) and the unattributed
        allocation = sum(s.value for s in mine if s.labels["split"] == "allocation")
        usage = sum(s.value for s in mine if s.labels["split"] == "usage")
        idle = sum(s.value for s in mine if s.labels["split"] == "idle")
        assert allocation == pytest.approx(float(hour))
        assert usage + idle == pytest.approx(allocation)
    top = {s.labels["dimension"]: s.value for s in families["infersight_attribution_top_n"].samples}
    assert top == {"tenant": 1, "team": 1, "workload": 1}
    folded = {
        s.labels["dimension"]: s.value
        for s in families["infersight_attribution_folded_values"].samples
    }
    assert folded["tenant"] == 1  # initech and umbrella served in the last hour


def test_a_team_budget_spends_what_the_team_was_allocated(fleet: Store) -> None:
    from infersight.core.query import Selector
    from infersight.service.budgets import SpendReader

    teams = attributed_cost(fleet.sql.cost, WINDOW, MODEL, "team")
    search = next(s for s in teams.shares if s.value == "search")
    reader = SpendReader(fleet.sql, MODEL)
    assert reader.spend(WINDOW, Selector(team="search")) == search.allocation > 0
    scoped = cost.cost(fleet.engine, WINDOW, MODEL, Selector(team="search"))
    assert scoped.total.cost == search.allocation


def test_answers_grouped_by_tenant_keep_the_top_n_and_fold_the_rest(fleet: Store) -> None:
    """Latency, throughput, breakdown and cost grouped by tenant: the top 2 tenants apart,
    the others in one (other) group read as one (its quantiles those of its requests), the
    unattributed apart, and the bound stated."""
    api = api_for(fleet, attribution_top_n=2)
    query = f"start={iso(WINDOW.start)}&end={iso(WINDOW.end)}&group_by=tenant"
    folded = TENANTS["initech"] + TENANTS["umbrella"]
    statement = {
        "dimension": "tenant",
        "top_n": 2,
        "values": 4,
        "folded_into_other": 2,
        "other": OTHER,
    }
    latency = api.get(f"/api/v1/latency?metric=e2e&quantiles=0,1&{query}").json()
    assert [g["labels"]["tenant"] for g in latency["groups"]] == ["", "acme", "globex", OTHER]
    assert latency["bounded"] == [statement]
    other = latency["groups"][-1]
    assert other["count"] == folded
    throughput = api.get(f"/api/v1/throughput?{query}").json()
    by_tenant = {g["labels"]["tenant"]: g["requests"] for g in throughput["groups"]}
    assert by_tenant == {"": 7, "acme": 20, "globex": 15, OTHER: folded}
    assert throughput["bounded"] == [statement]
    breakdown = api.get(f"/api/v1/breakdown?{query}").json()
    assert {g["labels"]["tenant"]: g["requests"] for g in breakdown["groups"]} == by_tenant
    cost_answer = api.get(f"/api/v1/cost?{query}").json()
    assert [g["labels"]["tenant"] for g in cost_answer["groups"]][-1] == OTHER
    assert cost_answer["bounded"][0]["folded_into_other"] == 2
    total = sum(Decimal(g["cost"]) for g in cost_answer["groups"])
    assert total == Decimal(cost_answer["total"]["cost"])
    # Not grouped by an attribution dimension: as before, no bound to state.
    plain = api.get(f"/api/v1/throughput?start={iso(WINDOW.start)}&end={iso(WINDOW.end)}")
    assert "bounded" not in plain.json()


def test_the_served_weekly_report_keeps_the_top_n_the_settings_name(fleet: Store) -> None:
    """``INFERSIGHT_ATTRIBUTION_TOP_N`` reaches the weekly report job ``serve`` runs (it kept
    the default 20 whatever the setting said)."""
    from datetime import timedelta

    api = api_for(fleet, cost_model=MODEL.name, attribution_top_n=2)
    generated = api.app.state.context.reports.generate("2026-W50", WINDOW.start + timedelta(days=8))
    tenant = generated.body["attribution"]["tenant"]
    assert tenant["top"]["top_n"] == 2
    assert tenant["top"]["folded_into_other"] == len(set(TENANTS) - {""}) - 2
