"""The dashboard's answer cache keys a page by its route's path template and by the parameters
the page reads: a query parameter named like another page's path parameter cannot hand that
page a kept answer of the wrong shape, and unknown parameters neither reach a page nor split
its kept answers."""

from __future__ import annotations

from datetime import timedelta

from infersight.api.context import context_of
from infersight.storage import slo_store
from tests.conftest import Store
from tests.dashboard.test_pages import NOW, Client, sqlite_store  # noqa: F401
from tests.profiles.test_page import _incident
from tests.service.test_goodput_slo import GOODPUT


def test_the_overview_asked_with_an_slo_name_does_not_answer_the_slo_page(
    sqlite_store: Store,  # noqa: F811
):
    slo_store.put_slo(sqlite_store.engine, GOODPUT, NOW - timedelta(days=1))
    client = Client(sqlite_store, answer_ttl_s=60.0)
    assert client.get(f"/ui/overview?slo_name={GOODPUT.name}").status_code == 200
    page = client.get(f"/ui/slos/{GOODPUT.name}")
    assert page.status_code == 200, page.text[:2000]
    assert 'id="slo"' in page.text


def test_the_incident_list_asked_with_an_id_does_not_answer_the_incident_page(
    sqlite_store: Store,  # noqa: F811
):
    incident = _incident(sqlite_store)
    client = Client(sqlite_store, answer_ttl_s=60.0)
    assert client.get(f"/ui/incidents?incident_id={incident}").status_code == 200
    page = client.get(f"/ui/incidents/{incident}")
    assert page.status_code == 200, page.text[:2000]
    assert f"/ui/incidents/{incident}" in str(page.url)
    listing = client.get("/ui/incidents")
    assert listing.status_code == 200
    assert listing.text.count("<html") == 1


def test_unknown_parameters_share_the_kept_answer(sqlite_store: Store):  # noqa: F811
    client = Client(sqlite_store, answer_ttl_s=60.0)
    answers = context_of(client.app).answers
    assert client.get("/ui/latency?q=0.9").status_code == 200
    kept = len(answers)
    for n in range(5):
        assert client.get(f"/ui/latency?q=0.9&utm_source={n}").status_code == 200
    assert len(answers) == kept
    assert answers.stats.hits >= 5
    # a parameter the page reads still tells answers apart
    assert client.get("/ui/latency?q=0.5").status_code == 200
    assert len(answers) == kept + 1
