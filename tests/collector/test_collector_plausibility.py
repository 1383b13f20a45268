"""Implausible spans and far timestamps are refused per span through ``partial_success``, with
a counted reason, by a real sidecar in front of a real store (SQLite and PostgreSQL); the
plausible spans of the same export are stored."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import select

from infersight.collector.sidecar import Sidecar
from infersight.core.accept import AcceptWindow
from infersight.storage.partitions import list_partitions
from infersight.storage.tables import requests
from infersight.storage.writer import open_writer
from tests.collector.collector_shapes import VLLM_V1
from tests.collector.harness import (
    Key,
    base_url,
    post_spans,
    running_sidecar,
    sidecar_config,
    span_key,
    stored_keys,
    wait_until,
)

pytestmark = pytest.mark.e2e
NS = 1_000_000_000
DAY_NS = 86_400 * NS


def make_span(
    start_ns: int | None = None, end_ns: int | None = None, without: str = "", **attrs: Any
) -> ReadableSpan:
    """One vLLM ``llm_request`` span from the real SDK, with the given times and attributes
    (``without``: an attribute of the shape left out)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "vllm"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    start = time.time_ns() - 3 * NS if start_ns is None else start_ns
    end = start + int(2.25 * NS) if end_ns is None else end_ns
    span = provider.get_tracer("vllm.tracing").start_span(
        "llm_request",
        kind=SpanKind.SERVER,
        attributes={k: v for k, v in {**VLLM_V1, **attrs}.items() if k != without},
        start_time=start,
    )
    span.end(end_time=end)
    provider.shutdown()
    (finished,) = memory.get_finished_spans()
    return finished


@pytest.fixture
def sidecar(store, tmp_path: Path) -> Iterator[Sidecar]:
    accept = AcceptWindow.of_days(14, future_s=300.0)
    config = sidecar_config("plausible", tmp_path / "spool", model="llama-8b", accept=accept)
    with running_sidecar(open_writer(store.engine), config) as app:
        yield app


def export(app: Sidecar, spans: list[ReadableSpan]) -> trace_service_pb2.ExportTraceServiceResponse:
    response = post_spans(base_url(app), spans, timeout=10)
    assert response.status_code == 200
    return trace_service_pb2.ExportTraceServiceResponse.FromString(response.content)


def stored(store) -> set[Key]:
    return set(stored_keys(store.engine))


#: "Now" for the spans a test builds, read when the test starts (not when the module is
#: collected: on a loaded machine a test may run many minutes after collection, and a start
#: "ten minutes ahead" of collection time would by then fall inside the allowed skew).
NOW_NS = time.time_ns()


@pytest.fixture(autouse=True)
def _now() -> None:
    global NOW_NS  # noqa: PLW0603 (one clock for the builders above, set per test)
    NOW_NS = time.time_ns()


#: Each implausible span, named by a sentence, and the reason it is refused for.
IMPLAUSIBLE: dict[str, tuple[Any, str]] = {
    "a TTFT of 50 s in a 1 s request": (
        lambda: make_span(**{"gen_ai.latency.time_to_first_token": 50.0, "gen_ai.latency.e2e": 1.0,
                             "gen_ai.latency.time_in_model_decode": 0.5}),
        "ttft_exceeds_e2e",
    ),
    "a queue time longer than the request": (
        lambda: make_span(**{"gen_ai.latency.time_in_queue": 9.0}),
        "stage_exceeds_e2e",
    ),
    "a span that ends before it starts, without an e2e attribute": (
        lambda: make_span(NOW_NS - 2 * NS, NOW_NS - 5 * NS, without="gen_ai.latency.e2e"),
        "end_before_start",
    ),
    "a span that ends before it starts, with an e2e attribute": (
        lambda: make_span(NOW_NS - 2 * NS, NOW_NS - 5 * NS),
        "end_before_start",
    ),
    "1.5 output tokens": (
        lambda: make_span(**{"gen_ai.usage.completion_tokens": 1.5}),
        "invalid_tokens",
    ),
    "a token count that is not a number": (
        lambda: make_span(**{"gen_ai.usage.prompt_tokens": "many"}),
        "invalid_tokens",
    ),
    "a start ten years ahead": (lambda: make_span(NOW_NS + 3650 * DAY_NS), "start_in_future"),
    "a start ten minutes ahead, beyond the skew": (
        lambda: make_span(NOW_NS + 600 * NS),
        "start_in_future",
    ),
    "a start older than the raw retention": (
        lambda: make_span(NOW_NS - 20 * DAY_NS),
        "start_too_old",
    ),
    "a start in 2000": (lambda: make_span(946_684_800 * NS), "start_too_old"),
}  # fmt: skip


