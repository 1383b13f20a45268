"""A simulated server on a free port (uvicorn in a thread) and profiles scaled for tests."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from infersight.simulator.profiles import ModelProfile, StepCosts
from infersight.simulator.realtime import RealtimeServer
from infersight.simulator.sinks import MemorySink
from infersight.simulator.specs import load_profile
from tests.peers import serving_app

EPOCH = datetime(2026, 11, 30, 12, tzinfo=UTC)


def scaled_profile(slowdown: float, **changes: object) -> ModelProfile:
    """Llama 3.1 8B on an H200 with every step ``slowdown`` times slower.

    Slower steps keep the client's own scheduling noise (milliseconds on a shared CI box)
    small against what is measured, and keep runs short: a saturated server at a few dozen
    requests per second, not hundreds.
    """
    base = load_profile("llama-3.1-8b-h200x1")
    step = base.step
    slower = StepCosts(
        cpu_overhead_s=step.cpu_overhead_s * slowdown,
        decode_base_s=step.decode_base_s * slowdown,
        decode_per_seq_s=step.decode_per_seq_s * slowdown,
        decode_per_kv_token_s=step.decode_per_kv_token_s * slowdown,
        prefill_per_token_s=step.prefill_per_token_s * slowdown,
    )
    return dataclasses.replace(base, step=slower, **changes)  # type: ignore[arg-type]


@contextmanager
def serving(profile: ModelProfile) -> Iterator[tuple[str, RealtimeServer, MemorySink]]:
    """The server's base URL, the server, and the sink its records go to."""
    sink = MemorySink()
    server = RealtimeServer.standalone("lt-0", profile, epoch=EPOCH, sinks=[sink])
    with serving_app(server.app()) as url:
        yield url, server, sink
