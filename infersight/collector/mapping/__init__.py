"""Span → ``RequestRecord`` mapping: a shared core (``base``) and one mapper per engine.

``map_span`` (in ``dispatch``) is the one entry point: it never raises for bad data, it
returns an outcome that says what the span became (a record, a stage fragment) or why it
was skipped. ``map_row`` is the same with a request as its ``RecordRow`` (the values the
spool stores), which is what the ingest path uses.
"""

from infersight.collector.mapping.base import (
    Link,
    Mapped,
    MappingContext,
    Outcome,
    Place,
    RecordRow,
    Skipped,
    StageFragment,
    place_of,
)
from infersight.collector.mapping.dispatch import map_row, map_span
from infersight.collector.mapping.spans import SpanView

__all__ = [
    "Link",
    "Mapped",
    "MappingContext",
    "Outcome",
    "Place",
    "RecordRow",
    "Skipped",
    "SpanView",
    "StageFragment",
    "map_row",
    "map_span",
    "place_of",
]
