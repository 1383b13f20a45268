"""A real Prometheus (Debian's ``prometheus``) scrapes ``infersight_desired_replicas{model}``
and the KEDA refusal counter from a running API (uvicorn on a free port, SQLite store holding
recommendations). Skipped only where the binary is not installed (CI installs it)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from infersight.api import create_app
from infersight.api.settings import ApiSettings
from infersight.core.scaling import Recommendation
from infersight.storage import migrate
from infersight.storage import scaling as scaling_store
from infersight.storage.engine import create_store_engine
from tests.doubles import NOW, FakeClock
from tests.peers import free_port, ready_server, serving_app
from tests.waiting import until

BINARY = shutil.which("prometheus")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        BINARY is None and not os.environ.get("CI"),
        reason="prometheus is not installed (Debian's prometheus package; CI installs it)",
    ),
]


def _rec(model: str, desired: int, stale: tuple[str, ...] = ()) -> Recommendation:
    return Recommendation(
        model, NOW.timestamp() - 20, 3, desired, desired, None, 8.0, "forecast", "r", stale
    )


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root: Path = tmp_path_factory.mktemp("scaling-interop")
    engine = create_store_engine(f"sqlite:///{root / 'store.db'}")
    migrate.upgrade(engine)
    scaling_store.record(engine, _rec("llama-8b", 5))
    scaling_store.record(engine, _rec("llama-70b", 9))
    scaling_store.record(engine, _rec("mixtral", 0, stale=("demand_rps",)))
    # The clock stands still: the recommendations stay 20 s old however slow the machine is.
    app = create_app(ApiSettings(run_jobs=False, metrics_cache_s=0), engine, FakeClock())
    try:
        with serving_app(app) as url:
            yield url
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def prometheus(api: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert BINARY is not None
    root = tmp_path_factory.mktemp("prometheus-scaling")
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {
                "job_name": "infersight-api",
                "static_configs": [{"targets": [api.removeprefix("http://")]}],
            }
        ],
    }
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    command = [
        BINARY,
        f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={root / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with ready_server(command, f"http://127.0.0.1:{port}") as url:
        yield url


def _vector(prometheus: str, expr: str) -> dict[str, float]:
    def answer() -> dict[str, float]:
        response = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
        body: dict[str, Any] = response.json()
        assert body["status"] == "success", (expr, body)
        return {
            json.dumps(r["metric"].get("model") or r["metric"].get("reason")): float(r["value"][1])
            for r in body["data"]["result"]
        }

    return until(answer, f"a series for {expr}")


def test_prometheus_scrapes_the_desired_replicas_of_each_usable_recommendation(
    prometheus: str,
) -> None:
    desired = _vector(prometheus, "infersight_desired_replicas")
    # The recommendation made with a stale input is not exported as a number.
    assert desired == {'"llama-70b"': 9.0, '"llama-8b"': 5.0}
    ages = _vector(prometheus, "infersight_scaling_recommendation_age_seconds")
    assert set(ages) == {'"llama-70b"', '"llama-8b"', '"mixtral"'}


def test_prometheus_counts_the_keda_endpoint_s_refusals(api: str, prometheus: str) -> None:
    assert httpx.get(f"{api}/api/v1/scaling/keda/mixtral", timeout=10).status_code == 503
    refusals = _vector(prometheus, 'infersight_scaling_keda_refusals_total{reason="stale_inputs"}')
    assert refusals == {'"stale_inputs"': 1.0}
