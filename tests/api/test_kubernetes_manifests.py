"""The Kubernetes examples under ``deploy/kubernetes/``: the HPA and the Secret validate against
the Kubernetes schemas (``kubernetes-validate``, strict: unknown fields fail), the KEDA objects
against ``scaledobject.schema.json`` (assembled from KEDA's documented fields; KEDA's CRDs are
not among kubernetes-validate's schemas), and the trigger reads what the KEDA endpoint answers."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import pytest
import yaml

from infersight.core.scaling import Recommendation
from infersight.storage import scaling as scaling_store
from tests.api.conftest import Api
from tests.conftest import Store
from tests.doubles import NOW

ROOT = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KUBERNETES = "1.30.0"
KEDA_SCHEMA = json.loads((ROOT / "scaledobject.schema.json").read_text(encoding="utf-8"))


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / name).read_text(encoding="utf-8")) if d]


def validate(document: dict[str, Any]) -> None:
    if document["apiVersion"].startswith("keda.sh/"):
        jsonschema.validate(document, KEDA_SCHEMA)
    else:
        kubernetes_validate.validate(document, KUBERNETES, strict=True)


def scaled_object() -> dict[str, Any]:
    return next(d for d in documents("keda-scaledobject.yaml") if d["kind"] == "ScaledObject")


@pytest.mark.parametrize(
    "name", ["keda-scaledobject.yaml", "keda-scaledobject-pd.yaml", "hpa-external.yaml"]
)
def test_every_manifest_validates(name: str) -> None:
    found = documents(name)
    assert found
    for document in found:
        validate(document)


@pytest.mark.parametrize(
    ("name", "kind", "path"),
    [
        ("keda-scaledobject.yaml", "ScaledObject", ("spec", "fallbak")),
        ("keda-scaledobject.yaml", "ScaledObject", ("spec", "triggers", 0, "metricTyp")),
        ("hpa-external.yaml", "HorizontalPodAutoscaler", ("spec", "maxReplica")),
    ],
)
def test_a_misspelt_field_fails_validation(name: str, kind: str, path: tuple[Any, ...]) -> None:
    document = copy.deepcopy(next(d for d in documents(name) if d["kind"] == kind))
    target: Any = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = 1
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(document)


def test_the_keda_trigger_uses_an_average_value_target_of_1_with_a_fallback() -> None:
    # For an external metric the HPA asks for ceil(metric / averageValue) replicas with an
    # AverageValue target, and ceil(current × metric / value) with a Value one; KEDA applies
    # fallback to AverageValue metrics only. A recommendation is a replica count: AverageValue 1.
    spec = scaled_object()["spec"]
    [trigger] = spec["triggers"]
    assert trigger["type"] == "metrics-api"
    assert trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["targetValue"] == "1"
    assert spec["fallback"]["failureThreshold"] >= 1
    assert spec["minReplicaCount"] <= spec["fallback"]["replicas"] <= spec["maxReplicaCount"]
    [hpa] = documents("hpa-external.yaml")
    [metric] = hpa["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == "infersight_desired_replicas"
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}


def test_the_keda_trigger_reads_the_desired_replicas_the_endpoint_answers(
    api: Api, store: Store
) -> None:
    [trigger] = scaled_object()["spec"]["triggers"]
    url = urlparse(trigger["metadata"]["url"])
    model = url.path.rsplit("/", 1)[-1]
    scaling_store.record(
        store.engine,
        Recommendation(model, NOW.timestamp() - 5, 3, 6, 6, 2, 20.0, "forecast", "r", ()),
    )
    body: Any = api.get(url.path).json()
    for key in trigger["metadata"]["valueLocation"].split("."):
        body = body[key]
    assert body == 6
    auth = next(
        d for d in documents("keda-scaledobject.yaml") if d["kind"] == "TriggerAuthentication"
    )
    assert trigger["metadata"]["authMode"] == "bearer"
    assert [ref["parameter"] for ref in auth["spec"]["secretTargetRef"]] == ["token"]


def test_the_pd_example_polls_each_pool_of_one_model() -> None:
    objects = [d for d in documents("keda-scaledobject-pd.yaml") if d["kind"] == "ScaledObject"]
    urls = [urlparse(o["spec"]["triggers"][0]["metadata"]["url"]) for o in objects]
    assert len({u.path for u in urls}) == 1
    assert sorted(u.query for u in urls) == ["pool=decode", "pool=prefill"]
    assert len({o["spec"]["scaleTargetRef"]["name"] for o in objects}) == 2
