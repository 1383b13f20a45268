"""The filter bar's team and workload menus (#34's attribution): they list what the trace named
in the range, a page filtered by team answers for that team's requests alone, and the GPUs page
shows the instances that served them. Without attribution the two menus are not shown."""

from __future__ import annotations

import re

import pytest

from tests.conftest import BOTH_STORES, Store, empty_store
from tests.cost.attributed_fleet import TEAMS, TENANTS, WINDOW, write_fleet
from tests.dashboard.test_pages import PAGES, Client

RANGE = f"start={WINDOW.start.isoformat()}&end={WINDOW.end.isoformat()}".replace("+", "%2B")


@pytest.fixture(scope="module", params=BOTH_STORES)
def fleet(request: pytest.FixtureRequest) -> Client:
    store: Store = empty_store(request)
    write_fleet(store.engine)
    client = Client(store)
    client.clock.now = WINDOW.end
    return client


def _options(html: str, name: str) -> list[str]:
    found = re.search(rf'<select name="{name}" id="filter-{name}">(.*?)</select>', html, re.S)
    assert found, f"no {name} menu"
    return re.findall(r'<option value="([^"]*)"', found.group(1))


def _selected(html: str, name: str) -> str:
    found = re.search(rf'<select name="{name}" id="filter-{name}">(.*?)</select>', html, re.S)
    assert found, f"no {name} menu"
    chosen = re.findall(r'<option value="([^"]*)" selected>', found.group(1))
    return chosen[0] if chosen else ""


@pytest.mark.parametrize("page", PAGES)
def test_every_page_has_the_team_and_workload_menus_and_keeps_the_choice(fleet, page):
    response = fleet.get(f"/ui/{page}?{RANGE}&team=ads")
    assert response.status_code == 200, response.text
    assert _options(response.text, "team") == ["", "ads", "search"]
    assert _selected(response.text, "team") == "ads"
    # The workload menu is narrowed by the other filters: the keys ads' requests came with.
    assert _options(response.text, "workload") == ["", "key-0", "key-1"]


def test_a_page_filtered_by_team_answers_for_its_requests_alone(fleet):
    """The Overview's request count filtered by a team (or a workload) is that team's tenants'
    requests, as the API answers for the same selector."""
    teams = {
        team: sum(TENANTS[t] for t, tt in TEAMS.items() if tt == team) for team in TEAMS.values()
    }
    for query, requests in [*((f"team={t}", n) for t, n in teams.items()),
                            ("workload=key-0", None)]:  # fmt: skip
        api = fleet.get(f"/api/v1/throughput?{RANGE}&{query}").json()["groups"][0]["requests"]
        if requests is not None:
            assert api == requests, query
        html = fleet.get(f"/ui/overview?{RANGE}&{query}").text
        shown = re.search(r'id="kpi-requests"><h3>Requests</h3><strong>([\d,]+)</strong>', html)
        assert shown, query
        assert int(shown.group(1).replace(",", "")) == api, query
    everything = fleet.get(f"/api/v1/throughput?{RANGE}").json()["groups"][0]["requests"]
    assert sum(teams.values()) + TENANTS[""] == everything


def test_the_gpus_page_filtered_by_team_shows_the_instances_that_served_it(fleet):
    everything = fleet.get(f"/ui/gpus?{RANGE}").text
    assert 'data-instance="gpu-idle"' in everything
    by_team = fleet.get(f"/ui/gpus?{RANGE}&team=ads").text
    assert 'data-instance="gpu-a"' in by_team
    assert 'data-instance="gpu-b"' in by_team
    assert 'data-instance="gpu-idle"' not in by_team


@pytest.fixture(params=["sqlite"])
def bare(request: pytest.FixtureRequest) -> Store:
    return empty_store(request)


def test_without_attribution_there_is_no_team_or_workload_menu(bare):
    client = Client(bare)
    html = client.get("/ui/latency").text
    assert 'id="filter-model"' in html
    assert 'id="filter-team"' not in html
    assert 'id="filter-workload"' not in html
    chosen = client.get("/ui/latency?team=ads").text  # a bookmark keeps its choice visible
    assert _selected(chosen, "team") == "ads"
