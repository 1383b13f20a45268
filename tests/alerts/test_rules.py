"""The rule pack: the shipped file loads, covers every cause, and bad files fail clearly."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.rules import DEFAULT_RULES, Cause, load_rules, rule_pack_from_data
from core.errors import InvalidInput


def _default() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_RULES.read_text(encoding="utf-8"))
    return data


def test_the_default_pack_has_a_rule_for_every_cause_but_unknown() -> None:
    pack = load_rules()
    assert {r.cause for r in pack.causes} == set(Cause) - {Cause.UNKNOWN}
    # A cause may have several rules (a degraded instance is slow, or it fails); the engine
    # keeps the strongest match per cause.
    degraded = [r for r in pack.causes if r.cause is Cause.INSTANCE_DEGRADED]
    assert len(degraded) == 2
    assert len(pack.causes) == len(set(Cause)) - 1 + len(degraded) - 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(kind="Scenario"), "kind DiagnosisRules"),
        (lambda d: d["spec"]["causes"][0].update(cause="gremlins"), "unknown cause"),
        (lambda d: d["spec"]["causes"][0]["any"][0].update(signal="vibes"), "unknown signal"),
        (lambda d: d["spec"]["causes"][0].update(weight=2.0), "weight"),
        (lambda d: d["spec"]["symptoms"].pop("tpot"), "exactly the symptoms"),
        (lambda d: d["spec"]["causes"][0]["any"][0].update(typo=1), "unknown condition keys"),
        (lambda d: d["spec"]["causes"][0].update(any=[], when=[]), "needs `when` or `any`"),
    ],
    ids=[
        "a file of another kind is refused",
        "a cause outside the vocabulary is refused",
        "a signal outside core.signals is refused",
        "a weight above one is refused",
        "a missing symptom is refused",
        "a misspelt threshold is refused",
        "a rule with no conditions is refused",
    ],
)
def test_invalid_rule_packs_are_refused(edit: Any, message: str) -> None:
    data = copy.deepcopy(_default())
    edit(data)
    with pytest.raises(InvalidInput, match=message):
        rule_pack_from_data(data)


def test_an_unreadable_file_is_invalid_input(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("spec: [unclosed", encoding="utf-8")
    with pytest.raises(InvalidInput, match="cannot read rule pack"):
        load_rules(path)
