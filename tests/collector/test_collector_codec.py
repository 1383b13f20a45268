"""Spool payloads: a record the sidecar validated comes back from its spool equal, without a
second validation, and a payload of the wrong shape is still refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from infersight.collector.codec import decode_record, encode_record
from infersight.core.errors import InvalidRecord
from infersight.core.records import RECORD_FIELDS, Engine, RequestRecord, Status

T0 = datetime(2026, 11, 30, 9, 0, 0, 250000, tzinfo=UTC)


def full_record() -> RequestRecord:
    return RequestRecord(
        trace_id="ab" * 16,
        span_id="cd" * 8,
        start=T0,
        instance="node-1",
        service="vllm",
        engine=Engine.VLLM,
        model="llama",
        tenant="acme",
        priority="high",
        operation="chat",
        ttft_s=0.12,
        tpot_s=0.02,
        e2e_s=1.4,
        queue_s=0.0,
        prefill_s=0.1,
        decode_s=1.25,
        gateway_s=0.003,
        input_tokens=100,
        output_tokens=64,
        cached_tokens=0,
        status=Status.ERROR,
        error_type="abort",
        finish_reason="abort",
    )


@pytest.mark.parametrize(
    "original", [full_record(), RequestRecord("ef" * 16, "01" * 8, T0, "node-1")]
)
def test_a_spooled_record_decodes_to_an_equal_record_with_enum_fields(
    original: RequestRecord,
) -> None:
    decoded = decode_record(encode_record(original))
    assert decoded == original
    assert type(decoded.engine) is Engine
    assert type(decoded.status) is Status
    assert decoded.start == original.start


def test_a_payload_of_the_wrong_shape_or_with_an_unknown_engine_is_refused() -> None:
    values = json.loads(encode_record(full_record()))
    with pytest.raises(ValueError, match="one value per field"):
        decode_record(json.dumps(values[:-1]).encode())
    with pytest.raises(ValueError, match="one value per field"):
        decode_record(b'{"trace_id": "x"}')
    values[5] = "llama.cpp"  # the engine
    with pytest.raises(InvalidRecord, match="engine must be one of"):
        decode_record(json.dumps(values).encode())
    with pytest.raises(InvalidRecord, match="one value per field"):
        RequestRecord.trusted(values[:3])


def test_a_record_spooled_by_the_standard_json_encoder_still_decodes() -> None:
    # Spools written before orjson: the same JSON list, spaced the standard library's way.
    original = full_record()
    values = json.loads(encode_record(original))
    assert decode_record(json.dumps(values).encode()) == original


def test_a_label_holding_a_lone_surrogate_survives_the_spool() -> None:
    # Command-line labels may carry undecodable bytes as surrogate escapes; orjson refuses them.
    original = RequestRecord("ef" * 16, "01" * 8, T0, "node-\udcff", model="m\ud800")
    decoded = decode_record(encode_record(original))
    assert decoded == original


def test_truncated_json_or_an_unknown_status_is_refused() -> None:
    with pytest.raises(json.JSONDecodeError):
        decode_record(b'["ab", "cd"')
    values = json.loads(encode_record(full_record()))
    values[RECORD_FIELDS.index("status")] = "maybe"
    with pytest.raises(InvalidRecord, match="status must be one of"):
        decode_record(json.dumps(values).encode())
