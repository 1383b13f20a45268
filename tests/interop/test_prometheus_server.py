"""A real Prometheus (Debian's ``prometheus``) scrapes a running API and sidecar, evaluates the
rules ``infersight slo export-rules`` wrote, and answers every Grafana panel's query.

Prometheus runs on a free loopback port with a one-second scrape and evaluation interval and
its TSDB in a temporary directory, and is stopped at the end. Skipped only where the binary
is not installed (CI installs it).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from infersight.alerts.prometheus_rules import rule_groups, to_yaml
from infersight.service.evaluation import default_policy
from tests.interop.conftest import SLO, Running
from tests.interop.test_grafana import BOARDS, _panels
from tests.peers import free_port, ready_server

BINARY = shutil.which("prometheus")
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        BINARY is None and not os.environ.get("CI"),
        reason="prometheus is not installed (Debian's prometheus package; CI installs it)",
    ),
]
#: What Grafana would put in place of the dashboards' variables.
GRAFANA_VARIABLES = {
    "$__rate_interval": "15s",
    "$slo": ".*",
    "$model": ".*",
    "$instance": ".*",
}


def _host(url: str) -> str:
    return url.removeprefix("http://")


@pytest.fixture(scope="module")
def prometheus(running: Running, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert BINARY is not None
    root = tmp_path_factory.mktemp("prometheus")
    (root / "rules.yml").write_text(to_yaml(rule_groups([SLO], default_policy())))
    config = {
        # /metrics computes every SLO's status at scrape time: give a busy CI machine room.
        "global": {"scrape_interval": "3s", "scrape_timeout": "3s", "evaluation_interval": "1s"},
        "rule_files": [str(root / "rules.yml")],
        "scrape_configs": [
            {"job_name": "infersight-api", "static_configs": [{"targets": [_host(running.api)]}]},
            {
                "job_name": "infersight-sidecar",
                "static_configs": [{"targets": [_host(running.sidecar)]}],
            },
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


def _query(prometheus: str, expr: str) -> dict[str, Any]:
    response = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    body: dict[str, Any] = response.json()
    assert body["status"] == "success", (expr, body)
    return body


def _vector(prometheus: str, expr: str, timeout_s: float = 30.0) -> dict[str, float]:
    """The instant vector of ``expr`` once it is non-empty, keyed by its labels as JSON."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = _query(prometheus, expr)["data"]["result"]
        if result:
            return {json.dumps(r["metric"], sort_keys=True): float(r["value"][1]) for r in result}
        assert time.monotonic() < deadline, f"no series for {expr} within {timeout_s} s"
        time.sleep(0.25)


def _up(prometheus: str) -> set[str]:
    """The jobs Prometheus has scraped successfully, once both have been."""
    jobs = {"infersight-api", "infersight-sidecar"}
    deadline = time.monotonic() + 30
    while True:
        up = {json.loads(labels)["job"] for labels in _vector(prometheus, "up == 1")}
        if up == jobs or time.monotonic() > deadline:
            return up
        time.sleep(0.25)


def test_prometheus_scrapes_the_api_and_the_sidecar(prometheus: str) -> None:
    assert _up(prometheus) == {"infersight-api", "infersight-sidecar"}
    accepted = _vector(prometheus, "infersight_collector_spans_accepted_total")
    assert sum(accepted.values()) >= 50
    selector = f'slo="{SLO.name}",window="1h"'
    [events] = _vector(prometheus, f"infersight_slo_window_events{{{selector}}}").values()
    assert events > 2000


def test_the_exported_recording_rules_compute_infersight_s_own_burn_rate(prometheus: str) -> None:
    # All the requests are within the last hour, so the hour's figures hold still.
    selector = f'slo="{SLO.name}",window="1h"'
    [recorded] = _vector(prometheus, f"slo:infersight_burn_rate{{{selector}}}").values()
    [exported] = _vector(prometheus, f"infersight_slo_burn_rate{{{selector}}}").values()
    assert recorded > 0
    assert recorded == pytest.approx(exported)
    alerts = _query(prometheus, "ALERTS")["data"]["result"]
    assert all(a["metric"]["slo"] == SLO.name for a in alerts)


@pytest.mark.parametrize("path", BOARDS, ids=[b.name for b in BOARDS])
def test_prometheus_answers_every_grafana_panel_query(prometheus: str, path: Path) -> None:
    _up(prometheus)
    board = json.loads(path.read_text(encoding="utf-8"))
    for panel in _panels(board):
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            _query(prometheus, expr)
