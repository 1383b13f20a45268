"""The attribution mapping and its pure parts (#34): presets, rules and their precedence,
the document, the fill (the engine's own value wins) and top-N folding."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from infersight.core.attribution import (
    OTHER,
    PRESETS,
    AttributeRef,
    Attribution,
    fill,
    merged,
    parse_setting,
    top_values,
)
from infersight.core.errors import InvalidInput, InvalidRecord
from infersight.service.attribution import read_attribution

LITELLM_SPAN = {
    "metadata.user_api_key_team_alias": "search",
    "metadata.user_api_key_alias": "ranker-prod",
    "metadata.user_api_key_team_id": "team-7f3",
    "gen_ai.request.model": "llama-70b",
}


def test_the_litellm_preset_reads_team_and_key_alias() -> None:
    mapping = parse_setting("litellm")
    named, own = mapping.resolve(LITELLM_SPAN, {})
    assert named == {"tenant": "search", "team": "search", "workload": "ranker-prod"}
    assert own
    with_org = {**LITELLM_SPAN, "metadata.user_api_key_org_alias": "acme"}
    assert mapping.resolve(with_org, {})[0]["tenant"] == "acme"


def test_rules_come_before_presets_and_read_resource_attributes() -> None:
    mapping = parse_setting("openai-sdk; tenant=customer|resource.customer, team=resource.dept")
    assert mapping.describe()["tenant"][:2] == ["customer", "resource.customer"]
    resource = {"service.name": "support-bot", "tenant.id": "globex", "dept": "cx"}
    named, own = mapping.resolve({}, resource)
    assert named == {"tenant": "globex", "team": "cx", "workload": "support-bot"}
    assert not own  # only the resource named them: true of every span of that service
    named, own = mapping.resolve({"customer": "initech"}, resource)
    assert named["tenant"] == "initech"
    assert own
    assert mapping.source == "openai-sdk+rules"


def test_llm_d_headers_as_captured_array_attributes() -> None:
    mapping = parse_setting("llm-d")
    span = {
        "http.request.header.x-gateway-inference-fairness-id": ("tenant-a",),
        "http.request.header.x-gateway-inference-objective": ["batch"],
    }
    assert mapping.resolve(span, {})[0] == {"tenant": "tenant-a", "workload": "batch"}


def test_empty_and_unusable_values_fall_through_to_the_next_attribute() -> None:
    mapping = parse_setting("tenant=a|b|c")
    assert mapping.resolve({"a": "  ", "b": b"bytes", "c": 42}, {})[0] == {"tenant": "42"}
    assert mapping.resolve({"a": "x" * 1000}, {})[0]["tenant"] == "x" * 256


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "names no preset"),
        ("litelm", "unknown attribution preset"),
        ("colour=a", "unknown attribution dimension"),
        ("tenant=", "names no attribute"),
        ("tenant=a b", "without spaces"),
    ],
)
def test_bad_settings_are_refused_in_words(text: str, words: str) -> None:
    with pytest.raises(InvalidInput, match=words):
        parse_setting(text)


def test_every_preset_names_known_dimensions() -> None:
    for preset in PRESETS.values():
        assert preset.rules
        assert set(preset.rules) <= {"tenant", "team", "workload", "adapter"}


def test_the_document_and_its_errors() -> None:
    text = (
        "apiVersion: infersight/v1\nkind: Attribution\nmetadata: {name: gw}\n"
        "spec: {presets: [litellm, llm-d], rules: {workload: [resource.service.name]}}\n"
    )
    mapping = read_attribution(text)
    assert mapping.presets == ("litellm", "llm-d")
    assert mapping.describe()["workload"][0] == "resource.service.name"
    with pytest.raises(InvalidInput, match="topN"):
        read_attribution(text.replace("presets:", "topN: 3, presets:"))
    with pytest.raises(InvalidInput, match="unknown attribution preset"):
        read_attribution(text.replace("presets: [litellm, llm-d]", "presets: [nope]"))
    with pytest.raises(InvalidInput, match="names no preset or rule"):
        read_attribution(
            text.replace(
                "presets: [litellm, llm-d], rules: {workload: [resource.service.name]}",
                "presets: []",
            )
        )
    with pytest.raises(InvalidInput, match="one Attribution document"):
        read_attribution(text + "---\n" + text.replace("name: gw", "name: other"))


def test_fill_keeps_the_engines_own_values() -> None:
    labels = {"tenant": "engine", "team": "", "workload": "", "adapter": ""}
    assert fill(labels, {"tenant": "gw", "team": "ml", "workload": ""}) == {"team": "ml"}
    assert merged({"tenant": "a"}, {"tenant": "b", "team": "c"}) == {
        "tenant": "a",
        "team": "c",
        "workload": "",
        "adapter": "",
    }


def test_an_attribution_is_validated() -> None:
    start = datetime(2026, 12, 7, tzinfo=UTC)
    with pytest.raises(InvalidRecord, match="at least one dimension"):
        Attribution("a" * 32, "b" * 16, start, 1.0)
    with pytest.raises(InvalidRecord, match="trace_id"):
        Attribution("nothex", "b" * 16, start, 1.0, tenant="x")
    with pytest.raises(InvalidRecord, match="duration_s"):
        Attribution("a" * 32, "b" * 16, start, float("nan"), tenant="x")
    ok = Attribution("a" * 32, "b" * 16, start, 2.0, tenant="x")
    low, high = ok.window()
    assert (high - low).total_seconds() == 2.0 + 120.0


def test_top_values_fold_the_rest_into_other() -> None:
    weights = [("a", 5.0), ("b", 3.0), ("c", 1.0), ("d", 1.0), ("", 9.0), ("b", 3.0)]
    top = top_values("tenant", weights, 2)
    assert top.kept == {"a", "b", ""}
    assert (top.label("c"), top.label("a"), top.label("")) == (OTHER, "a", "")
    assert top.statement()["folded_into_other"] == 2
    with pytest.raises(InvalidInput):
        top_values("tenant", weights, 0)


def test_attribute_refs() -> None:
    assert AttributeRef.parse("resource.service.name") == AttributeRef("service.name", True)
    assert AttributeRef.parse("resource.") == AttributeRef("resource.")
    assert AttributeRef.parse("metadata.x").text == "metadata.x"


def test_values_with_control_characters_name_nothing_and_are_refused() -> None:
    """A hostile span's NUL or escape sequence never reaches the store (PostgreSQL's text
    refuses NUL: one such value would stop the spool's attributions from shipping)."""
    mapping = parse_setting("tenant=a|b,team=c")
    named, _ = mapping.resolve({"a": "ac\x00me", "b": "globex", "c": "\x1b[31mred"}, {})
    assert named == {"tenant": "globex"}
    assert mapping.resolve({"a": ["x\x7f"], "c": "\ud800"}, {})[0] == {}
    start = datetime(2026, 12, 7, tzinfo=UTC)
    for bad in ("a\x00b", "a\nb", "\x1b[0m", "a\ud800"):
        with pytest.raises(InvalidRecord, match="control characters"):
            Attribution("a" * 32, "b" * 16, start, 1.0, tenant="x", workload=bad)
    with pytest.raises(InvalidRecord, match="control characters"):
        Attribution("a" * 32, "b" * 16, start, 1.0, tenant="x", source="s\x00")
    assert Attribution("a" * 32, "b" * 16, start, 1.0, tenant="ünïcode ✓").tenant == "ünïcode ✓"
