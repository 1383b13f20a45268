"""Dashboard pages through the app (httpx's ASGI transport) on SQLite and PostgreSQL.

Every page answers over a small store, the session cookie is safe and checked (expiry,
tampering, revoked tokens), bad query strings get an explained 400 page, and the static
assets are served from the package.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from infersight.api import create_app
from infersight.api.auth import Scope, parse_tokens
from infersight.api.context import context_of
from infersight.api.dashboard import session as auth
from infersight.api.dashboard.context import parse_context
from infersight.api.dashboard.views.capacity import _peak_rates
from infersight.api.settings import ApiSettings
from infersight.core.importers import parse
from infersight.core.query import Selector
from infersight.core.samples import EngineSample, GpuSample, ServerSample
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.storage import slo_store
from infersight.storage.baselines import save_baseline
from infersight.storage.writer import open_writer
from tests.conftest import Store, empty_store
from tests.doubles import FakeClock
from tests.factories import make_records

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
DATA = Path(__file__).resolve().parents[1] / "baselines" / "data"
READ = "viewer-token-0123456789"
ADMIN = "admin-token-0123456789ab"
PAGES = ("overview", "latency", "gpus", "cost", "incidents", "baselines", "capacity", "scaling")


class Client:
    def __init__(self, store: Store, tokens: str = "", answer_ttl_s: float = 0.0) -> None:
        """The app over ``store``, its clock fixed at ``NOW``. Its pages are computed afresh
        per request by default (these tests change the store between views under a clock
        that stands still); ``tests/dashboard/test_answers.py`` checks the answer cache."""
        self.clock = FakeClock(NOW)
        settings = ApiSettings(
            run_jobs=False, api_tokens=tokens, dashboard_answer_ttl_s=answer_ttl_s
        )
        self.app = create_app(settings, store.engine, self.clock)
        self.cookies: dict[str, str] = {}

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def call() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://localhost", cookies=self.cookies
            ) as client:
                return await client.request(method, url, **kwargs)

        return asyncio.run(call())

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)


@pytest.fixture(params=["sqlite"])
def sqlite_store(request: pytest.FixtureRequest) -> Store:
    """Checks that do not depend on the store run on SQLite only."""
    return empty_store(request)


@pytest.fixture
def filled(store: Store) -> Store:
    start = NOW - timedelta(minutes=50)
    writer = open_writer(store.engine)
    writer.write_requests(
        make_records(np.random.default_rng(3), start, 3000, span=timedelta(minutes=45))
    )
    writer.write_gpu_samples(
        [
            GpuSample(
                start + timedelta(seconds=15 * i),
                instance,
                0,
                name="NVIDIA H200",
                util_gpu=0.8,
                power_w=500.0,
                power_limit_w=700.0,
                sm_clock_mhz=1900.0,
                memory_used_bytes=90e9,
                memory_total_bytes=141e9,
                temperature_c=70.0,
            )
            for i in range(180)
            for instance in ("gpu-0", "gpu-1")
        ]
    )
    return store


def test_every_page_renders_over_a_small_store(filled: Store):
    client = Client(filled)
    for page in PAGES:
        response = client.get(f"/ui/{page}", params={"range": "1h"})
        assert response.status_code == 200, response.text[:2000]
        assert response.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in response.headers["content-security-policy"]
        assert f'data-page="{page}"' in response.text
        assert "cdn" not in response.text.lower()


def test_pages_show_the_store_s_data(filled: Store):
    client = Client(filled)
    latency = client.get("/ui/latency").text
    assert latency.count('data-instance="gpu-0"') == 2  # one row per model on gpu-0
    assert "<polyline" in latency
    gpus = client.get("/ui/gpus").text
    assert gpus.count("<tr data-instance=") == 2
    assert "NVIDIA H200" in gpus
    narrowed = client.get("/ui/gpus", params={"instance": "gpu-1"}).text
    assert narrowed.count("<tr data-instance=") == 1


def test_the_gpu_page_lists_the_engines_of_a_data_parallel_server_only(filled: Store):
    start = NOW - timedelta(minutes=30)
    engines = [(0.92, 8.0), (0.40, 3.0)]
    open_writer(filled.engine).write_server_samples(
        [
            ServerSample(
                ts=start + timedelta(seconds=15 * i),
                instance=instance,
                engine="vllm",
                per_engine=tuple(
                    EngineSample(str(rank), requests_running=running, kv_cache_usage=kv)
                    for rank, (kv, running) in enumerate(engines)
                )
                if instance == "gpu-0"
                else (),
                kv_cache_usage=0.66,
            )
            for i in range(60)
            for instance in ("gpu-0", "gpu-1")
        ]
    )
    client = Client(filled)
    page = client.get("/ui/gpus").text
    assert page.count('data-engine="') == 2  # gpu-1 runs one engine: no rows of its own
    assert '<tr data-instance="gpu-0" data-engine="0" class="warn">' in page
    assert '<tr data-instance="gpu-0" data-engine="1" class="">' in page
    assert "92 %" in page
    assert ">hot<" in page
    assert 'id="engine-kv"' in page
    narrowed = client.get("/ui/gpus", params={"instance": "gpu-1"}).text
    assert 'id="engines"' not in narrowed


def test_the_cost_page_says_what_good_tokens_were_measured_against(filled: Store):
    client = Client(filled)
    page = client.get("/ui/cost", params={"range": "1h"}).text
    assert 'data-basis="cost_model"' in page
    assert "goodRequest limits (TTFT ≤ 2 s, TPOT ≤ 100 ms)" in page
    slo = SloSpec(
        "fast-8b", Sli(SliKind.LATENCY, "ttft", 0.25), 0.99, timedelta(days=28),
        Selector(model="llama-8b"),
    )  # fmt: skip
    slo_store.put_slo(filled.engine, slo, NOW)
    page = client.get("/ui/cost", params={"range": "1h"}).text
    assert 'id="kpi-cost-per-million-good" data-basis="mixed"' in page
    assert "fast-8b (TTFT ≤ 250 ms) for llama-8b" in page
    assert "no latency SLO covers llama-70b" in page
    assert '<td class="num" data-basis="slo">' in page
    assert page.count("<sup title=") == 1  # the 70B row's good figure: the cost model's limits


def test_an_empty_store_says_there_is_nothing_to_show(store: Store):
    client = Client(store)
    for page in PAGES:
        assert client.get(f"/ui/{page}").status_code == 200
    assert "No SLOs defined yet" in client.get("/ui/overview").text
    assert 'data-state="not-configured"' in client.get("/ui/capacity").text
    assert 'data-state="not-configured"' in client.get("/ui/baselines").text


BAD_QUERIES = [
    ({"range": "2y"}, "unknown time range"),
    ({"start": "2026-03-02T10:00:00Z"}, "needs both start and end"),
    ({"start": "2026-03-02T10:00:00Z", "end": "2026-03-01T10:00:00Z"}, "end must be after"),
    ({"refresh": "1s"}, "unknown refresh"),
    ({"q": "150"}, "q must be between 0 and 1"),
    ({"heatmap": "queue_depth"}, "heatmap must be"),
    ({"model": "m" * 300}, "longer than"),
]


def test_a_bad_query_string_is_explained_on_a_400_page(sqlite_store: Store):
    client = Client(sqlite_store)
    for query, message in BAD_QUERIES:
        response = client.get("/ui/latency", params=query)
        assert response.status_code == 400, query
        assert message in response.text, query
        assert 'data-state="error"' in response.text


def test_static_assets_come_from_the_package_and_nothing_else(sqlite_store: Store):
    store = sqlite_store
    client = Client(store)
    css = client.get("/ui/static/app.css")
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    assert client.get("/ui/static/app.js").headers["content-type"].startswith("text/javascript")
    missing = client.get("/ui/static/..%2Fapi%2Fauth.py")
    assert missing.status_code == 404


def test_with_tokens_a_page_without_a_session_redirects_to_the_login_form(sqlite_store: Store):
    store = sqlite_store
    client = Client(store, f"read:{READ}")
    response = client.get("/ui/latency", params={"range": "6h"})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/login?next=%2Fui%2Flatency%3Frange%3D6h"
    assert client.get("/ui/login").status_code == 200
    assert client.get("/ui/latency", headers={"authorization": f"Bearer {READ}"}).status_code == 200


def test_logging_in_sets_a_safe_session_cookie_that_admits_the_viewer(sqlite_store: Store):
    store = sqlite_store
    client = Client(store, f"read:{READ},admin:{ADMIN}")
    refused = client.request("POST", "/ui/login", data={"token": "x" * 20, "next": "/ui/gpus"})
    assert refused.status_code == 401
    assert "set-cookie" not in refused.headers
    response = client.request("POST", "/ui/login", data={"token": READ, "next": "/ui/gpus"})
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/gpus"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert READ not in cookie
    client.cookies = {auth.COOKIE: response.cookies[auth.COOKIE]}
    page = client.get("/ui/gpus")
    assert page.status_code == 200
    assert ">viewer<" in page.text
    # The session is for the dashboard only: the JSON API still wants a bearer token.
    assert client.get("/api/v1/incidents").status_code == 401


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "/api/v1/slos"])
def test_the_login_never_redirects_off_the_dashboard(sqlite_store: Store, target: str):
    client = Client(sqlite_store, f"read:{READ}")
    response = client.request("POST", "/ui/login", data={"token": READ, "next": target})
    assert response.headers["location"] == "/ui/overview"


def test_a_session_ends_when_it_expires_is_tampered_with_or_its_token_is_removed():
    tokens = parse_tokens(f"read:{READ},admin:{ADMIN}")
    value = auth.issue(ADMIN, NOW)
    assert auth.verify(tokens, value, NOW) is Scope.ADMIN
    assert auth.verify(tokens, auth.issue(READ, NOW), NOW) is Scope.READ
    assert auth.verify(tokens, value, NOW + auth.SESSION_LIFETIME) is None
    expiry, nonce, mac = value.split(".")
    assert auth.verify(tokens, f"{int(expiry) + 3600}.{nonce}.{mac}", NOW) is None
    assert auth.verify(tokens, f"{expiry}.{nonce}x.{mac}", NOW) is None
    assert auth.verify(tokens, "garbage", NOW) is None
    assert auth.verify(parse_tokens(f"read:{READ}"), value, NOW) is None


def test_logging_out_clears_the_cookie(sqlite_store: Store):
    store = sqlite_store
    response = Client(store, f"read:{READ}").request("POST", "/ui/logout")
    assert response.status_code == 303
    assert 'infersight_session=""' in response.headers["set-cookie"]
    assert "Max-Age=0" in response.headers["set-cookie"]


def test_a_sign_in_posted_from_another_site_is_refused(sqlite_store: Store):
    client = Client(sqlite_store, f"read:{READ}")
    foreign = client.request(
        "POST", "/ui/login", data={"token": READ}, headers={"origin": "https://evil.example"}
    )
    assert foreign.status_code == 403
    assert "set-cookie" not in foreign.headers
    same = client.request(
        "POST", "/ui/login", data={"token": READ}, headers={"origin": "http://localhost"}
    )
    assert same.status_code == 303


def test_the_capacity_pages_mean_rate_counts_only_the_span_with_requests(
    sqlite_store: Store,
) -> None:
    """Ten minutes of 1 req/s in a 24-hour range is a mean of about 1 req/s, not 1/144 of it
    (the live demo's first hour read 0.19 req/s for a model serving 6)."""
    start = NOW - timedelta(minutes=10)
    records = make_records(
        np.random.default_rng(5), start, 600, span=timedelta(minutes=10), models=("llama-8b",)
    )
    open_writer(sqlite_store.engine).write_requests(records)
    client = Client(sqlite_store)
    ctx = parse_context({"range": "24h"}, NOW, 400)
    rates = _peak_rates(context_of(client.app), ctx)
    finished = sum(1 for r in records if r.start < NOW)
    assert rates["llama-8b"]["mean_rps"] == pytest.approx(finished / 600, rel=0.12)


def test_a_metric_measured_on_one_side_only_says_so_on_the_baselines_page(filled: Store):
    """An imported load-test baseline holds no cost: the page names why that row was not
    compared instead of an empty bar beside a bare "pass" (#16, the demo's baseline)."""
    doc = json.loads((DATA / "llmperf_summary.json").read_text())
    baseline = parse(doc, name="imported", created_at=NOW - timedelta(hours=2))
    assert save_baseline(filled.engine, baseline)
    page = Client(filled).get("/ui/baselines?baseline=imported&model=llama-8b").text
    row = page[page.index('data-metric="cost_per_million_tokens"') :]
    row = row[: row.index("</tr>")]
    assert '<span class="muted small metric-note">not measured on both sides</span>' in row
    assert 'class="change"' not in row


@pytest.mark.parametrize("degree", ["two", 2.5, "4", None])
def test_the_capacity_page_shows_a_tensor_parallel_degree_that_is_no_integer_as_given(
    sqlite_store: Store, degree: object
) -> None:
    """A run config written by hand or another tool may record ``tensor_parallel: "two"``:
    the page shows it as given instead of a 500 (review)."""
    import dataclasses

    from infersight.storage.runs import save_run
    from tests.capacity.support import saturating_run

    hardware = {"gpu": "h100", "tensor_parallel": degree}
    run = dataclasses.replace(
        saturating_run(), started_at=NOW - timedelta(hours=2), config={"hardware": hardware}
    )
    run_id = save_run(sqlite_store.engine, run)
    page = Client(sqlite_store).get(f"/ui/capacity?run={run_id}")
    assert page.status_code == 200, page.text[-2000:]
    shown = {"two": "two", 2.5: "2.5", "4": "4", None: "1"}[degree]
    assert f"Measured on {shown}× h100" in page.text
