"""``/api/v1/baselines``: capture a window, import a result, compare a later window, over the
real app and store (both databases)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import numpy as np
import pytest

from bench.harness.baselines import synthetic_run
from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.baseline import to_dict
from infersight.storage.writer import open_writer
from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN, Api
from tests.baselines.test_importers import load
from tests.baselines.test_real_tools import guidellm_report
from tests.doubles import NOW, FakeClock
from tests.factories import make_records

BEFORE = (NOW - timedelta(hours=6), NOW - timedelta(hours=3))
AFTER = (NOW - timedelta(hours=3), NOW)


def iso(ts):
    return ts.isoformat().replace("+00:00", "Z")


def span(window):
    return {"start": iso(window[0]), "end": iso(window[1])}


@pytest.fixture
def api(store) -> Api:
    settings = ApiSettings(run_jobs=False, api_tokens=f"read:{READ_TOKEN},admin:{ADMIN_TOKEN}")
    client = Api(create_app(settings, store.engine, FakeClock()), FakeClock())
    client.headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    return client


def write_window(store, window, seed, slowdown=1.0, count=2000):
    rng = np.random.default_rng(seed)
    records = make_records(
        rng,
        window[0],
        count,
        span=window[1] - window[0],
        models=("llama-8b",),
        instances=("gpu-0",),
    )
    slowed = [
        dataclasses.replace(
            r,
            ttft_s=r.ttft_s * slowdown,
            tpot_s=r.tpot_s * slowdown,
            e2e_s=r.e2e_s * slowdown,
            decode_s=r.decode_s * slowdown,
            prefill_s=r.prefill_s * slowdown,
        )
        for r in records
    ]
    open_writer(store.engine).write_requests(slowed)


def test_capture_list_get_and_compare_the_same_window_passes(store, api):
    write_window(store, BEFORE, 1)
    created = api.request(
        "POST",
        "/api/v1/baselines",
        json={"name": "prod-before", "model": "llama-8b", **span(BEFORE)},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["source"] == "window"
    assert body["latency"]["ttft"]["distribution"] is True
    assert body["requests"] == 2000
    listed = api.get("/api/v1/baselines").json()["baselines"]
    assert [b["name"] for b in listed] == ["prod-before"]
    one = api.get(
        "/api/v1/baselines/prod-before", headers={"authorization": f"Bearer {READ_TOKEN}"}
    )
    assert one.json()["latency"]["e2e"]["quantiles"]["0.99"] > 0
    full = api.get("/api/v1/baselines/prod-before?distributions=true").json()
    assert isinstance(full["latency"]["ttft"]["sketch"], str)
    same = api.get(
        "/api/v1/baselines/prod-before/compare", params={"model": "llama-8b", **span(BEFORE)}
    )
    assert same.status_code == 200, same.text
    result = same.json()
    assert result["verdict"] == "pass"
    assert all(
        m["change"] in (0.0, None) for m in result["metrics"] if m["metric"] != "gpu_utilization"
    )


def test_a_window_15_percent_slower_regresses(store, api):
    write_window(store, BEFORE, 2)
    write_window(store, AFTER, 3, slowdown=1.15)
    assert (
        api.request(
            "POST", "/api/v1/baselines", json={"name": "before", **span(BEFORE)}
        ).status_code
        == 201
    )
    answer = api.get("/api/v1/baselines/before/compare", params={**span(AFTER), "seed": 7}).json()
    assert answer["verdict"] == "regressed"
    regressed = [m for m in answer["metrics"] if m["verdict"] == "regressed"]
    assert regressed
    for metric in regressed:
        assert metric["metric"].split(".")[0] in ("ttft", "tpot", "e2e")
        assert metric["change"] == pytest.approx(0.15, abs=0.05)
        assert metric["ci"][0] > metric["threshold"]
    assert (
        answer
        == api.get("/api/v1/baselines/before/compare", params={**span(AFTER), "seed": 7}).json()
    )
    lenient = api.get(
        "/api/v1/baselines/before/compare",
        params={**span(AFTER), "thresholds": "tpot:0.5,ttft:0.5,e2e:0.5"},
    ).json()
    assert all(
        m["verdict"] != "regressed"
        for m in lenient["metrics"]
        if m["metric"].split(".")[0] in ("ttft", "tpot", "e2e")
    )


def test_imports_and_documents_are_stored_and_names_are_not_overwritten_silently(api):
    doc = {"name": "vllm-main", "import": {"format": "vllm", "result": load("vllm_result.json")}}
    assert api.request("POST", "/api/v1/baselines", json=doc).status_code == 201
    again = api.request("POST", "/api/v1/baselines", json=doc)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"
    assert (
        api.request("POST", "/api/v1/baselines", json={**doc, "replace": True}).status_code == 200
    )
    guessed = {
        "name": "aiperf-main",
        "import": {"result": load("aiperf_profile_export_aiperf.json")},
    }
    assert api.request("POST", "/api/v1/baselines", json=guessed).json()["source"] == "aiperf"
    # A whole GuideLLM report (2.6 MB: every request's prompt and answer) is over the API's
    # body limit; without its per-request records it imports with the report's percentiles.
    report = guidellm_report()
    whole = {"name": "guidellm-4rps", "import": {"result": report, "benchmark": 1}}
    assert api.request("POST", "/api/v1/baselines", json=whole).status_code == 413
    for bench in report["benchmarks"]:
        bench.pop("requests")
    level = api.request("POST", "/api/v1/baselines", json=whole)
    assert level.status_code == 201
    assert level.json()["source"] == "guidellm"
    unchosen = api.request(
        "POST", "/api/v1/baselines", json={"name": "g2", "import": {"result": report}}
    )
    assert unchosen.status_code == 400
    assert "3 benchmarks" in unchosen.json()["error"]["message"]
    run = synthetic_run(np.random.default_rng(5), "from-loadgen", requests=300)
    stored = api.request(
        "POST", "/api/v1/baselines", json={"name": "nightly", "baseline": to_dict(run)}
    )
    assert stored.status_code == 201
    assert stored.json()["source"] == "run"
    against = api.get("/api/v1/baselines/vllm-main/compare", params={"against": "vllm-main"}).json()
    assert against["verdict"] == "pass"
    assert api.delete("/api/v1/baselines/nightly").status_code == 204
    assert api.get("/api/v1/baselines/nightly").status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "x", "import": {"result": {}}, "start": "0", "end": "10"}, 400, "invalid_input"),
        ({"name": "x"}, 400, "invalid_input"),
        ({"name": "bad name", "import": {"result": {}}}, 400, "invalid_input"),
        ({"name": "x", "import": {"result": {"hello": 1}}}, 400, "invalid_input"),
        (
            {"name": "x", "start": "2026-11-20T00:00:00Z", "end": "2026-11-20T01:00:00Z"},
            400,
            "invalid_input",
        ),
        ({"name": "x", "import": {"format": "gatling", "result": {}}}, 400, "invalid_input"),
    ],
)
def test_bad_captures_get_the_one_error_shape(api, body, status, code):
    response = api.request("POST", "/api/v1/baselines", json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_reading_needs_a_token_and_writing_needs_admin(api):
    anonymous = api.get("/api/v1/baselines", headers={"authorization": ""})
    assert anonymous.status_code == 401
    reader = {"authorization": f"Bearer {READ_TOKEN}"}
    doc = {"name": "x", "import": {"result": load("vllm_result.json")}}
    assert api.request("POST", "/api/v1/baselines", json=doc, headers=reader).status_code == 403
    assert api.get("/api/v1/baselines/unknown/compare", headers=reader).status_code == 404
    mixed = api.get(
        "/api/v1/baselines/unknown/compare", params={"against": "b", "model": "m"}, headers=reader
    )
    assert mixed.status_code == 400
    bad = api.get(
        "/api/v1/baselines/unknown/compare", params={"thresholds": "ttft"}, headers=reader
    )
    assert bad.status_code == 400
