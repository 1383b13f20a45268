"""The direct OTLP/JSON decoder (``collector.otlp_json``) against protobuf's own JSON parser.

The oracle is what the receiver did before: hex ids rewritten as base64, then
``json_format.ParseDict(..., ignore_unknown_fields=True)``, then the protobuf walk. For every
document both must give the same span views, or both refuse it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from infersight.collector import otlp
from infersight.collector.otlp import JSON, Limits, span_views
from infersight.core.errors import InvalidInput, TooLarge

TRACE, SPAN, PARENT = "5B8EFFF798038103D269B633813FC60C", "eee19b7ec3c1b174", "00f067aa0ba902b7"


def oracle(document: dict[str, Any], limits: Limits) -> otlp.Decoded:
    """The previous decoding: ParseDict into protobuf, then the protobuf walk."""
    document = json.loads(json.dumps(document))
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    message = ExportTraceServiceRequest()
    json_format.ParseDict(document, message, ignore_unknown_fields=True)
    return span_views(message, limits)


def span(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "traceId": TRACE,
        "spanId": SPAN,
        "parentSpanId": PARENT,
        "name": "llm_request",
        "kind": "SPAN_KIND_SERVER",
        "startTimeUnixNano": "1764000000000000000",
        "endTimeUnixNano": 1764000002000000000,
        "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
    }
    return {**base, **fields}


def doc(*spans: dict[str, Any], resource: list[Any] | None = None) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": resource or []},
                "scopeSpans": [{"scope": {"name": "vllm", "version": "1"}, "spans": list(spans)}],
                "schemaUrl": "ignored",
            }
        ]
    }


def attr(key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"key": key, "value": value}


ARRAY = {"arrayValue": {"values": [{"intValue": "3"}, {"stringValue": "x"}, {}]}}
DOCUMENTS = {
    "scalars": doc(
        span(
            attributes=[
                attr("s", {"stringValue": "text"}),
                attr("i", {"intValue": "-9007199254740993"}),
                attr("i2", {"intValue": 12}),
                attr("d", {"doubleValue": 0.125}),
                attr("d2", {"doubleValue": "-Infinity"}),
                attr("d3", {"doubleValue": 3}),
                attr("b", {"boolValue": True}),
                attr("by", {"bytesValue": base64.b64encode(b"\x00\xff").decode()}),
                attr("a", ARRAY),
                attr("kv", {"kvlistValue": {"values": [attr("x", {"intValue": "1"})]}}),
                attr("empty", {}),
                attr("dup", {"intValue": "1"}),
                attr("dup", {"intValue": "2"}),
            ],
            events=[{"name": "e"}],
            links=[{"traceId": TRACE}],
            droppedAttributesCount=3,
            traceState="a=b",
            flags=1,
        ),
        resource=[attr("service.name", {"stringValue": "vllm"})],
    ),
    "enum numbers and ids": doc(span(kind=3, status={"code": 1}, parentSpanId="")),
    "enum number as text": doc(span(kind="2")),
    "unknown enum name": doc(span(kind="SPAN_KIND_NONSENSE")),
    "proto field names": {
        "resource_spans": [
            {
                "scope_spans": [
                    {"spans": [{"name": "x", "start_time_unix_nano": "5", "end_time_unix_nano": 7}]}
                ]
            }
        ]
    },
    "zero and short ids": doc(span(traceId="00" * 16, spanId="abcd")),
    "nulls": doc(span(name=None, attributes=None, status=None, kind=None)),
    "integral float time": doc(span(startTimeUnixNano=1.0e18)),
    "long values dropped": doc(
        span(attributes=[attr("long", {"stringValue": "x" * 5000}), attr("k" * 5000, {})])
    ),
    "empty": {},
    "empty lists": {"resourceSpans": [{"scopeSpans": []}, {}]},
}
REFUSED = {
    "bad hex id": doc(span(traceId="zz")),
    "fractional int": doc(span(attributes=[attr("i", {"intValue": 1.5})])),
    "int as bool": doc(span(attributes=[attr("i", {"intValue": True})])),
    "int out of range": doc(span(attributes=[attr("i", {"intValue": str(1 << 63)})])),
    "negative time": doc(span(startTimeUnixNano="-1")),
    "two values": doc(span(attributes=[attr("i", {"intValue": "1", "stringValue": "x"})])),
    "name not a string": doc(span(name=5)),
    "bool not bool": doc(span(attributes=[attr("b", {"boolValue": "yes"})])),
    "spans not a list": {"resourceSpans": [{"scopeSpans": [{"spans": {}}]}]},
}


@pytest.mark.parametrize("name", DOCUMENTS)
def test_the_direct_decoder_reads_what_protobufs_json_parser_read(name: str) -> None:
    document = DOCUMENTS[name]
    limits = Limits()
    assert otlp.decode(json.dumps(document).encode(), JSON, limits) == oracle(document, limits)


@pytest.mark.parametrize("name", REFUSED)
def test_the_direct_decoder_refuses_what_protobufs_json_parser_refused(name: str) -> None:
    document = REFUSED[name]
    with pytest.raises((json_format.ParseError, ValueError)):
        oracle(document, Limits())
    with pytest.raises(InvalidInput):
        otlp.decode(json.dumps(document).encode(), JSON, Limits())


def test_attributes_over_the_per_owner_limit_are_dropped_and_counted() -> None:
    attributes = [attr(f"k{i}", {"intValue": str(i)}) for i in range(10)]
    body = json.dumps(doc(span(attributes=[{}, *attributes]))).encode()
    decoded = otlp.decode(body, JSON, Limits(max_attributes=4))
    (view,) = decoded.spans
    assert list(view.attributes) == ["k0", "k1", "k2", "k3"]  # the keyless one is not counted
    assert decoded.dropped_attributes == 6


def test_entries_are_counted_before_any_span_is_read() -> None:
    # The 3rd span is broken; the count refuses the export before that is seen.
    body = json.dumps(doc(span(), span(), span(name=5))).encode()
    with pytest.raises(TooLarge, match="too many spans"):
        otlp.decode(body, JSON, Limits(max_spans=2))


def test_ids_under_proto_field_names_are_read_as_hex_too() -> None:
    # ParseDict read them as base64 (only the camelCase ids were rewritten before it ran).
    body = json.dumps(
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"trace_id": TRACE, "span_id": SPAN}]}]}]}
    ).encode()
    (view,) = otlp.decode(body, JSON, Limits()).spans
    assert (view.trace_id, view.span_id) == (TRACE.lower(), SPAN)


#: Peak RSS growth of one decoding in a fresh interpreter (``ru_maxrss`` only grows).
PEAK = """
import json, sys
import orjson
from infersight.collector import otlp
from infersight.collector.otlp import JSON, Limits
from tests.collector.test_collector_otlp_json import oracle
span = {"traceId": "5b8efff798038103d269b633813fc60c", "name": "x",
        "attributes": [{"key": f"a{i}"} for i in range(128)]}
