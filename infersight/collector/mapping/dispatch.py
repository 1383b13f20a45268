"""Which mapper a span goes to. The order matters: a client instrumentation's span first (the
caller's view of a call to any server: ``collector.mapping.client``), then the span shapes of
the engine registry in its order (``collector.engines.SPAN_SHAPES``: the peers' in front of
engines, such as llm-d's P/D proxy, then the engines' from the most specific shapes to the
generic GenAI conventions), then stage slices; anything else is skipped as "not a request".

The registry is read when a span is mapped, not at import: it imports the mappers, which
import this package."""

from __future__ import annotations

from infersight.collector import engines
from infersight.collector.mapping import client, genai
from infersight.collector.mapping.base import (
    Mapped,
    MappingContext,
    Outcome,
    Skipped,
    as_outcome,
    classify_stage,
    stage_fragment,
)
from infersight.collector.mapping.spans import SpanView


def guess_engine(span: SpanView) -> str:
    return genai.engine_of(span).value


def map_span(span: SpanView, ctx: MappingContext) -> Outcome:
    """The outcome for one span, a request as its ``RequestRecord``; never raises for bad
    data."""
    return as_outcome(map_row(span, ctx), span)


def map_row(span: SpanView, ctx: MappingContext) -> Mapped:
    """The outcome for one span, a request as its ``RecordRow`` (what the ingest path
    spools); never raises for bad data."""
    try:
        if client.claims(span):
            return client.map_span(span)
        for shape in engines.SPAN_SHAPES:
            if shape.claims(span):
                return shape.map_span(span, ctx)
        stage = classify_stage(span.name)
        # Stage slices are children; only a gateway span may be the trace's root.
        if stage is not None and (span.parent_span_id or stage == "gateway"):
            return stage_fragment(span, stage)
    except (ValueError, TypeError, OverflowError) as exc:  # a shape no mapper foresaw
        return Skipped("mapping_error", guess_engine(span), rejected=True, detail=str(exc)[:200])
    return Skipped("not_a_request", guess_engine(span))