def test_implausible_spans_are_rejected_with_their_reasons_and_the_rest_are_stored(
    store, sidecar: Sidecar
) -> None:
    good = [make_span(), make_span(NOW_NS + 60 * NS), make_span(NOW_NS - 13 * DAY_NS)]
    refused = {sentence: build() for sentence, (build, _) in IMPLAUSIBLE.items()}
    reasons = Counter(reason for _, reason in IMPLAUSIBLE.values())
    answer = export(sidecar, [good[0], *refused.values(), *good[1:]])
    assert answer.partial_success.rejected_spans == len(refused)
    expected = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    assert answer.partial_success.error_message == expected
    metrics = sidecar.metrics
    for reason, n in reasons.items():
        assert metrics.value("infersight_collector_spans_rejected_total", reason=reason) == n
    assert metrics.value("infersight_collector_spans_accepted_total") == len(good)
    assert wait_until(lambda: stored(store) == {span_key(s) for s in good})
    for sentence, span in refused.items():
        assert span_key(span) not in stored(store), sentence


def test_plausible_edge_values_are_accepted(store, sidecar: Sidecar) -> None:
    spans = [
        make_span(**{"gen_ai.latency.time_to_first_token": 2.27}),  # e2e 2.25, within 1 % + 10 ms
        make_span(**{"gen_ai.usage.completion_tokens": 41.0, "gen_ai.usage.prompt_tokens": "12"}),
        make_span(**{"gen_ai.usage.completion_tokens": 0}),
        make_span(NOW_NS - 2 * NS, NOW_NS - 2 * NS),  # zero length
    ]
    answer = export(sidecar, spans)
    assert not answer.HasField("partial_success")
    assert wait_until(lambda: stored(store) == {span_key(s) for s in spans})
    with store.engine.connect() as c:
        tokens = dict(c.execute(select(requests.c.span_id, requests.c.output_tokens)).all())
    assert tokens[span_key(spans[1])[1]] == 41


@pytest.mark.postgres
def test_starts_spread_over_two_centuries_create_no_partitions(pg_store, tmp_path: Path) -> None:
    """The issue's reproduction: starts spread over 2000–2199 once made a partition each."""
    config = sidecar_config("far", tmp_path / "spool", accept=AcceptWindow.of_days(14))
    with running_sidecar(open_writer(pg_store.engine), config) as app:
        with pg_store.engine.connect() as c:
            before = {name for name, _ in list_partitions(c, "requests")}
        year_ns = 365 * DAY_NS
        far = [make_span(946_684_800 * NS + i * year_ns // 2) for i in range(400)]
        answer = export(app, [*far, make_span()])
        plausible = [s for s in far if abs(s.start_time - NOW_NS) <= 14 * DAY_NS]
        assert answer.partial_success.rejected_spans == len(far) - len(plausible)
        assert wait_until(lambda: len(stored(pg_store)) == 1 + len(plausible))
        with pg_store.engine.connect() as c:
            after = {name for name, _ in list_partitions(c, "requests")}
        assert len(after - before) <= 1  # today's, at most
