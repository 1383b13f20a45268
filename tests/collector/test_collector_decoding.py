"""Decoding in child processes (``collector.decoding``): exports decoded there answer as they
did in-thread (partial success, refusals and their reasons), a child that dies or hangs costs
one export a 503 and is replaced, and a child that grew retires."""

from __future__ import annotations

import gzip
import json
import os
import signal
from collections.abc import Callable
from typing import Any

import grpc
import httpx
import pytest

from infersight.collector import decoding, otlp_json
from infersight.collector.decoding import DecoderPool
from tests.collector.harness import Receiver, encoded, vllm_spans
from tests.collector.test_collector_hostile import (
    GZIP,
    JSON,
    PROTOBUF,
    grpc_export,
    post,
    refused,
)


def pool_of(receiver: Receiver) -> DecoderPool:
    assert receiver.decoders is not None
    return receiver.decoders


@pytest.fixture
def isolated(make_receiver: Callable[..., Receiver], monkeypatch: pytest.MonkeyPatch) -> Receiver:
    """A receiver whose bodies can only be decoded in a child: this process's JSON decoder
    is broken (the child imports its own)."""

    def broken(*_: Any) -> Any:
        raise AssertionError("decoded in the receiver's process")

    receiver = make_receiver(decoders=True)
    monkeypatch.setattr(otlp_json, "decode", broken)
    return receiver


def hand_made(prompt_tokens: str) -> bytes:
    attributes = [
        {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": prompt_tokens}},
        {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "12"}},
    ]
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "llm_request",
        "kind": 2,
        "startTimeUnixNano": str(1764000000 * 10**9),
        "endTimeUnixNano": str(1764000002 * 10**9),
        "attributes": attributes,
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]}
    document = {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(document).encode()


def test_exports_are_decoded_in_the_child_with_the_same_answers(isolated: Receiver) -> None:
    receiver = isolated
    response = post(receiver, hand_made("9007199254740"), JSON)  # over the record's bound
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    assert post(receiver, hand_made("77"), JSON).status_code == 200
    body = encoded(vllm_spans(300))
    assert post(receiver, gzip.compress(body), {**PROTOBUF, **GZIP}).status_code == 200
    assert grpc_export(receiver, encoded(vllm_spans(4))) is None
    records = receiver.records()
    assert len(records) == 1 + 300 + 4
    assert [r.input_tokens for r in records if r.span_id == "eee19b7ec3c1b174"] == [77]
    assert len(pool_of(receiver).pids) == 1


def test_hostile_bodies_decoded_in_the_child_are_refused_with_their_reasons(
    isolated: Receiver,
) -> None:
    receiver = isolated
    dense = b'{"resourceSpans":[' + b"{}," * 1_000_000 + b"{}]}"
    assert post(receiver, dense, JSON).status_code == 413
    assert refused(receiver, "too_many_messages") == 1
    response = post(receiver, b"[" * 100_000, JSON)
    assert response.status_code == 400
    assert "nested too deeply" in response.json()["message"]
    assert refused(receiver, "too_deep") == 1
    members = gzip.compress(b"") * 100
    assert post(receiver, members, {**PROTOBUF, **GZIP}).status_code == 400
    assert refused(receiver, "too_many_members") == 1
    exc = grpc_export(receiver, b"\x0a\x00" * 600_000)
    assert exc is not None
    assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert post(receiver, b"{not json", JSON).status_code == 400
    assert post(receiver, hand_made("5"), JSON).status_code == 200  # the same child, still


def test_a_hung_child_costs_one_export_a_503_and_is_replaced(
    make_receiver: Callable[..., Receiver], monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = make_receiver(decoders=True)
    pool = pool_of(receiver)
    assert post(receiver, hand_made("5"), JSON).status_code == 200
    (hung,) = pool.pids
    patient = decoding.JOB_TIMEOUT_S
    monkeypatch.setattr(decoding, "JOB_TIMEOUT_S", 0.5)
    os.kill(hung, signal.SIGSTOP)  # alive but never answers: the watchdog kills it
    response = post(receiver, hand_made("6"), JSON)
    # The replacement gets the usual watchdog: a fresh child on a loaded host may need more
    # than half a second for its first export.
    monkeypatch.setattr(decoding, "JOB_TIMEOUT_S", patient)
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) >= 1
    assert refused(receiver, "decoder_failed") == 1
    assert post(receiver, hand_made("7"), JSON).status_code == 200
    (replacement,) = pool.pids
    assert replacement != hung
    assert sorted(r.input_tokens for r in receiver.records()) == [5, 7]


def test_a_child_that_grew_retires_and_the_next_export_gets_a_fresh_one(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(decoders=True)
    pool = pool_of(receiver)
    for child in pool._children:
        child.setup = decoding.Setup(
            **{**_fields(child.setup), "retire_growth_bytes": -(1 << 40)}
        )  # any size
    assert post(receiver, hand_made("5"), JSON).status_code == 200
    assert pool.pids == []  # it retired after answering, and was reaped
    assert post(receiver, hand_made("6"), JSON).status_code == 200
    assert len(receiver.records()) == 2


def _fields(setup: decoding.Setup) -> dict[str, Any]:
    return {name: getattr(setup, name) for name in decoding.Setup.__dataclass_fields__}


def test_the_receivers_process_never_holds_the_childs_work(
    make_receiver: Callable[..., Receiver],
) -> None:
    """The CPU of decoding is the child's: the receiver's own threads spend a fraction of
    what the child does on an export of the worst accepted kind."""
    receiver = make_receiver(decoders=True)
    assert post(receiver, hand_made("5"), JSON).status_code == 200
    (child,) = pool_of(receiver).pids
    worst = {"attributes": [{"key": f"a{i}"} for i in range(128)]}
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [worst] * 1000}]}]})
    mine, theirs = _cpu(os.getpid()), _cpu(child)
    assert post(receiver, body.encode(), JSON).status_code == 200
    mine, theirs = _cpu(os.getpid()) - mine, _cpu(child) - theirs
    assert mine < theirs, (mine, theirs)


def _cpu(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_an_export_waits_for_its_child_to_start(make_receiver: Callable[..., Receiver]) -> None:
    receiver = make_receiver(decoders=True)
    assert pool_of(receiver).pids == []  # started on first use here (the sidecar starts it)
    assert httpx.get(receiver.url + "/healthz").status_code == 200
    assert post(receiver, hand_made("5"), JSON).status_code == 200
