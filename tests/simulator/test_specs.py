"""Profile and scenario files parse at the edge into validated types, with clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from infersight.core.errors import InvalidInput, NotFound
from infersight.simulator.faults import EXPECTED_CAUSE, FaultKind
from infersight.simulator.specs import (
    load_profile,
    load_scenario,
    parse_duration,
    scenario_from_data,
    shipped_scenarios,
)


def test_every_fault_kind_has_a_shipped_single_fault_scenario() -> None:
    names = shipped_scenarios()
    assert "quiet-day" in names
    assert "mixed-incident" in names
    for kind in FaultKind:
        assert f"fault-{kind.value.replace('_', '-')}" in names


@pytest.mark.parametrize("name", shipped_scenarios())
def test_shipped_scenarios_parse_and_name_their_ground_truth(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert len(scenario.instances) == 4
    for truth in scenario.ground_truth():
        assert truth.instance in scenario.instances
        assert scenario.start <= truth.start < truth.end
        assert truth.expected_cause == EXPECTED_CAUSE[truth.kind]
    if name.startswith("fault-"):
        assert len(scenario.ground_truth()) == 1


def test_profiles_derive_kv_capacity_from_memory() -> None:
    small, large = load_profile("llama-3.1-8b-h200x1"), load_profile("llama-3.1-70b-h200x4")
    # 0.9 × 140 GiB − 19 GiB of weights and activations, at 128 KiB per token.
    assert 800_000 < small.kv_cache_tokens < 950_000
    assert large.tensor_parallel == 4
    assert large.kv_cache_tokens > small.kv_cache_tokens


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("90s", 90.0), ("15m", 900.0), ("1h30m", 5400.0), ("1d", 86400.0), (5, 5.0)],
)
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_a_bad_duration_is_invalid_input() -> None:
    with pytest.raises(InvalidInput):
        parse_duration("soon")


def _minimal() -> dict[str, object]:
    return yaml.safe_load(
        """
apiVersion: infersight/v1
kind: Scenario
metadata: {name: tiny}
spec:
  duration: 10m
  fleet:
    - profile: llama-3.1-8b-h200x1
      instances: [a, b]
      arrival: {process: poisson, rate: 2}
      mix:
        input: {median: 100, sigma: 0.5}
        output: {kind: fixed, median: 20}
  faults:
    - {kind: thermal_throttle, instance: a, start: 1m, end: 2m}
"""
    )


def test_a_minimal_scenario_takes_defaults() -> None:
    scenario = scenario_from_data(_minimal())
    assert scenario.instances == ("a", "b")
    (fault,) = scenario.faults
    assert fault.magnitude == pytest.approx(0.55)
    assert fault.start_s == 60.0


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("apiVersion",), "infersight/v2"),
        (("spec", "faults", 0, "instance"), "nowhere"),
        (("spec", "faults", 0, "kind"), "meteor_strike"),
        (("spec", "fleet", 0, "arrival", "process"), "chaos"),
        (("spec", "fleet", 0, "profile"), "no-such-profile"),
        (("spec", "faults", 0, "magnitude"), 3.0),
    ],
)
def test_invalid_scenarios_are_refused_with_infersight_errors(
    path: tuple[str | int, ...], value: object
) -> None:
    data = _minimal()
    node: object = data
    for key in path[:-1]:
        node = node[key]  # type: ignore[index]
    node[path[-1]] = value  # type: ignore[index]
    with pytest.raises((InvalidInput, NotFound)):
        scenario_from_data(data)


def test_a_missing_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        load_scenario(tmp_path / "absent.yaml")


def test_a_diurnal_peak_is_a_time_of_day_whatever_the_scenario_start() -> None:
    data = _minimal()
    data["spec"]["fleet"][0]["arrival"] = {  # type: ignore[index]
        "process": "diurnal",
        "mean_rate": 10,
        "amplitude": 0.5,
        "peak": "14h",
    }
    for start_hour, peak_offset_s in ((0, 14 * 3600.0), (14, 0.0), (20, 18 * 3600.0)):
        data["spec"]["start"] = f"2026-03-02T{start_hour:02d}:00:00Z"  # type: ignore[index]
        scenario = scenario_from_data(data)
        process = scenario.deployments[0].arrival
        at_peak = process.rates(np.array([peak_offset_s]))[0]
        assert at_peak == pytest.approx(process.max_rate)
