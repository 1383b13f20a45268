"""Span → ``RequestRecord`` mapping: a shared core (``base``) and one mapper per engine.

``map_span`` (in ``dispatch``) is the one entry point: it never raises for bad data, it
returns an outcome that says what the span became (a record, a stage fragment) or why it
was skipped.
"""

from infersight.collector.mapping.base import (
    Link,
    MappingContext,
    Outcome,
    Place,
    Skipped,
    StageFragment,
    place_of,
)
from infersight.collector.mapping.dispatch import map_span
from infersight.collector.mapping.spans import SpanView

__all__ = [
    "Link",
    "MappingContext",
    "Outcome",
    "Place",
    "Skipped",
    "SpanView",
    "StageFragment",
    "map_span",
    "place_of",
]
