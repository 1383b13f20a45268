"""A caller's W3C ``traceparent`` puts the simulated server's spans in the caller's trace, as
children of the caller's span (as vLLM's are), through the real OTLP exporter."""

from __future__ import annotations

import dataclasses

import pytest

from infersight.simulator.events import Batch
from infersight.simulator.realtime import trace_context
from infersight.simulator.sinks.otlp import OtlpSink
from tests.simulator.otlp_receiver import http_receiver
from tests.simulator.support import RunFn

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"00-{CALLER_TRACE}-{CALLER_SPAN}-01", (CALLER_TRACE, CALLER_SPAN)),
        (f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-00", (CALLER_TRACE, CALLER_SPAN)),
        (f"00-{CALLER_TRACE}-{'0' * 16}-01", ("", "")),
        (f"00-{'0' * 32}-{CALLER_SPAN}-01", ("", "")),
        (f"ff-{CALLER_TRACE}-{CALLER_SPAN}-01", ("", "")),
        (f"00-{CALLER_TRACE}-xyz-01", ("", "")),
        ("", ("", "")),
    ],
    ids=["sampled", "upper case", "zero parent", "zero trace", "bad version", "bad span", "none"],
)
def test_a_traceparent_gives_the_callers_trace_and_span(
    header: str, expected: tuple[str, str]
) -> None:
    assert trace_context(header) == expected


def test_a_propagated_request_span_is_a_child_of_the_callers_span(run_fleet: RunFn) -> None:
    run = run_fleet(2.0, 5.0)
    completions = [
        dataclasses.replace(
            c,
            record=dataclasses.replace(c.record, trace_id=CALLER_TRACE),
            parent_span_id=CALLER_SPAN,
        )
        for c in run.sink.completions[:3]
    ]
    assert completions
    with http_receiver() as (endpoint, received):
        sink = OtlpSink(endpoint)
        sink.write(Batch(tuple(completions)))
        sink.close()
        spans = [s for _, s in received.spans()]
    requests = [s for s in spans if s.name == "llm_request"]
    assert len(requests) == len(completions)
    for span in requests:
        assert span.trace_id.hex() == CALLER_TRACE
        assert span.parent_span_id.hex() == CALLER_SPAN
    by_id = {s.span_id: s for s in requests}
    tokenize = [s for s in spans if s.name == "tokenize"]
    assert tokenize
    assert all(s.parent_span_id in by_id for s in tokenize)
