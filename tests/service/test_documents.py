"""The one document reader, held to the same rules for every kind (``service.documents``).

One table over every kind ``service.apply`` stores, each read through its own public parser
(``parse_specs``, ``parse_models``, ``parse_policies``, ``parse_budgets``) and through the
mixed reader: the stream's limits, the header, the errors that name the document and the
field. The count limit is the rule that had drifted: only two of the four parsers held it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from infersight.core.errors import InvalidInput
from infersight.service import documents
from infersight.service.apply import KINDS, read_documents
from infersight.service.budgets import parse_budget, parse_budgets
from infersight.service.cost_spec import parse_model, parse_models
from infersight.service.documents import MAX_BYTES, MAX_DOCUMENTS, MAX_VALUES
from infersight.service.scaling_spec import parse_policies, parse_policy
from infersight.service.specs import parse_spec, parse_specs


@dataclass(frozen=True)
class Kind:
    kind: str
    one: str  # "an SLO document"
    spec: Callable[[str], dict[str, Any]]
    parse_all: Callable[[str], list[Any]]
    parse_one: Callable[[dict[str, Any]], Any]
    bad_field: tuple[dict[str, Any], str]  # a spec change, and the path its error names

    def document(self, name: str = "x", **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "infersight/v1",
            "kind": self.kind,
            "metadata": {"name": name},
            "spec": {**self.spec(name), **spec},
        }


KIND_TABLE = [
    Kind(
        "SLO",
        "an SLO document",
        lambda _name: {"sli": {"availability": {}}, "window": "28d", "objective": 0.99},
        parse_specs,
        parse_spec,
        ({"window": "forever"}, "spec.window"),
    ),
    Kind(
        "CostModel",
        "a CostModel document",
        lambda _name: {"currency": "USD", "gpuPrices": {"H100": {"onDemandPerHour": "3.00"}}},
        parse_models,
        parse_model,
        ({"sampleGap": "soon"}, "spec.sampleGap"),
    ),
    Kind(
        "ScalingPolicy",
        "a ScalingPolicy document",
        lambda name: {"model": f"model-{name}"},
        parse_policies,
        parse_policy,
        ({"leadTime": "soon"}, "spec.leadTime"),
    ),
    Kind(
        "Budget",
        "a Budget document",
        lambda _name: {"amount": "100", "currency": "USD"},
        parse_budgets,
        parse_budget,
        (
            {"burn": [{"severity": "page", "burnRate": 6, "longWindow": "soon",
                       "shortWindow": "1h"}]},
            "spec.burn.0.longWindow",
        ),
    ),
]  # fmt: skip
BY_KIND = pytest.mark.parametrize("kind", KIND_TABLE, ids=lambda k: k.kind)


def stream(*documents: dict[str, Any]) -> str:
    """Documents as one YAML stream, each a line of flow YAML (JSON)."""
    return "".join(f"---\n{json.dumps(d)}\n" for d in documents)


def test_the_table_covers_every_kind_apply_stores() -> None:
    assert [k.kind for k in KIND_TABLE] == [k.kind for k in KINDS]


@BY_KIND
def test_every_kind_reads_at_most_max_documents_from_one_file(
    kind: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every kind's parser reads through the one reader's cap (a smaller one here, so that the
    # table stays fast; the next test holds the real one).
    monkeypatch.setattr(documents, "MAX_DOCUMENTS", 3)
    at_most = [kind.document(f"n{i}") for i in range(3)]
    assert len(kind.parse_all(stream(*at_most))) == 3
    one_more = stream(*at_most, kind.document("one-more"))
    for parse in (kind.parse_all, read_documents):
        with pytest.raises(InvalidInput, match="a file holds at most 3 "):
            parse(one_more)


def test_a_file_holds_at_most_a_thousand_documents_of_any_kinds() -> None:
    assert MAX_DOCUMENTS == 1000
    kinds = KIND_TABLE * (MAX_DOCUMENTS // len(KIND_TABLE))
    at_most = [k.document(f"n{i}") for i, k in enumerate(kinds)]
    assert len(read_documents(stream(*at_most))) == MAX_DOCUMENTS
    with pytest.raises(InvalidInput, match="a file holds at most 1000 documents"):
        read_documents(stream(*at_most, KIND_TABLE[0].document("one-more")))


@BY_KIND
def test_every_kind_is_held_to_the_stream_size_and_values(kind: Kind) -> None:
    big = stream(kind.document()) + "#" * MAX_BYTES
    # An alias bomb: ten aliases of ten aliases … seven deep, 10^7 values once expanded.
    levels = ["a: &a [" + ", ".join(["x"] * 10) + "]"]
    for previous, level in zip("abcdef", "bcdefg", strict=True):
        levels.append(f"{level}: &{level} [" + ", ".join([f"*{previous}"] * 10) + "]")
    bomb = yaml.safe_dump(kind.document()) + "status:\n" + "".join(f"  {x}\n" for x in levels)
    for parse in (kind.parse_all, read_documents):
        with pytest.raises(InvalidInput, match="at most 4 MiB"):
            parse(big)
        with pytest.raises(InvalidInput, match=f"at most {MAX_VALUES} values"):
            parse(bomb)


@BY_KIND
def test_every_kind_checks_the_header_the_same_way(kind: Kind) -> None:
    good = kind.document()
    cases: list[tuple[Any, str]] = [
        (["a", "list"], f"{kind.one} must be a mapping"),
        ({**good, "kind": "Widget"}, f"expected kind {kind.kind}, got 'Widget'"),
        ({**good, "apiVersion": "v2"}, f"unsupported apiVersion 'v2' for kind {kind.kind}"),
        ({**good, "status": {}}, f"invalid {kind.kind} document: status: Extra inputs"),
        ({k: v for k, v in good.items() if k != "metadata"}, "metadata: Field required"),
        ({**good, "metadata": {"name": 7}}, "metadata.name: Input should be a valid string"),
        ({**good, "metadata": {"name": "a\x00b"}}, "metadata.name: must not contain control"),
    ]
    for data, message in cases:
        with pytest.raises(InvalidInput, match=message):
            kind.parse_one(data)
        with pytest.raises(InvalidInput, match=message):
            kind.parse_all(yaml.safe_dump(data))


@BY_KIND
def test_every_kind_names_the_field_of_its_error(kind: Kind) -> None:
    change, path = kind.bad_field
    with pytest.raises(InvalidInput, match=f"^invalid {kind.kind} document: {path}: "):
        kind.parse_one(kind.document(**change))


@BY_KIND
def test_a_stream_reports_every_bad_document_and_returns_nothing(kind: Kind) -> None:
    change, path = kind.bad_field
    text = stream(kind.document("good"), kind.document("bad", **change), ["not", "a", "mapping"])
    for parse in (kind.parse_all, read_documents):
        with pytest.raises(InvalidInput) as caught:
            parse(text)
        message = caught.value.message
        assert message.startswith("2 of 3 documents are invalid: "), message
        assert f"document 2 ({kind.kind} bad): invalid {kind.kind} document: {path}: " in message
        assert "document 3: " in message
        assert [d["document"] for d in caught.value.details["documents"]] == [2, 3]


@BY_KIND
def test_one_bad_document_among_several_is_named(kind: Kind) -> None:
    change, path = kind.bad_field
    with pytest.raises(InvalidInput) as caught:
        read_documents(stream(kind.document("good"), kind.document("bad", **change)))
    assert caught.value.message.startswith(f"document 2 ({kind.kind} bad): invalid {kind.kind}")
    assert path in caught.value.message
    assert caught.value.details["document"] == 2


@BY_KIND
def test_a_kind_and_name_stands_once_in_a_stream(kind: Kind) -> None:
    text = stream(kind.document("same"), kind.document("other"), kind.document("same"))
    with pytest.raises(InvalidInput, match=f"{kind.kind} 'same' is named twice, by document 1"):
        kind.parse_all(text)


@BY_KIND
def test_the_stream_errors_are_the_same_for_every_kind(kind: Kind) -> None:
    for text, message in [
        ("", f"no {kind.kind} documents found"),
        ("---\n---\n", f"no {kind.kind} documents found"),
        ("a: [unclosed", "not valid YAML or JSON"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            kind.parse_all(text)


def test_a_mixed_stream_reads_every_kind_in_order() -> None:
    documents = read_documents(stream(*(k.document(f"n-{k.kind.lower()}") for k in KIND_TABLE)))
    assert [(d.kind, d.name, d.index) for d in documents] == [
        (k.kind, f"n-{k.kind.lower()}", i) for i, k in enumerate(KIND_TABLE, start=1)
    ]
    assert [type(d.value).__name__ for d in documents] == [
        "SloSpec", "CostModel", "ScalingPolicy", "Budget"
    ]  # fmt: skip


def test_a_kind_read_elsewhere_or_unknown_is_refused_with_where_it_goes() -> None:
    mapping = {"apiVersion": "infersight/v1", "kind": "BillMapping", "spec": {"keys": ["x"]}}
    with pytest.raises(InvalidInput, match="import-bill --mapping"):
        read_documents(yaml.safe_dump(mapping))
    with pytest.raises(InvalidInput, match="unknown kind 'Widget': the kinds applied are SLO, "):
        read_documents(yaml.safe_dump({**mapping, "kind": "Widget"}))


def test_openslo_is_read_by_the_same_reader() -> None:
    openslo = {
        "apiVersion": "openslo/v1",
        "kind": "SLO",
        "metadata": {"name": "avail", "displayName": "ignored"},
        "spec": {
            "budgetingMethod": "Occurrences",
            "timeWindow": [{"duration": "28d", "isRolling": True}],
            "objectives": [{"target": 0.99}],
            "indicator": {"spec": {"ratioMetric": {
                "good": {"metricSource": {"type": "infersight",
                                          "spec": {"query": "successful_requests"}}},
                "total": {"metricSource": {"type": "infersight", "spec": {"query": "requests"}}},
            }}},
        },
    }  # fmt: skip
    [document] = read_documents(yaml.safe_dump(openslo))
    assert (document.kind, document.api_version, document.name) == ("SLO", "openslo/v1", "avail")
    for broken, message in [
        ({**openslo["spec"], "timeWindow": ["28d"]}, "exactly one window"),
        ({**openslo["spec"], "objectives": ["0.99"]}, "exactly one OpenSLO objective"),
        ({**openslo["spec"], "indicator": {"spec": {"ratioMetric": "x"}}}, "good and total"),
        ({**openslo["spec"], "objectives": [{"target": [1]}]}, "objective must be"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            parse_spec({**openslo, "spec": broken})


def test_a_number_out_of_range_is_a_clear_error_not_a_crash() -> None:
    slo = KIND_TABLE[0].document(window="99999999999999999999d")
    with pytest.raises(InvalidInput, match=r"^invalid SLO document: spec\.window: "):
        parse_spec(slo)
