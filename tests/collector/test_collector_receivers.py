"""OTLP receivers end to end: real OpenTelemetry SDK exporters and hand-made bodies against a
running sidecar receiver, and every kind of bad input."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterator

import grpc
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcExporter,
)
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from infersight.collector import http_receiver
from infersight.collector.admission import Busy
from infersight.collector.body import BodyTimeout, UnsupportedEncoding, UnsupportedMediaType
from infersight.collector.decoding import DecoderFailed
from infersight.collector.otlp import Limits
from infersight.collector.refusal import ExportRefusal
from infersight.core.errors import (
    InfersightError,
    InvalidInput,
    InvalidRecord,
    TooLarge,
    Unauthorized,
    Unavailable,
)
from tests.collector.collector_shapes import VLLM_V1
from tests.collector.harness import Receiver, encoded, vllm_spans

PROTOBUF = {"content-type": "application/x-protobuf"}


@pytest.fixture
def http_exporter(receiver: Receiver) -> Iterator[Callable[..., HttpExporter]]:
    made: list[HttpExporter] = []

    def make(**kwargs: object) -> HttpExporter:
        exporter = HttpExporter(endpoint=receiver.url + "/v1/traces", timeout=10, **kwargs)  # type: ignore[arg-type]
        made.append(exporter)
        return exporter

    yield make
    for exporter in made:
        exporter.shutdown()


@pytest.mark.parametrize(
    "compression", [Compression.NoCompression, Compression.Gzip, Compression.Deflate]
)
def test_the_sdk_http_exporter_lands_vllm_spans_in_the_spool(
    receiver: Receiver, http_exporter: Callable[..., HttpExporter], compression: Compression
) -> None:
    spans = vllm_spans(5)
    assert http_exporter(compression=compression).export(spans) is SpanExportResult.SUCCESS
    records = receiver.records()
    assert sorted(r.input_tokens or 0 for r in records) == [100, 101, 102, 103, 104]
    assert {r.trace_id for r in records} == {f"{s.context.trace_id:032x}" for s in spans}
    assert receiver.metrics.value("infersight_collector_spans_accepted_total") == 5


@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
def test_the_sdk_grpc_exporter_lands_vllm_spans_in_the_spool(
    receiver: Receiver, compression: grpc.Compression
) -> None:
    exporter = GrpcExporter(
        endpoint=receiver.target, insecure=True, timeout=10, compression=compression
    )
    try:
        spans = vllm_spans(4)
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    records = receiver.records()
    assert {r.span_id for r in records} == {f"{s.context.span_id:016x}" for s in spans}
    assert all(r.ttft_s == VLLM_V1["gen_ai.latency.time_to_first_token"] for r in records)


def test_hand_made_otlp_json_with_hex_ids_and_string_int64_is_accepted(receiver: Receiver) -> None:
    trace_id, span_id = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "vllm"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": span_id,
                                "name": "llm_request",
                                "kind": 2,
                                "startTimeUnixNano": "1764000000000000000",
                                "endTimeUnixNano": "1764000002000000000",
                                "attributes": [
                                    {
                                        "key": "gen_ai.usage.prompt_tokens",
                                        "value": {"intValue": "9007199254740"},
                                    },
                                    {
                                        "key": "gen_ai.usage.completion_tokens",
                                        "value": {"intValue": "12"},
                                    },
                                    {
                                        "key": "gen_ai.latency.time_to_first_token",
                                        "value": {"doubleValue": 0.125},
                                    },
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    response = httpx.post(receiver.url + "/v1/traces", json=body)
    # 9_007_199_254_740 prompt tokens exceeds the record's bound: one rejected span
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"
    body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0]["value"] = {
        "intValue": "77"
    }
    response = httpx.post(receiver.url + "/v1/traces", json=body)
    assert response.status_code == 200
    assert "partialSuccess" not in response.json()
    (record,) = receiver.records()
    assert (record.trace_id, record.span_id) == (trace_id, span_id)
    assert record.input_tokens == 77
    assert record.e2e_s == pytest.approx(2.0)


def post(receiver: Receiver, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(receiver.url + "/v1/traces", content=body, headers=headers, timeout=30)


def still_serves(receiver: Receiver) -> None:
    response = post(receiver, encoded(vllm_spans(1)), PROTOBUF)
    assert response.status_code == 200


S = grpc.StatusCode


@pytest.mark.parametrize(
    ("error", "result", "http_status", "retry_after", "grpc_code", "retry_info"),
    [
        (Unauthorized("x"), "unauthorized", 401, None, S.UNAUTHENTICATED, False),
        (UnsupportedMediaType("x"), "unsupported_media_type", 415, None, S.INVALID_ARGUMENT, False),
        (UnsupportedEncoding("x"), "unsupported_encoding", 415, None, S.INVALID_ARGUMENT, False),
        (TooLarge("x"), "too_large", 413, None, S.RESOURCE_EXHAUSTED, False),
        (Busy("x"), "busy", 429, "1", S.RESOURCE_EXHAUSTED, True),
        (BodyTimeout("x"), "timeout", 408, None, S.INVALID_ARGUMENT, False),
        (DecoderFailed("x"), "decoder_failed", 503, "1", S.UNAVAILABLE, False),
        (Unavailable("x"), "spool_full", 503, "5", S.UNAVAILABLE, False),
        (InvalidInput("x"), "undecodable", 400, None, S.INVALID_ARGUMENT, False),
        (InvalidRecord("x"), "undecodable", 400, None, S.INVALID_ARGUMENT, False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, InfersightError) else None,
)
def test_each_refusal_has_one_answer_for_both_receivers(
    error: InfersightError,
    result: str,
    http_status: int,
    retry_after: str | None,
    grpc_code: grpc.StatusCode,
    retry_info: bool,
) -> None:
    refusal = ExportRefusal.of(error)
    assert (refusal.result, refusal.http_status, refusal.grpc_code) == (
        result,
        http_status,
        grpc_code,
    )
    headers = refusal.http_headers()
    assert (headers or {}).get("Retry-After") == retry_after
    assert refusal.grpc_retry_info is retry_info


def test_a_truncated_protobuf_is_400_counted_and_the_next_request_is_served(
    receiver: Receiver,
) -> None:
    body = encoded(vllm_spans(3))
    response = post(receiver, body[: len(body) // 2], PROTOBUF)
    assert response.status_code == 400
    assert (
        receiver.metrics.value(
            "infersight_collector_exports_total", transport="http", result="undecodable"
        )
        == 1
    )
    still_serves(receiver)


def test_a_wrong_content_type_is_415(receiver: Receiver) -> None:
    response = post(receiver, b"hello", {"content-type": "text/plain"})
    assert response.status_code == 415
    assert (
        receiver.metrics.value(
            "infersight_collector_exports_total", transport="http", result="unsupported_media_type"
        )
        == 1
    )
    still_serves(receiver)


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """1 GiB of zeros as 64 concatenated gzip members of 16 MiB each (about 1 MiB in all)."""
    member = gzip.compress(bytes(16 << 20), compresslevel=9)
    return member * 64


def test_a_gzip_bomb_is_413_without_inflating_it(receiver: Receiver, gzip_bomb: bytes) -> None:
    response = post(receiver, gzip_bomb, {**PROTOBUF, "content-encoding": "gzip"})
    assert response.status_code == 413
    assert (
        receiver.metrics.value(
            "infersight_collector_exports_total", transport="http", result="too_large"
        )
        == 1
    )
    still_serves(receiver)


def test_an_oversized_body_is_413_for_http_and_resource_exhausted_for_grpc(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(limits=Limits(max_body_bytes=4096))
    body = encoded(vllm_spans(40))
    assert len(body) > 4096
    assert post(receiver, body, PROTOBUF).status_code == 413
    assert (
        post(receiver, gzip.compress(body), {**PROTOBUF, "content-encoding": "gzip"}).status_code
        == 413
    )
    with grpc.insecure_channel(receiver.target) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Export(request, timeout=10)
    assert caught.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    still_serves(receiver)


def test_too_many_spans_in_one_export_is_413(make_receiver: Callable[..., Receiver]) -> None:
    receiver = make_receiver(limits=Limits(max_spans=3))
    assert post(receiver, encoded(vllm_spans(4)), PROTOBUF).status_code == 413
    assert post(receiver, encoded(vllm_spans(3)), PROTOBUF).status_code == 200


@pytest.mark.parametrize(
    ("attrs", "reason"),
    [
        ({"gen_ai.latency.e2e": math.nan}, "invalid_value"),
        ({"gen_ai.latency.time_in_queue": -0.5}, "invalid_value"),
    ],
    ids=["NaN", "negative latency"],
)
def test_absurd_spans_are_rejected_through_partial_success(
    receiver: Receiver, attrs: dict[str, float], reason: str
) -> None:
    spans = vllm_spans(2) + vllm_spans(1, **attrs)
    response = post(receiver, encoded(spans), PROTOBUF)
    assert response.status_code == 200
    answer = trace_service_pb2.ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 1
    assert reason in answer.partial_success.error_message
    assert receiver.metrics.value("infersight_collector_spans_rejected_total", reason=reason) == 1
    assert len(receiver.records()) == 2


def test_a_full_spool_answers_503_with_retry_after_and_grpc_unavailable(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(spool_config={"max_bytes": 2000})
    body = encoded(vllm_spans(10))
    response = post(receiver, body, PROTOBUF)
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) > 0
    with grpc.insecure_channel(receiver.target) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Export(trace_service_pb2.ExportTraceServiceRequest.FromString(body), timeout=10)
    assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
    assert post(receiver, encoded(vllm_spans(1)), PROTOBUF).status_code == 200


def test_a_bearer_token_is_required_when_configured(make_receiver: Callable[..., Receiver]) -> None:
    receiver = make_receiver(token="s3cret-0123456789")
    body = encoded(vllm_spans(1))
    assert post(receiver, body, PROTOBUF).status_code == 401
    assert post(receiver, body, {**PROTOBUF, "authorization": "Bearer wrong"}).status_code == 401
    assert (
        post(receiver, body, {**PROTOBUF, "authorization": "Bearer s3cret-0123456789"}).status_code
        == 200
    )
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    with grpc.insecure_channel(receiver.target) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Export(request, timeout=10)
        assert caught.value.code() is grpc.StatusCode.UNAUTHENTICATED
        stub.Export(request, timeout=10, metadata=[("authorization", "Bearer s3cret-0123456789")])
    assert len(receiver.records()) == 2


def test_metrics_and_healthz_are_served_on_the_http_port(receiver: Receiver) -> None:
    still_serves(receiver)
    metrics = httpx.get(receiver.url + "/metrics").text
    assert "infersight_collector_spans_accepted_total 1.0" in metrics
    health = httpx.get(receiver.url + "/healthz").json()
    assert health["status"] == "ok"
    assert health["spool_records"] == 1


def test_a_json_body_is_answered_in_json(receiver: Receiver) -> None:
    response = post(
        receiver, json.dumps({"resourceSpans": []}).encode(), {"content-type": "application/json"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert post(receiver, b"{not json", {"content-type": "application/json"}).status_code == 400


def test_oversized_attributes_are_dropped_and_counted_and_the_span_still_maps(
    make_receiver: Callable[..., Receiver],
) -> None:
    receiver = make_receiver(limits=Limits(max_attribute_bytes=256))
    spans = vllm_spans(1, **{"gen_ai.prompt": "x" * 10_000})
    assert post(receiver, encoded(spans), PROTOBUF).status_code == 200
    assert receiver.metrics.value("infersight_collector_attributes_dropped_total") == 1
    (record,) = receiver.records()
    assert record.ttft_s == VLLM_V1["gen_ai.latency.time_to_first_token"]


def test_spans_that_are_not_requests_are_counted_as_unmapped_by_engine(receiver: Receiver) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "sglang"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("t").start_as_current_span("Bootstrap Room 0x0"):
        pass
    provider.shutdown()
    assert post(receiver, encoded(memory.get_finished_spans()), PROTOBUF).status_code == 200
    assert (
        receiver.metrics.value(
            "infersight_collector_spans_unmapped_total", engine="sglang", reason="not_a_request"
        )
        == 1
    )
    assert receiver.records() == []


def test_an_undecodable_grpc_message_is_not_accepted_and_the_next_one_is(
    receiver: Receiver,
) -> None:
    body = encoded(vllm_spans(2))
    with grpc.insecure_channel(receiver.target) as channel:
        raw = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as caught:
            raw(body[: len(body) // 2], timeout=10)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        raw(body, timeout=10)
    assert len(receiver.records()) == 2


def test_a_full_disk_is_503_not_a_crash(make_receiver: Callable[..., Receiver]) -> None:
    receiver = make_receiver(spool_config={"max_pages": 30})  # the file may not grow past 120 KiB
    big = encoded(vllm_spans(1000))
    response = post(receiver, big, PROTOBUF)
    assert response.status_code == 503
    assert "retry-after" in response.headers
    assert post(receiver, encoded(vllm_spans(1)), PROTOBUF).status_code == 200


def test_the_http_receiver_stops_at_once_however_long_its_housekeeping_tick(
    make_receiver: Callable[..., Receiver], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_receiver, "TICK_S", 3600.0)
    receiver = make_receiver()
    assert httpx.get(receiver.url + "/healthz").status_code == 200
    response = post(receiver, encoded(vllm_spans(1)), PROTOBUF)
    assert response.status_code == 200
    assert "date" in response.headers
    receiver.http.stop()
    assert not receiver.http._thread.is_alive()  # stopped, not left waiting for the tick