body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span] * 1500}]}]}).encode()
def status(field):
    text = open("/proc/self/status").read()
    return int(text.split(field + ":", 1)[1].split()[0])
open("/proc/self/clear_refs", "w").write("5")  # the peak starts here
base = status("VmRSS")
if sys.argv[1] == "direct":
    otlp.decode(body, JSON, Limits())
else:
    oracle(orjson.loads(body), Limits())
print(status("VmHWM") - base)
"""


def test_decoding_builds_no_second_copy_of_the_export() -> None:
    """The worst export the limits accept (keyed attributes, as many as allowed) costs the
    orjson tree and the views, not a protobuf tree besides: under ``ParseDict`` the peak
    grew about twice as much (166 MB against 87 MB for 5 MB of JSON)."""
    root = Path(__file__).resolve().parents[2]

    def peak(kind: str) -> int:
        command = [sys.executable, "-c", PEAK, kind]
        env = {**os.environ, "PYTHONPATH": str(root)}
        return int(subprocess.run(command, capture_output=True, check=True, env=env,
                                  cwd=root, text=True).stdout)  # fmt: skip

    direct, before = peak("direct"), peak("parsedict")
    assert direct < 0.7 * before, (direct, before)


def test_the_first_streamed_chunk_event_is_read_as_protobufs_walk_reads_it() -> None:
    events = [
        {"timeUnixNano": "1764000000900000000", "name": "gen_ai.content.completion.chunk"},
        {"timeUnixNano": "1764000000300000000", "name": "gen_ai.content.completion.chunk"},
        {"timeUnixNano": "1764000000100000000", "name": "gen_ai.prompt"},  # not a chunk
    ]
    document = doc(span(kind="SPAN_KIND_CLIENT", events=events))
    direct = otlp.decode(json.dumps(document).encode(), JSON)
    assert direct.spans[0].first_chunk_ns == 1764000000300000000
    assert direct == oracle(document, Limits())
    plain = otlp.decode(json.dumps(doc(span())).encode(), JSON)
    assert plain.spans[0].first_chunk_ns == 0
