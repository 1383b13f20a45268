"""The Grafana dashboards in ``dashboards/grafana/``: valid dashboard models whose every panel
queries only metrics that infersight exports, as read from a running API's and sidecar's
``/metrics`` (not from a list kept next to the dashboards)."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import Running

BOARDS = sorted(
    Path(str(resources.files("infersight.dashboards").joinpath("grafana"))).glob("*.json")
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_IDENTIFIER = re.compile(r"(?<![\w$.])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
    "atan2",
    "group_left",
    "group_right",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, aggregations, keywords, label
    matchers, ranges and grouping labels removed)."""
    bare = _GROUPING.sub(" ", _RANGES.sub(" ", _MATCHERS.sub(" ", _STRING.sub(" ", expr))))
    return {
        name
        for name, call in _IDENTIFIER.findall(bare)
        if not call and name.lower() not in _KEYWORDS
    }


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in board["panels"]:
        out += [panel, *panel.get("panels", [])]
    return [p for p in out if p["type"] != "row"]


@pytest.fixture(params=BOARDS, ids=[b.name for b in BOARDS])
def board(request: pytest.FixtureRequest) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(request.param.read_text(encoding="utf-8"))
    return board


def test_both_dashboards_ship_inside_the_package() -> None:
    assert [b.name for b in BOARDS] == ["infersight-collector.json", "infersight-slos.json"]


def test_the_metric_name_reader_skips_functions_labels_and_ranges() -> None:
    expr = (
        'sum by (instance, reason) (rate(a_total{instance=~"$instance",x="and"}[$__rate_interval]))'
        " / on (instance) group_left max without (le) (b:c) > bool 0"
    )
    assert metric_names(expr) == {"a_total", "b:c"}


def test_a_dashboard_is_a_valid_grafana_model_on_a_prometheus_datasource_variable(
    board: dict[str, Any],
) -> None:
    assert isinstance(board["schemaVersion"], int)
    assert board["schemaVersion"] >= 36
    assert board["uid"]
    assert board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in _panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        grid = panel["gridPos"]
        assert grid["x"] >= 0
        assert grid["x"] + grid["w"] <= 24
        assert grid["h"] > 0
        refs = [t["refId"] for t in panel["targets"]]
        assert refs, panel["title"]
        assert len(refs) == len(set(refs)), panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert metric_names(variable["query"]["query"].removeprefix("label_values"))


@pytest.mark.e2e
def test_every_panel_queries_only_metrics_infersight_exports(
    board: dict[str, Any], running: Running
) -> None:
    exported = running.exported()
    assert "infersight_slo_burn_rate" in exported  # the scrape did reach both services
    assert "infersight_collector_spans_received_total" in exported
    for panel in _panels(board):
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, f"{panel['title']}: no metric in {target['expr']!r}"
            assert names <= exported, f"{panel['title']}: {sorted(names - exported)} not exported"
