"""Which mapper a span goes to. The order matters: a client instrumentation's span first (the
caller's view of a call: ``collector.mapping.client``), then a P/D proxy's spans
(``collector.mapping.pd_proxy``), then the most specific shapes (TGI's
string durations, SGLang's ``Req`` roots), then vLLM, then the generic GenAI conventions,
then stage slices; anything else is skipped as "not a request"."""

from __future__ import annotations

from collections.abc import Callable

from infersight.collector.mapping import client, genai, pd_proxy, sglang, tgi, vllm
from infersight.collector.mapping.base import (
    MappingContext,
    Outcome,
    Skipped,
    classify_stage,
    stage_fragment,
)
from infersight.collector.mapping.spans import SpanView

_MAPPERS: tuple[
    tuple[Callable[[SpanView], bool], Callable[[SpanView, MappingContext], Outcome]], ...
] = (
    (tgi.claims, tgi.map_span),
    (sglang.claims, sglang.map_span),
    (vllm.claims, vllm.map_span),
    (genai.claims, genai.map_span),
)


def guess_engine(span: SpanView) -> str:
    return genai.engine_of(span).value


def map_span(span: SpanView, ctx: MappingContext) -> Outcome:
    """The outcome for one span; never raises for bad data."""
    try:
        if client.claims(span):
            return client.map_span(span)
        if pd_proxy.claims(span):
            return pd_proxy.map_span(span)
        for claims, mapper in _MAPPERS:
            if claims(span):
                return mapper(span, ctx)
        stage = classify_stage(span.name)
        # Stage slices are children; only a gateway span may be the trace's root.
        if stage is not None and (span.parent_span_id or stage == "gateway"):
            return stage_fragment(span, stage)
    except (ValueError, TypeError, OverflowError) as exc:  # a shape no mapper foresaw
        return Skipped("mapping_error", guess_engine(span), rejected=True, detail=str(exc)[:200])
    return Skipped("not_a_request", guess_engine(span))
