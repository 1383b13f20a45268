"""SLO definitions over HTTP: infersight/v1 and OpenSLO v1 documents, status, deletion."""

from __future__ import annotations

import json
from datetime import timedelta

import numpy as np
import pytest
import yaml

from infersight.core.errors import InvalidInput
from infersight.core.slo import Sli, SliKind, count_events
from infersight.core.window import Window
from infersight.service.specs import parse_spec, to_document
from infersight.storage.writer import open_writer
from tests.api.conftest import Api
from tests.doubles import NOW
from tests.factories import make_records

TTFT_SLO = """
apiVersion: infersight/v1
kind: SLO
metadata:
  name: chat-ttft
  description: 99 % of chat requests see their first token within 150 ms
spec:
  sli:
    latency: {metric: ttft, threshold: 150ms}
  selector: {model: llama-70b}
  window: 28d
  objective: "99%"
"""

OPENSLO_LATENCY = {
    "apiVersion": "openslo/v1",
    "kind": "SLO",
    "metadata": {"name": "tpot-openslo", "displayName": "TPOT"},
    "spec": {
        "description": "decode speed",
        "service": "chat",
        "indicator": {
            "metadata": {"name": "tpot"},
            "spec": {
                "thresholdMetric": {
                    "metricSource": {
                        "type": "infersight",
                        "spec": {"metric": "tpot", "selector": {"tenant": "acme"}},
                    }
                }
            },
        },
        "timeWindow": [{"duration": "30d", "isRolling": True}],
        "budgetingMethod": "Occurrences",
        "objectives": [{"displayName": "fast", "op": "lte", "value": 0.05, "target": 0.995}],
    },
}

OPENSLO_AVAILABILITY = {
    **OPENSLO_LATENCY,
    "metadata": {"name": "avail-openslo"},
    "spec": {
        **OPENSLO_LATENCY["spec"],
        "indicator": {
            "spec": {
                "ratioMetric": {
                    "counter": True,
                    "good": {"metricSource": {"type": "infersight",
                                              "spec": {"query": "successful_requests"}}},
                    "total": {"metricSource": {"type": "infersight",
                                               "spec": {"query": "requests"}}},
                }
            }
        },
        "objectives": [{"target": 0.999}],
    },
}  # fmt: skip


def test_an_slo_is_created_replaced_read_and_deleted(api: Api, store):
    records = make_records(
        np.random.default_rng(5), NOW - timedelta(hours=2), 2000, span=timedelta(hours=2)
    )
    open_writer(store.engine).write_requests(records)
    created = api.put("/api/v1/slos/chat-ttft", content=TTFT_SLO)
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["sli"] == {"latency": {"metric": "ttft", "threshold": "0.15s"}}
    assert api.put("/api/v1/slos/chat-ttft", content=TTFT_SLO).status_code == 200

    body = api.get("/api/v1/slos/chat-ttft").json()
    status = body["status"]
    window = Window.last(timedelta(days=28), NOW)
    expected = count_events(
        [r for r in records if r.model == "llama-70b" and r.start in window],
        Sli(SliKind.LATENCY, "ttft", 0.15),
    )
    assert status["objective"] == pytest.approx(0.99)
    assert status["events"] == expected.total
    # Long windows count latency from minute sketches: within the sketch's bucket of 150 ms.
    assert status["sli"] == pytest.approx(expected.good / expected.total, abs=0.02)
    assert status["error_budget_remaining"] == pytest.approx(
        max(0.0, 1 - (status["bad_events"] / status["events"]) / 0.01)
    )
    assert set(status["burn_rates"]) == {"5m", "30m", "1h", "2h", "6h", "1d", "3d"}
    assert body["alert"] is None
    assert [s["metadata"]["name"] for s in api.get("/api/v1/slos").json()["slos"]] == ["chat-ttft"]

    assert api.delete("/api/v1/slos/chat-ttft").status_code == 204
    missing = api.get("/api/v1/slos/chat-ttft")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert api.delete("/api/v1/slos/chat-ttft").status_code == 404


def test_json_and_openslo_documents_are_accepted(api: Api):
    response = api.put("/api/v1/slos/tpot-openslo", content=json.dumps(OPENSLO_LATENCY))
    assert response.status_code == 201, response.text
    spec = response.json()["spec"]
    assert spec == {
        "sli": {"latency": {"metric": "tpot", "threshold": "0.05s"}},
        "selector": {"tenant": "acme"},
        "window": "30d",
        "objective": 0.995,
    }
    availability = api.put(
        "/api/v1/slos/avail-openslo", content=yaml.safe_dump(OPENSLO_AVAILABILITY)
    )
    assert availability.json()["spec"]["sli"] == {"availability": {}}


def test_a_path_name_that_differs_from_the_document_is_refused(api: Api):
    response = api.put("/api/v1/slos/other", content=TTFT_SLO)
    assert response.status_code == 400
    assert "differs" in response.json()["error"]["message"]


def _variant(path: str, value) -> dict:
    document = json.loads(json.dumps(OPENSLO_LATENCY))
    node = document
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    return document


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (_variant("spec.budgetingMethod", "Timeslices"), "budgetingMethod"),
        (_variant("spec.timeWindow", [{"duration": "1M", "isRolling": False,
                                       "calendar": {"startTime": "2026-01-01"}}]), "rolling"),
        (_variant("spec.indicator.spec.thresholdMetric.metricSource",
                  {"type": "Prometheus", "spec": {"query": "x"}}), "'Prometheus'"),
        (_variant("spec.objectives", [{"op": "gte", "value": 1, "target": 0.9}]), "op lte"),
        (_variant("spec.objectives", [{"target": 0.9, "op": "lte", "value": 1}] * 2),
         "exactly one"),
        ({**OPENSLO_LATENCY, "spec": {**OPENSLO_LATENCY["spec"], "indicatorRef": "x"}},
         "indicatorRef"),
        ({**OPENSLO_LATENCY, "apiVersion": "sloth.slok.dev/v1"}, "unsupported apiVersion"),
        ({**OPENSLO_LATENCY, "kind": "SLI"}, "kind SLO"),
    ],
)  # fmt: skip
def test_openslo_documents_that_do_not_map_are_rejected_with_the_reason(
    api: Api, document, message
):
    with pytest.raises(InvalidInput, match=message):
        parse_spec(document)
    response = api.put(f"/api/v1/slos/{document['metadata']['name']}", content=json.dumps(document))
    assert response.status_code == 400
    assert message.strip("'") in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2", "not valid YAML"),
        ("- a\n- b\n", "mapping"),
        (TTFT_SLO.replace("window: 28d", "window: 28 days"), "duration"),
        (TTFT_SLO.replace('objective: "99%"', "objective: 1.5"), "objective"),
        (
            TTFT_SLO.replace("selector: {model: llama-70b}", "selector: {colour: red}"),
            "invalid SLO",
        ),
        (TTFT_SLO.replace("latency: {metric: ttft, threshold: 150ms}", "{}"), "exactly one"),
    ],
)
def test_invalid_infersight_documents_are_rejected(api: Api, text, message):
    response = api.put("/api/v1/slos/chat-ttft", content=text)
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error["message"] + json.dumps(error["details"])


def test_a_document_round_trips_through_its_infersight_form():
    spec = parse_spec(yaml.safe_load(TTFT_SLO))
    assert parse_spec(to_document(spec)) == spec
