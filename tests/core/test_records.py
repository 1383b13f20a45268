"""Validation of the normalised records: every bad value is refused with a clear error."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from infersight.core.errors import InvalidRecord
from infersight.core.records import (
    Engine,
    RequestRecord,
    Status,
    normalise_span_id,
    normalise_trace_id,
)
from infersight.core.samples import GpuSample, ServerSample

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
GOOD = {"trace_id": "ab" * 16, "span_id": "cd" * 8, "start": NOW, "instance": "gpu-0"}


def test_a_minimal_record_is_valid_and_unknown_stages_stay_unknown():
    record = RequestRecord(**GOOD, engine="tgi", status="error")
    assert record.engine is Engine.TGI
    assert record.status is Status.ERROR
    assert record.ttft_s is None
    assert record.end is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"trace_id": "xyz"}, "trace_id"),
        ({"trace_id": "0" * 32}, "not all zero"),
        ({"span_id": "AB" * 8}, "span_id"),
        ({"start": datetime(2026, 1, 1)}, "timezone-aware"),
        ({"start": datetime(1990, 1, 1, tzinfo=UTC)}, "out of range"),
        ({"instance": ""}, "instance"),
        ({"model": "m" * 300}, "longer than"),
        ({"ttft_s": -0.1}, "ttft_s"),
        ({"tpot_s": float("nan")}, "tpot_s"),
        ({"e2e_s": float("inf")}, "e2e_s"),
        ({"e2e_s": 10 * 86400.0}, "e2e_s"),
        ({"input_tokens": -1}, "input_tokens"),
        ({"output_tokens": 1.5}, "output_tokens"),
        ({"engine": "llama.cpp"}, "engine must be one of"),
        ({"status": "maybe"}, "status must be one of"),
    ],
)
def test_bad_records_are_refused(change, message):
    with pytest.raises(InvalidRecord, match=message):
        RequestRecord(**{**GOOD, **change})


def test_ids_normalise_from_bytes_ints_and_short_hex():
    assert normalise_trace_id(b"\x01" * 16) == "01" * 16
    assert normalise_trace_id(0xABC) == "0" * 29 + "abc"
    assert normalise_trace_id("DEADBEEF00112233") == "0" * 16 + "deadbeef00112233"  # SGLang 64-bit
    assert normalise_span_id(255) == "0" * 14 + "ff"
    with pytest.raises(InvalidRecord):
        normalise_trace_id(-1)


def test_gpu_samples_check_units_and_flags():
    sample = GpuSample(
        ts=NOW,
        instance="gpu-0",
        gpu_index=0,
        util_gpu=0.5,
        throttle_reasons=("hw_thermal_slowdown",),
    )
    assert sample.throttled
    assert not GpuSample(
        ts=NOW, instance="gpu-0", gpu_index=0, throttle_reasons=("gpu_idle",)
    ).throttled
    with pytest.raises(InvalidRecord, match="util_gpu"):
        GpuSample(ts=NOW, instance="gpu-0", gpu_index=0, util_gpu=87.0)  # percent, not a ratio
    with pytest.raises(InvalidRecord, match="throttle"):
        GpuSample(ts=NOW, instance="gpu-0", gpu_index=0, throttle_reasons=("too_hot",))


def test_server_samples_refuse_negative_gauges():
    with pytest.raises(InvalidRecord, match="requests_waiting"):
        ServerSample(ts=NOW, instance="gpu-0", requests_waiting=-1)
    with pytest.raises(InvalidRecord, match="kv_cache_usage"):
        ServerSample(ts=NOW, instance="gpu-0", kv_cache_usage=1.5)
