"""The rule pack: the shipped file loads, covers every cause, and bad files fail clearly."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from infersight.alerts.rules import (
    DEFAULT_RULES,
    SUPPORT_BASE,
    Cause,
    load_rules,
    rule_pack_from_data,
)
from infersight.core.errors import InvalidInput
from infersight.core.signals import GPU, SERVER, STAGES


def _default() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(DEFAULT_RULES.read_text(encoding="utf-8"))
    return data


def test_the_default_pack_has_a_rule_for_every_cause_but_unknown() -> None:
    pack = load_rules()
    # `decode_bound` is only ever a fallback: it is what the GPU causes degrade to.
    assert {r.cause for r in pack.causes} == set(Cause) - {Cause.UNKNOWN, Cause.DECODE_BOUND}
    assert Cause.DECODE_BOUND in {f.cause for f in pack.fallbacks}
    # A cause may have several rules (a degraded instance is slow in decode, slow end to end,
    # or it fails; a busy GPU is saturated by its model's traffic, or by one instance's larger
    # share of it); the engine keeps the strongest match per cause.
    count = Counter(r.cause for r in pack.causes)
    assert count[Cause.INSTANCE_DEGRADED] == 3
    assert count[Cause.GPU_SATURATED] == count[Cause.MEMORY_BANDWIDTH_BOUND] == 2
    # The gap between client and engine grows in first tokens, or end to end.
    assert count[Cause.GATEWAY_NETWORK] == 2
    assert {c for c, n in count.items() if n > 1} == {
        Cause.INSTANCE_DEGRADED,
        Cause.GPU_SATURATED,
        Cause.MEMORY_BANDWIDTH_BOUND,
        Cause.GATEWAY_NETWORK,
    }


def test_every_rule_declares_what_it_needs_and_what_merely_supports_it() -> None:
    pack = load_rules()
    needs = {r.cause: r.needs for r in pack.causes}
    assert needs[Cause.GPU_THROTTLED] == {GPU}
    assert needs[Cause.KV_CACHE_PRESSURE] == {SERVER}
    assert needs[Cause.QUEUE_BACKLOG] == {STAGES}
    assert needs[Cause.LONG_INPUTS] == set()  # request records are always there
    assert needs[Cause.OVERLOAD] == set()
    for rule in (*pack.causes, *pack.fallbacks):
        for family in rule.needs | rule.supports:
            assert rule.missing[family].strip(), (rule.cause, family)
        assert rule.weight <= 1.0
    # A fallback always lacks a family (that of the rule it stands in for): its best score is
    # below the worst score of every rule it covers.
    for fb in pack.fallbacks:
        best = fb.weight * (1 - pack.unchecked_penalty)
        for cause in fb.covers:
            assert all(best < r.weight * SUPPORT_BASE for r in pack.rules_of(cause))
    # The essay's table: each pattern has its fallback.
    covered = {cause for fb in pack.fallbacks for cause in fb.covers}
    assert {Cause.GPU_THROTTLED, Cause.GPU_SATURATED, Cause.MEMORY_BANDWIDTH_BOUND} <= covered
    assert {Cause.QUEUE_BACKLOG, Cause.PREPROCESSING_SLOW, Cause.KV_CACHE_PRESSURE} <= covered
    assert {Cause.INSTANCE_DEGRADED, Cause.HOST_BOUND} <= covered


def _rule(data: dict[str, Any], cause: str) -> dict[str, Any]:
    rule: dict[str, Any] = next(r for r in data["spec"]["causes"] if r["cause"] == cause)
    return rule


def _fallback(data: dict[str, Any], cause: str) -> dict[str, Any]:
    rule: dict[str, Any] = next(r for r in data["spec"]["fallbacks"] if r["cause"] == cause)
    return rule


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
        (lambda d: d.update(apiVersion="infersight/v3"), "apiVersion infersight/v1 or"),
        (lambda d: _rule(d, "gpu_throttled").update(needs=["nvml"]), "unknown signal families"),
        (lambda d: _rule(d, "gpu_throttled").update(needs=[]), "declares neither"),
        (lambda d: _rule(d, "long_inputs").update(supports=["stages", "gpu"]), "never reads"),
        (
            lambda d: _rule(d, "host_bound").update(needs=[], supports=["gpu", "server", "stages"]),
            "reads in `when` a family it does not need",
        ),
        (
            lambda d: _rule(d, "kv_cache_pressure").update(needs=[], supports=["server"]),
            "no `any` condition can hold",
        ),
        (lambda d: _rule(d, "queue_backlog")["missing"].pop("server"), "no `missing` sentence"),
        (lambda d: _rule(d, "overload")["missing"].update(server=""), "is a sentence"),
        (lambda d: _rule(d, "overload").update(covers=["queue_backlog"]), "unknown rule keys"),
        (lambda d: _fallback(d, "decode_bound").update(covers=[]), "needs `covers`"),
        (lambda d: _fallback(d, "decode_bound").update(covers=["overload"]), "need no signal"),
        (lambda d: _fallback(d, "decode_bound").update(covers=["gremlins"]), "unknown cause"),
        (
            lambda d: _fallback(d, "decode_bound")["missing"].pop("gpu"),
            "a sentence for each family gpu_throttled needs",
        ),
        (lambda d: d["spec"].update(unchecked_penalty=1.0), "unchecked_penalty"),
        (lambda d: _fallback(d, "decode_bound").update(weight=0.9), "could outscore"),
        (lambda d: d["spec"].update(fallback=[]), "unknown `spec` keys"),
    ],
    ids=[
        "a file of another kind is refused",
        "a cause outside the vocabulary is refused",
        "a signal outside core.signals is refused",
        "a weight above one is refused",
        "a missing symptom is refused",
        "a misspelt threshold is refused",
        "a rule with no conditions is refused",
        "an unknown format version is refused",
        "a family outside core.signals is refused",
        "a rule reading GPU signals must declare the family",
        "a rule declaring a family it never reads is refused",
        "a `when` signal of a merely supporting family is refused",
        "a rule whose `any` needs an undeclared family is refused",
        "a declared family without its missing-evidence sentence is refused",
        "an empty missing-evidence sentence is refused",
        "`covers` outside the fallbacks is refused",
        "a fallback covering nothing is refused",
        "a fallback covering a rule that is never blind is refused",
        "a fallback covering an unknown cause is refused",
        "a fallback without a sentence for what its covered rules need is refused",
        "a penalty of 1 is refused",
        "a fallback that could outscore the rules it stands in for is refused",
        "a misspelt spec key is refused",
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


def _v1(data: dict[str, Any]) -> dict[str, Any]:
    """The default pack written in the v1 format: no declarations, no fallbacks."""
    old = copy.deepcopy(data)
    old["apiVersion"] = "infersight/v1"
    old["spec"].pop("fallbacks")
    old["spec"].pop("unchecked_penalty", None)
    for rule in old["spec"]["causes"]:
        for key in ("needs", "supports", "missing"):
            rule.pop(key, None)
    return old


def test_a_v1_pack_is_converted_with_needs_from_what_its_rules_decide_on() -> None:
    pack = rule_pack_from_data(_v1(_default()))
    by = {r.cause: r for r in pack.causes}
    assert by[Cause.GPU_THROTTLED].needs == {GPU}  # `any` made of GPU signals only
    assert by[Cause.HOST_BOUND].needs == {GPU}  # `when: util_gpu`
    assert by[Cause.HOST_BOUND].supports == {SERVER, STAGES}
    assert by[Cause.LONG_INPUTS].needs == set()
    assert by[Cause.KV_CACHE_PRESSURE].missing[SERVER] == "kv cache pressure not checked"
    assert pack.fallbacks == ()


def test_v2_keys_in_a_v1_pack_are_refused() -> None:
    old = _v1(_default())
    old["spec"]["causes"][0]["needs"] = ["server"]
    with pytest.raises(InvalidInput, match="unknown rule keys"):
        rule_pack_from_data(old)
