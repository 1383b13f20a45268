"""Hostile OTLP bodies against running receivers (real HTTP, real gRPC): each is refused by
its structure before it costs more than its size, with a clear answer and a counted reason,
and the receiver keeps answering /healthz while exports are being decoded."""

from __future__ import annotations

import gc
import gzip
import json
import logging
import socket
import threading
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from infersight.collector.admission import Admission, AdmissionConfig
from infersight.collector.otlp import Limits
from tests.collector.collector_shapes import VLLM_V1
from tests.collector.harness import Receiver, encoded, vllm_spans

T = TypeVar("T")
PROTOBUF = {"content-type": "application/x-protobuf"}
JSON = {"content-type": "application/json"}
GZIP = {"content-encoding": "gzip"}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def post(receiver: Receiver, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(receiver.url + "/v1/traces", content=body, headers=headers, timeout=120)


def refused(receiver: Receiver, reason: str, transport: str = "http") -> float:
    return receiver.metrics.value(
        "infersight_collector_bodies_refused_total", transport=transport, reason=reason
    )


def grpc_export(receiver: Receiver, body: bytes) -> grpc.RpcError | None:
    with grpc.insecure_channel(receiver.target) as channel:
        try:
            channel.unary_unary(EXPORT)(body, timeout=120)
        except grpc.RpcError as exc:
            return exc
    return None


def still_serves(receiver: Receiver) -> None:
    assert post(receiver, encoded(vllm_spans(1)), PROTOBUF).status_code == 200
    assert httpx.get(receiver.url + "/healthz").status_code == 200


def test_a_body_of_many_empty_gzip_members_is_refused_at_once(receiver: Receiver) -> None:
    body = gzip.compress(b"") * 160_000  # the reproduction: 3.2 MB
    response = post(receiver, body, {**PROTOBUF, "content-encoding": "gzip"})
    assert response.status_code == 400
    assert "gzip members" in status_pb2.Status.FromString(response.content).message
    assert refused(receiver, "too_many_members") == 1
    still_serves(receiver)


def test_a_gzip_body_inflating_hundreds_of_times_its_size_is_refused(receiver: Receiver) -> None:
    body = gzip.compress(b"\x0a\x00" * (2 << 20))
    response = post(receiver, body, {**PROTOBUF, "content-encoding": "gzip"})
    assert response.status_code == 413
    assert refused(receiver, "inflation_ratio") == 1


def test_a_few_gzip_members_holding_spans_still_decode(receiver: Receiver) -> None:
    body = encoded(vllm_spans(3))
    members = b"".join(gzip.compress(body[i : i + 50]) for i in range(0, len(body), 50))
    response = post(receiver, members, {**PROTOBUF, "content-encoding": "gzip"})
    assert response.status_code == 200
    assert len(receiver.records()) == 3


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    size, header = len(payload), bytearray([number << 3 | 2])
    while size >= 0x80:
        header.append(size & 0x7F | 0x80)
        size >>= 7
    return bytes(header) + bytes([size]) + payload


def test_dense_empty_resource_spans_are_refused_before_parsing(receiver: Receiver) -> None:
    response = post(receiver, b"\x0a\x00" * 1_000_000, PROTOBUF)  # 2 MB, a million entries
    assert response.status_code == 413
    assert refused(receiver, "too_many_resources") == 1
    exc = grpc_export(receiver, b"\x0a\x00" * 500_001)
    assert exc is not None
    assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused(receiver, "too_many_resources", "grpc") == 1
    still_serves(receiver)


def test_a_span_packed_with_empty_attributes_is_refused_before_parsing(
    receiver: Receiver,
) -> None:
    span = field(9, b"") * 600_000  # 1.2 MB: 600,000 empty attributes, each a message
    body = field(1, field(2, field(2, span)))  # resource spans > scope spans > span
    assert post(receiver, body, PROTOBUF).status_code == 413
    assert refused(receiver, "too_many_messages") == 1
    exc = grpc_export(receiver, body)
    assert exc is not None
    assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused(receiver, "too_many_messages", "grpc") == 1


def test_too_many_resource_or_scope_entries_are_refused_whatever_their_spans(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(limits=Limits(max_resources=100, max_scopes=100))
    assert post(receiver, b"\x0a\x00" * 101, PROTOBUF).status_code == 413
    assert refused(receiver, "too_many_resources") == 1
    one_resource_many_scopes = b"\x0a\xca\x01" + b"\x12\x00" * 101  # 202 bytes of scopes
    assert post(receiver, one_resource_many_scopes, PROTOBUF).status_code == 413
    assert refused(receiver, "too_many_scopes") == 1
    exc = grpc_export(receiver, b"\x0a\x00" * 101)
    assert exc is not None
    assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert post(receiver, b"\x0a\x00" * 100, PROTOBUF).status_code == 200


def test_attributes_beyond_the_per_span_limit_are_dropped_and_counted(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(limits=Limits(max_attributes=30))
    extra = {f"junk.{i}": i for i in range(40)}
    response = post(receiver, encoded(vllm_spans(1, **extra)), PROTOBUF)
    assert response.status_code == 200
    (record,) = receiver.records()
    assert record.input_tokens == 100  # the request's own attributes come first and are kept
    dropped = receiver.metrics.value("infersight_collector_attributes_dropped_total")
    assert dropped == len({**VLLM_V1, "gen_ai.usage.prompt_tokens": 0, **extra}) - 30


def json_document(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def test_dense_otlp_json_is_refused_before_it_is_parsed(receiver: Receiver) -> None:
    body = b'{"resourceSpans":[' + b"{}," * 1_000_000 + b"{}]}"  # 3 MB
    assert post(receiver, body, JSON).status_code == 413
    assert refused(receiver, "too_many_messages") == 1
    too_many_spans = json.dumps(json_document([{}] * 10_001)).encode()
    response = post(receiver, too_many_spans, JSON)
    assert response.status_code == 413
    assert "too many spans" in response.json()["message"]
    assert refused(receiver, "too_many_spans") == 1
    still_serves(receiver)


def test_deeply_nested_otlp_json_is_400_with_a_clear_message_and_no_traceback(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    value: dict[str, Any] = {"intValue": "1"}
    for _ in range(40):
        value = {"arrayValue": {"values": [value]}}
    nested_attribute = json_document([{"attributes": [{"key": "k", "value": value}]}])
    with caplog.at_level(logging.WARNING):
        for body in (b"[" * 100_000, b'{"a":' * 100_000, json.dumps(nested_attribute).encode()):
            response = post(receiver, body, JSON)
            assert response.status_code == 400
            assert "nested too deeply" in response.json()["message"]
    assert refused(receiver, "too_deep") == 3
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    still_serves(receiver)


class HeldAdmission(Admission):
    """An ``Admission`` whose decode slots wait for ``release`` before working, so a test
    knows an export is being decoded (``started``) for as long as it needs."""

    def __init__(self, config: AdmissionConfig) -> None:
        super().__init__(config)
        self.started = threading.Event()
        self.release = threading.Event()

    def submit(self, work: Callable[..., T], *args: object) -> Any:
        def held() -> T:
            self.started.set()
            assert self.release.wait(60)
            return work(*args)

        return super().submit(held)


@pytest.fixture
def held(make_receiver: Callable[..., Receiver]) -> Iterator[tuple[Receiver, HeldAdmission]]:
    admission = HeldAdmission(AdmissionConfig(slots=1, waiting=0))
    yield make_receiver(admission=admission), admission
    admission.release.set()


def test_healthz_answers_while_a_compressed_export_is_being_decoded(
    held: tuple[Receiver, HeldAdmission],
) -> None:
    receiver, admission = held
    body = gzip.compress(encoded(vllm_spans(5)))
    with ThreadPoolExecutor(1) as pool:
        export = pool.submit(post, receiver, body, {**PROTOBUF, "content-encoding": "gzip"})
        assert admission.started.wait(60)
        health = httpx.get(receiver.url + "/healthz", timeout=30)
        metrics = httpx.get(receiver.url + "/metrics", timeout=30)
        assert not export.done()  # answered while the export is still being decoded
        admission.release.set()
        assert export.result().status_code == 200
    assert health.status_code == 200
    assert metrics.status_code == 200
    assert len(receiver.records()) == 5


def test_exports_beyond_the_admitted_are_shed_with_retry_hints(
    held: tuple[Receiver, HeldAdmission],
) -> None:
    receiver, admission = held
    body = encoded(vllm_spans(200))  # over the inline size: decoded in the slot
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, receiver, body, PROTOBUF)
        assert admission.started.wait(60)
        shed = post(receiver, body, PROTOBUF)
        exc = grpc_export(receiver, body)
        admission.release.set()
        assert first.result().status_code == 200
    assert shed.status_code == 429
    assert int(shed.headers["retry-after"]) >= 1
    assert exc is not None
    assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    trailers = dict(exc.trailing_metadata() or ())
    (detail,) = status_pb2.Status.FromString(trailers["grpc-status-details-bin"]).details
    info = error_details_pb2.RetryInfo()
    assert detail.Unpack(info)
    assert info.retry_delay.seconds >= 1
    bare = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
    assert bare.retry_delay.seconds == info.retry_delay.seconds
    assert refused(receiver, "busy") == 1
    assert refused(receiver, "busy", "grpc") == 1
    assert post(receiver, body, PROTOBUF).status_code == 200


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"\x0a\x00" * 600_000, PROTOBUF),
        (b'{"resourceSpans":[' + b"{}," * 600_000 + b"{}]}", JSON),
        (gzip.compress(b"") * 100, {**PROTOBUF, "content-encoding": "gzip"}),
        (b"\x0a\x00" * 600_000, {}),
    ],
    ids=["protobuf", "json", "gzip", "grpc"],
)
def test_a_refused_body_is_freed_at_once_not_at_the_next_full_collection(
    receiver: Receiver, body: bytes, headers: dict[str, str]
) -> None:
    # A reference cycle through the error's traceback would keep the body's frames (and so
    # the body) alive until a full collection, which a long-lived sidecar rarely runs.
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        if headers:
            assert post(receiver, body, headers).status_code in (400, 413)
        else:
            assert grpc_export(receiver, body) is not None
        gc.collect()
        kept = [
            f"{o.f_code.co_filename}:{o.f_code.co_name}"
            for o in gc.garbage
            if isinstance(o, types.FrameType) and "/collector/" in o.f_code.co_filename
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert kept == []


def test_otlp_json_attributes_are_capped_and_keyless_ones_dropped_before_parsing(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(limits=Limits(max_attributes=8))
    attributes = [{"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "7"}}]
    attributes += [{}] * 1000 + [{"value": {"intValue": "1"}}] * 1000  # no key: dropped
    attributes += [{"key": f"junk.{i}", "value": {"intValue": str(i)}} for i in range(50)]
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "llm_request",
        "kind": 2,
        "startTimeUnixNano": "1764000000000000000",
        "endTimeUnixNano": "1764000002000000000",
        "attributes": attributes,
        "events": [{"name": "e", "attributes": [{}] * 1000}],  # never read: not parsed
    }
    document = json_document([span])
    document["resourceSpans"][0]["resource"] = {
        "attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]
    }
    response = post(receiver, json.dumps(document).encode(), JSON)
    assert response.status_code == 200
    (record,) = receiver.records()
    assert record.input_tokens == 7


def test_a_declared_length_over_the_cap_is_refused_before_the_body_is_read(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(limits=Limits(max_body_bytes=4096))
    head = (
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/x-protobuf\r\nContent-Length: 1073741824\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", receiver.http.port), timeout=60) as sock:
        sock.sendall(head.encode() + b"\x0a\x00" * 1024)  # and no more of the 1 GiB declared
        reply = sock.recv(4096)
    assert reply.startswith(b"HTTP/1.1 413")
    assert refused(receiver, "body_too_large") == 1


def test_the_sdk_grpc_exporter_retries_a_shed_export_after_the_hinted_delay(
    held: tuple[Receiver, HeldAdmission],
) -> None:
    receiver, admission = held
    exporter = GrpcExporter(endpoint=receiver.target, insecure=True, timeout=30)
    spans = vllm_spans(3)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(post, receiver, encoded(vllm_spans(200)), PROTOBUF)
            assert admission.started.wait(60)
            exported = pool.submit(exporter.export, spans)
            while refused(receiver, "busy", "grpc") < 1:  # shed once while the slot is held
                assert not exported.done()
                admission.started.wait(0.01)
            admission.release.set()
            assert first.result().status_code == 200
            assert exported.result() is SpanExportResult.SUCCESS  # retried, then accepted
    finally:
        exporter.shutdown()
    assert {r.span_id for r in receiver.records()} >= {f"{s.context.span_id:016x}" for s in spans}


def test_the_sdk_http_exporter_retries_a_shed_export_after_retry_after(
    held: tuple[Receiver, HeldAdmission],
) -> None:
    receiver, admission = held
    exporter = HttpExporter(endpoint=receiver.url + "/v1/traces", timeout=30)
    spans = vllm_spans(3)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(post, receiver, encoded(vllm_spans(200)), PROTOBUF)
            assert admission.started.wait(60)
            exported = pool.submit(exporter.export, spans)
            while refused(receiver, "busy") < 1:  # shed once (429) while the slot is held
                assert not exported.done()
                admission.started.wait(0.01)
            admission.release.set()
            assert first.result().status_code == 200
            assert exported.result() is SpanExportResult.SUCCESS  # retried, then accepted
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    assert {r.span_id for r in receiver.records()} >= {f"{s.context.span_id:016x}" for s in spans}


def test_bodies_beyond_the_admitted_bytes_are_shed_while_small_ones_still_wait(
    make_receiver: Callable[..., Receiver],
) -> None:
    admission = HeldAdmission(AdmissionConfig(slots=1, waiting=5, max_bytes=200_000))
    receiver = make_receiver(admission=admission)
    big, small = encoded(vllm_spans(200)), encoded(vllm_spans(2))
    assert 100_000 < len(big) < 200_000 < 2 * len(big)
    try:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(post, receiver, big, PROTOBUF)
            assert admission.started.wait(60)
            shed = post(receiver, big, PROTOBUF)  # the two would exceed the bytes admitted
            waiting = pool.submit(post, receiver, gzip.compress(small), {**PROTOBUF, **GZIP})
            while admission.admitted < 2:  # the small one is admitted and waits for the slot
                assert not waiting.done()
                admission.started.wait(0.01)
            admission.release.set()
            assert first.result().status_code == 200
            assert waiting.result().status_code == 200
    finally:
        admission.release.set()
    assert shed.status_code == 429
    assert refused(receiver, "busy") == 1
