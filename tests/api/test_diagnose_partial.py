"""Diagnosis over a store without GPU telemetry, through the API (SQLite and PostgreSQL).

The compressed thermal-throttle scenario (``bench/harness/scenarios.py``) stored without its GPU
samples, as from sidecars with ``--gpu-source none``: ``POST /api/v1/diagnose`` and the
incident the evaluation job opens (``GET /api/v1/incidents``) both name ``decode_bound`` on the
throttled instance and say which evidence was missing; the same store with the GPU samples
says ``gpu_throttled`` with nothing missing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from bench.harness import scenarios
from infersight.core.query import Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.storage import slo_store
from tests.api.conftest import Api
from tests.conftest import Store

THROTTLED = "vllm-70b-0"
MISSING = (
    f"no GPU samples for {THROTTLED}: cannot tell compute from memory bandwidth, "
    "nor see clock throttling"
)


def _iso(ts: Any) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def _stored(store: Store, gpu: bool) -> Any:
    scenario, batch = scenarios.simulate_cached("fault-thermal-throttle")
    scenarios.store_batch(store.engine, batch if gpu else scenarios.without_gpu(batch))
    return scenario


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu telemetry", "no gpu telemetry"])
def test_diagnose_says_what_the_partial_telemetry_could_not_show(
    store: Store, gpu: bool, api: Api
) -> None:
    scenario = _stored(store, gpu)
    incident, _ = scenarios.windows(scenario)
    response = api.request(
        "POST", "/api/v1/diagnose", json={"start": _iso(incident.start), "end": _iso(incident.end)}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["instance"] == THROTTLED
    if gpu:
        assert body["cause"] == "gpu_throttled"
        assert body["missing_evidence"] == []
    else:
        assert body["cause"] == "decode_bound"
        assert body["missing_evidence"] == [MISSING]
        assert body["confidence"] < 0.5
        assert {"tpot_p90", "decode_per_token_mean"} <= {e["signal"] for e in body["evidence"]}
        assert all("missing_evidence" in a for a in body["alternatives"])


def test_an_incident_without_gpu_telemetry_carries_its_missing_evidence(
    store: Store, make_api: Callable[..., Api]
) -> None:
    scenario = _stored(store, gpu=False)
    api = make_api()
    tpot = SloSpec(
        "70b-tpot",
        Sli(SliKind.LATENCY, "tpot", 0.03),
        0.99,
        timedelta(days=7),
        Selector(model="meta-llama/Llama-3.1-70B-Instruct"),
    )
    incident_window, _ = scenarios.windows(scenario)
    slo_store.put_slo(api.app.state.context.engine, tpot, scenario.start)
    evaluator = api.app.state.context.evaluator
    assert evaluator.run(incident_window.start).changes == ()
    at = incident_window.start + timedelta(minutes=6)
    api.clock.now = at
    assert [t.value for _, t in evaluator.run(at).changes] == ["opened"]
    [alert] = api.get("/api/v1/incidents").json()["incidents"]
    assert alert["diagnosis"]["cause"] == "decode_bound"
    assert alert["diagnosis"]["instance"] == THROTTLED
    assert alert["diagnosis"]["missing_evidence"] == [MISSING]
