"""Latency, throughput and breakdown through the ASGI transport, against numpy's answers."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.doubles import NOW
from tests.factories import make_records
from tests.waiting import until

QS = (0.5, 0.9, 0.95, 0.99)


@pytest.fixture
def records(store):
    rows = make_records(
        np.random.default_rng(11), NOW - timedelta(hours=3), 4000, span=timedelta(hours=3)
    )
    open_writer(store.engine).write_requests(rows)
    return rows


def window_params(hours: int = 3) -> dict[str, str]:
    start = NOW - timedelta(hours=hours)
    return {"start": start.isoformat().replace("+00:00", "Z"), "end": str(NOW.timestamp())}


@pytest.mark.parametrize("method", ["exact", "sketch"])
def test_latency_percentiles_per_model_equal_numpy_or_are_within_1_percent(
    api: Api, records, method
):
    response = api.get(
        "/api/v1/latency",
        params={**window_params(), "metric": "ttft", "group_by": "model", "method": method},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["metric"], body["unit"], body["method"]) == ("ttft", "s", method)
    assert body["relative_error"] == (0.0 if method == "exact" else pytest.approx(0.01))
    assert body["end"] == NOW.isoformat().replace("+00:00", "Z")
    groups = {g["labels"]["model"]: g for g in body["groups"]}
    assert set(groups) == {"llama-8b", "llama-70b"}
    start = NOW - timedelta(hours=3)
    for model, group in groups.items():
        values = [r.ttft_s for r in records if r.model == model and start <= r.start < NOW]
        expected = np.quantile(values, QS)
        assert group["count"] == len(values)
        got = [group["quantiles"][str(q)] for q in QS]
        tolerance = 1e-9 if method == "exact" else 0.01
        assert got == pytest.approx(list(expected), rel=tolerance)


def test_latency_filters_by_label_and_defaults_to_the_last_hour(api: Api, records):
    response = api.get("/api/v1/latency", params={"metric": "e2e", "tenant": "acme"})
    body = response.json()
    assert response.status_code == 200
    hour = [r for r in records if r.tenant == "acme" and r.start >= NOW - timedelta(hours=1)]
    assert body["start"] == (NOW - timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    assert [g["count"] for g in body["groups"]] == [len(hour)]
    assert body["groups"][0]["quantiles"]["0.5"] == pytest.approx(
        float(np.quantile([r.e2e_s for r in hour], 0.5))
    )


def test_throughput_counts_requests_errors_and_tokens_per_group(api: Api, records):
    body = api.get("/api/v1/throughput", params={**window_params(), "group_by": "instance"}).json()
    for group in body["groups"]:
        mine = [r for r in records if r.instance == group["labels"]["instance"]]
        assert group["requests"] == len(mine)
        assert group["errors"] == sum(r.is_error for r in mine)
        assert group["output_tokens"] == sum(r.output_tokens for r in mine)
        assert group["requests_per_s"] == pytest.approx(len(mine) / (3 * 3600))
    assert sum(g["requests"] for g in body["groups"]) == len(records)


def test_breakdown_reports_each_stage_share_of_end_to_end_time(api: Api, records):
    body = api.get("/api/v1/breakdown", params=window_params()).json()
    [group] = body["groups"]
    stages = {s["stage"]: s for s in group["stages"]}
    e2e = sum(r.e2e_s for r in records)
    assert group["e2e_seconds_total"] == pytest.approx(e2e)
    assert stages["decode"]["share"] == pytest.approx(sum(r.decode_s for r in records) / e2e)
    assert stages["gateway"]["share"] is None
    assert list(stages) == [
        "gateway",
        "route",
        "preprocess",
        "queue",
        "prefill",
        "kv_transfer",
        "decode",
        "postprocess",
    ]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"metric": "speed"}, "unknown metric"),
        ({"start": "yesterday"}, "RFC 3339"),
        ({"start": "2026-11-20T10:00:00"}, "time zone"),
        ({"quantiles": "0.5,2"}, "quantiles"),
        ({"group_by": "colour"}, "cannot group by"),
        ({"start": "0"}, "at most 400 days"),
        ({"start": str(NOW.timestamp() + 10)}, "after its start"),
        ({"method": "guess"}, "not valid"),
    ],
)
def test_a_bad_query_gets_the_one_error_shape(api: Api, params, message):
    response = api.get("/api/v1/latency", params=params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert message in error["message"] or message in str(error["details"])
    assert set(error) == {"code", "message", "details"}


def test_unknown_paths_use_the_error_shape_too(api: Api):
    response = api.get("/api/v1/nothing")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_healthz_reports_the_store_and_openapi_lists_the_routes(api: Api):
    # The first answer may be "starting" while the first store probe is out (issue 32).
    health = until(lambda: (h := api.get("/healthz")).json()["store"] != "unknown" and h, "probe")
    assert health.status_code == 200
    assert health.json()["store"] == "ok"
    paths = api.get("/openapi.json").json()["paths"]
    put = paths["/api/v1/slos/{name}"]["put"]
    assert set(put["requestBody"]["content"]) == {"application/yaml", "application/json"}
    assert {"/api/v1/latency", "/api/v1/throughput", "/api/v1/breakdown", "/api/v1/slos"} <= set(
        paths
    )
