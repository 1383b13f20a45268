"""The ingest path stores and refuses exactly what it did before it was made faster (issue 35).

``data/ingest_golden.json.gz`` holds what the code before the change made of a broad corpus
of exports (``ingest_corpus``: every span shape of every mapper, every attribute they read
with every kind of value, hostile ids, times, limits and bodies), written by
``make_ingest_golden.py`` from a worktree of that commit. Each case goes through the functions
a decoder process runs, as protobuf and as OTLP/JSON, and must give the same spool entries
byte for byte, the same tallies and the same refusals.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.collector import ingest_corpus

GOLDEN = Path(__file__).parent / "data" / "ingest_golden.json.gz"


@pytest.fixture(scope="module")
def expected() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in gzip.decompress(GOLDEN.read_bytes()).decode().splitlines():
        out.update(json.loads(line))
    return ingest_corpus.expanded(out)


@pytest.fixture(scope="module")
def actual() -> dict[str, dict[str, Any]]:
    # Through JSON and back: tuples and lists, and float spellings, compare as stored.
    return json.loads(json.dumps(dict(ingest_corpus.outcomes())))


@pytest.fixture(scope="module")
def two_pass() -> dict[str, dict[str, Any]]:
    """The outcomes of ``decode_body`` then ``prepare`` (an export decoded in the receiver's
    thread while its role is pending, OTLP/JSON, ``Ingestor.ingest_decoded``)."""
    return json.loads(json.dumps(dict(ingest_corpus.outcomes(one_pass=False))))


def _difference(name: str, want: dict[str, Any], got: dict[str, Any]) -> str:
    if "error" in want or "error" in got:
        return f"{name}: expected {want.get('error', 'no error')}, got {got.get('error', 'none')}"
    for key in ("spans", "dropped_attributes", "unmapped", "rejected", "sources"):
        if want[key] != got[key]:
            return f"{name}: {key} expected {want[key]}, got {got[key]}"
    if len(want["entries"]) != len(got["entries"]):
        return f"{name}: {len(want['entries'])} entries expected, got {len(got['entries'])}"
    for i, (w, g) in enumerate(zip(want["entries"], got["entries"], strict=True)):
        if w != g:
            return f"{name}: entry {i} expected\n  {w}\ngot\n  {g}"
    return f"{name}: differs"


def test_every_case_of_the_corpus_is_ingested_exactly_as_before(
    expected: dict[str, dict[str, Any]], actual: dict[str, dict[str, Any]]
) -> None:
    assert list(actual) == list(expected), "the corpus changed: regenerate with the old code"
    differences = [
        _difference(name, expected[name], got)
        for name, got in actual.items()
        if got != expected[name]
    ]
    assert not differences, f"{len(differences)} cases differ:\n" + "\n".join(differences[:10])


def test_decoding_then_mapping_ingests_the_corpus_as_before(
    expected: dict[str, dict[str, Any]], two_pass: dict[str, dict[str, Any]]
) -> None:
    differences = [
        _difference(name, expected[name], got)
        for name, got in two_pass.items()
        if got != expected[name]
    ]
    assert not differences, f"{len(differences)} cases differ:\n" + "\n".join(differences[:10])


def test_plain_request_spans_are_read_in_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-pass reader (``mapping.requests``) takes every plainly well-formed vLLM and
    TensorRT-LLM span of a server's export, and leaves the others to the general way (the
    tests above hold what both make of them to the code before)."""
    from infersight.collector.mapping import requests

    rows: list[str] = []
    row = requests.row

    def counted(*args: Any) -> Any:
        made = row(*args)
        rows.append("one pass" if made is not None else "general")
        return made

    monkeypatch.setattr(requests, "row", counted)
    ids = ingest_corpus.Ids(35)
    (shapes,) = [c for c in ingest_corpus.shape_cases() if c.name == "shapes/plain"]
    ingest_corpus.run(shapes, "application/x-protobuf", ingest_corpus.build(shapes, ids))
    assert rows == ["one pass"] * sum(
        s.name == "llm_request" for r in shapes.resources for s in r.spans
    )
    # ``gen_ai.latency.e2e`` given every kind of value: a double in range is read in one
    # pass, anything else (a string, an int, NaN, a negative, an array …) the general way.
    rows.clear()
    (varied,) = [c for c in ingest_corpus.attribute_cases()
                 if c.name == "attr/vllm_v1/gen_ai.latency.e2e"]  # fmt: skip
    ingest_corpus.run(varied, "application/x-protobuf", ingest_corpus.build(varied, ids))
    assert 0 < rows.count("one pass") < len(ingest_corpus.VALUES)


def test_the_corpus_reaches_every_outcome(expected: dict[str, dict[str, Any]]) -> None:
    """The corpus is only as good as what it exercises: records of every engine, client
    records, stage fragments and links, every rejection reason, dropped attributes and every
    refusal of a whole export."""
    engines: Counter[str] = Counter()
    kinds: Counter[int] = Counter()
    rejected: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    dropped = 0
    for outcome in expected.values():
        if "error" in outcome:
            errors[outcome["error"][2].get("reason", outcome["error"][0])] += 1
            continue
        dropped += outcome["dropped_attributes"]
        rejected.update(outcome["rejected"])
        for kind, _, _, payload in outcome["entries"]:
            kinds[kind] += 1
            if kind == 1:
                engines[json.loads(payload)[5]] += 1
    assert set(engines) == {"vllm", "sglang", "tgi", "trtllm", "generic"}
    assert set(kinds) == {1, 2, 5}  # records, trace pieces, client records
    assert set(rejected) >= {
        "invalid_tokens", "invalid_value", "stage_exceeds_e2e", "ttft_exceeds_e2e",
        "end_before_start", "invalid_time", "invalid_id", "start_in_future", "start_too_old",
    }  # fmt: skip
    assert dropped > 0
    assert set(errors) >= {"too_many_spans", "too_many_resources", "too_many_scopes"}
    assert "undecodable" in errors or "InvalidInput" in errors


def test_a_start_is_stored_to_the_microsecond_as_datetime_rounds_it() -> None:
    """``epoch_seconds`` replaces ``datetime.fromtimestamp(ns / 1e9, UTC).timestamp()`` on
    the ingest path: the same float for every start, halfway cases and range ends included."""
    from datetime import UTC, datetime
    from random import Random

    from infersight.collector.mapping.base import epoch_seconds

    rng = Random(35)
    starts = [rng.randrange(1, 2**64) for _ in range(20_000)]
    starts += [rng.randrange(946_684_800, 7_258_118_400) * 10**9 + rng.randrange(10**9)
               for _ in range(20_000)]  # fmt: skip
    starts += [s * 10**9 + us * 1000 + 500 for s in (946_684_800, 1_796_547_600, 7_258_118_399)
               for us in range(0, 1_000_000, 997)]  # fmt: skip
    for start_ns in starts:
        expected = datetime.fromtimestamp(start_ns / 1e9, tz=UTC).timestamp()
        assert epoch_seconds(start_ns) == expected, start_ns
