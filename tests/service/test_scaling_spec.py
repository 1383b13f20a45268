"""ScalingPolicy documents: parse, serialise, round-trip, and errors that name the field."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from infersight.core.errors import InvalidInput
from infersight.core.scaling import ScalingPolicy
from infersight.service.scaling_spec import parse_policies, parse_policy, to_document, to_yaml

FULL = """
apiVersion: infersight/v1
kind: ScalingPolicy
metadata: {name: chat}
spec:
  model: llama-70b
  replicas: {min: 2, max: 24}
  leadTime: 12m
  headroom: 0.3
  historyWeeks: 3
  reactive:
    queueFactor: 3
    kvUsageHigh: 0.85
    gpuUtil: {up: 0.75, down: 0.25}
    burnRateHigh: 6
  scaleIn: {cooldown: 20m, maxFraction: 0.2}
  staleAfter: 2m
"""


def test_a_full_document_parses_to_the_policy() -> None:
    policy = parse_policy(yaml.safe_load(FULL))
    assert policy == ScalingPolicy(
        name="chat",
        model="llama-70b",
        min_replicas=2,
        max_replicas=24,
        lead_time_s=720.0,
        headroom=0.3,
        history_weeks=3,
        queue_factor=3.0,
        kv_usage_high=0.85,
        gpu_util_up=0.75,
        gpu_util_down=0.25,
        scale_in_cooldown_s=1200.0,
        max_scale_in_fraction=0.2,
        burn_rate_high=6.0,
        stale_after_s=120.0,
    )


def test_a_minimal_document_takes_the_essays_defaults() -> None:
    policy = parse_policy(
        {"apiVersion": "infersight/v1", "kind": "ScalingPolicy", "metadata": {"name": "d"}}
    )
    assert policy == ScalingPolicy(name="d", model=None)
    assert (policy.lead_time_s, policy.scale_in_cooldown_s, policy.max_scale_in_fraction) == (
        600.0,
        900.0,
        0.25,
    )
    assert (policy.gpu_util_up, policy.gpu_util_down, policy.headroom) == (0.7, 0.3, 0.4)


def test_documents_round_trip() -> None:
    policy = parse_policy(yaml.safe_load(FULL))
    assert parse_policies(to_yaml(policy)) == [policy]
    every_model = ScalingPolicy(name="all", model=None, lead_time_s=90.5, scale_in_cooldown_s=0)
    document = to_document(every_model)
    assert "model" not in document["spec"]
    assert parse_policy(document) == every_model


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 50),
    st.integers(1, 50),
    st.floats(min_value=0, max_value=3600, allow_nan=False),
    st.floats(min_value=0, max_value=1),
)
def test_any_valid_policy_round_trips(lo: int, span: int, lead: float, fraction: float) -> None:
    policy = ScalingPolicy(
        name="p",
        model="m",
        min_replicas=lo,
        max_replicas=lo + span,
        lead_time_s=lead,
        max_scale_in_fraction=fraction,
    )
    assert parse_policies(to_yaml(policy)) == [policy]


def test_a_multi_document_file_reads_every_policy() -> None:
    text = FULL + "---\n" + to_yaml(ScalingPolicy(name="default", model=None))
    assert [p.name for p in parse_policies(text)] == ["chat", "default"]


def _doc(**spec: object) -> dict[str, object]:
    return {
        "apiVersion": "infersight/v1",
        "kind": "ScalingPolicy",
        "metadata": {"name": "p"},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("document", "field"),
    [
        pytest.param(_doc(replicas={"min": 5, "max": 2}), "spec.replicas.max", id="max below min"),
        pytest.param(_doc(replicas={"min": -1}), "spec.replicas.min", id="negative min"),
        pytest.param(_doc(replicas={"min": "many"}), "spec.replicas.min", id="min not a number"),
        pytest.param(_doc(leadTime="ten minutes"), "spec.leadTime", id="lead time not a duration"),
        pytest.param(_doc(leadTime=-5), "spec.leadTime", id="negative lead time"),
        pytest.param(_doc(headroom=9), "spec.headroom", id="headroom out of range"),
        pytest.param(
            _doc(reactive={"gpuUtil": {"up": 0.3, "down": 0.5}}),
            "spec.reactive.gpuUtil.down",
            id="down threshold above up",
        ),
        pytest.param(
            _doc(scaleIn={"maxFraction": 2}), "spec.scaleIn.maxFraction", id="fraction above 1"
        ),
        pytest.param(_doc(scaleIn={"cooldwn": "5m"}), "spec.scaleIn.cooldwn", id="misspelt key"),
        pytest.param(_doc(staleAfter=0), "spec.staleAfter", id="zero staleness"),
        pytest.param(
            {"apiVersion": "infersight/v1", "kind": "ScalingPolicy", "spec": {}},
            "metadata",
            id="no metadata",
        ),
    ],
)
def test_a_bad_document_names_the_field(document: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_policy(document)
    assert field in caught.value.message


def test_the_wrong_kind_or_version_is_rejected() -> None:
    with pytest.raises(InvalidInput, match="kind ScalingPolicy"):
        parse_policy({"apiVersion": "infersight/v1", "kind": "SLO", "metadata": {"name": "x"}})
    with pytest.raises(InvalidInput, match="apiVersion infersight/v1"):
        parse_policy({"apiVersion": "v2", "kind": "ScalingPolicy", "metadata": {"name": "x"}})
    with pytest.raises(InvalidInput, match="mapping"):
        parse_policies("- just\n- a list\n")
    with pytest.raises(InvalidInput, match="no ScalingPolicy"):
        parse_policies("")
    with pytest.raises(InvalidInput, match="YAML"):
        parse_policies("a: [unclosed")


def test_replace_keeps_validation() -> None:
    policy = parse_policy(yaml.safe_load(FULL))
    with pytest.raises(InvalidInput):
        dataclasses.replace(policy, max_replicas=1)
