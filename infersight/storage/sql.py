"""SQL pieces the storage modules share, each written once.

* ``insert_for``: ``INSERT`` in the bind's dialect, the one that has ``ON CONFLICT`` (PostgreSQL
  or SQLite: the two stores infersight runs on).
* ``begin``: a transaction of its own on an engine, or the caller's on a connection (writes
  that must commit together with the caller's).
* ``selected``: the conditions of a ``core.query.Selector`` on a table's label columns;
  ``raw_where`` and ``rollup_where`` add the time range of raw rows and of rollup segments.
* ``sketch_column``: the ``request_rollups`` column that keeps a latency field's sketch
  (``tables.SKETCH_COLUMNS``).
* ``read_segments``: a window read the way every query reads one (``core.window.split``): raw
  rows at the partial-minute edges, the coarsest rollups that fit in between.
* ``selector_shape`` / ``selected_by_shape`` / ``selector_values``, ``segment_values`` /
  ``segments_where`` / ``segment_where``, ``spans_values`` / ``span_where`` and
  ``raw_where_shaped`` / ``rollup_where_shaped`` / ``span_values``: the same conditions with
  their values as parameters, for statements built once per shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from functools import lru_cache
from typing import Any, Final, TypeVar

from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Engine,
    LargeBinary,
    Table,
    and_,
    bindparam,
    func,
    or_,
)
from sqlalchemy.dialects import postgresql, sqlite

from infersight.core.query import Selector
from infersight.core.sketch import HEADER_SIZE
from infersight.core.window import Resolution, Segment, Window, split
from infersight.storage.tables import SKETCH_COLUMNS, request_rollups, requests

#: An ``INSERT`` with ``ON CONFLICT`` clauses (``on_conflict_do_nothing``/``_do_update``).
Insert = postgresql.Insert | sqlite.Insert
T = TypeVar("T")


def begin(bind: Connection | Engine) -> AbstractContextManager[Connection]:
    """A new transaction on an engine; on a connection, the caller's (committed by the caller)."""
    return nullcontext(bind) if isinstance(bind, Connection) else bind.begin()


def insert_for(bind: Connection | Engine, table: Table) -> Insert:
    """``INSERT INTO table`` in ``bind``'s dialect: PostgreSQL's, else SQLite's."""
    if bind.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def selected(table: Table, selector: Selector) -> list[ColumnElement[bool]]:
    """One ``label = value`` condition on ``table`` per label ``selector`` pins,
    ``tenant IN (…)`` for its tenant set (``Selector.tenants``; an empty set picks nothing) and
    ``label NOT IN (…)`` for the values it excludes (``Selector.excluding``)."""
    out: list[ColumnElement[bool]] = [table.c[name] == value for name, value in selector.items()]
    if selector.tenants is not None:
        out.append(table.c.tenant.in_(sorted(selector.tenants)))
    for name, values in selector.excluded:
        out.append(table.c[name].not_in(sorted(values)))
    return out


def raw_where(span: Segment | Window, selector: Selector = Selector()) -> ColumnElement[bool]:
    """The requests that started in ``span`` and that ``selector`` picks."""
    return and_(
        requests.c.start >= span.start,
        requests.c.start < span.end,
        *selected(requests, selector),
    )


def rollup_where(segment: Segment, selector: Selector = Selector()) -> ColumnElement[bool]:
    """The rollup rows of ``segment``'s resolution whose buckets start in it, of the series
    ``selector`` picks."""
    assert segment.resolution is not None
    return and_(
        request_rollups.c.resolution == segment.resolution.value,
        request_rollups.c.bucket >= segment.start,
        request_rollups.c.bucket < segment.end,
        *selected(request_rollups, selector),
    )


# -- statements built once per shape -----------------------------------------------------------
#
# A read builds its statement from its window and selector; building and keying an SQLAlchemy
# statement costs more CPU than running a small one. The helpers below split a read into its
# shape (which labels are pinned, which rollup resolutions it reads), from which a reader builds
# its statement once (``functools.lru_cache``), and its values, passed as parameters.

#: A selector's shape: the labels it pins, whether it carries a tenant set, and the labels
#: it excludes values of (``Selector.excluding``).
SelectorShape = tuple[tuple[str, ...], bool, tuple[str, ...]]


def selector_shape(selector: Selector) -> SelectorShape:
    return (
        tuple(name for name, _ in selector.items()),
        selector.tenants is not None,
        tuple(name for name, _ in selector.excluded),
    )


def selector_values(selector: Selector) -> dict[str, Any]:
    """The parameters of ``selected_by_shape``'s conditions for ``selector``."""
    out: dict[str, Any] = {f"sel_{name}": value for name, value in selector.items()}
    if selector.tenants is not None:
        out["sel_tenants"] = sorted(selector.tenants)
    for k, (_, values) in enumerate(selector.excluded):
        out[f"sel_not_{k}"] = sorted(values)
    return out


def selected_by_shape(table: Table, shape: SelectorShape) -> list[ColumnElement[bool]]:
    """``selected`` with the values as parameters (``selector_values``)."""
    names, tenants, excluded = shape
    out: list[ColumnElement[bool]] = [table.c[name] == bindparam(f"sel_{name}") for name in names]
    if tenants:
        out.append(table.c.tenant.in_(bindparam("sel_tenants", expanding=True)))
    for k, name in enumerate(excluded):
        out.append(table.c[name].not_in(bindparam(f"sel_not_{k}", expanding=True)))
    return out


def span_where(column: ColumnElement[Any], k: int) -> ColumnElement[bool]:
    """``column`` in span ``k`` of a read of several: ``[lo_k, hi_k)`` (``spans_values``)."""
    return and_(column >= bindparam(f"lo_{k}"), column < bindparam(f"hi_{k}"))


def spans_values(spans: Iterable[tuple[datetime, datetime]]) -> dict[str, Any]:
    """The bounds ``lo_k`` and ``hi_k`` of span ``k`` of ``spans`` (``span_where``)."""
    out: dict[str, Any] = {}
    for k, (start, end) in enumerate(spans):
        out[f"lo_{k}"], out[f"hi_{k}"] = start, end
    return out


def segment_where(table: Table, k: int, resolution: str) -> ColumnElement[bool]:
    """The rollup rows of ``table`` in segment ``k`` of a read: resolution ``resolution``,
    buckets in ``[lo_k, hi_k)`` (``segment_values``)."""
    return and_(table.c.resolution == resolution, span_where(table.c.bucket, k))


def segments_where(table: Table, resolutions: tuple[str, ...]) -> ColumnElement[bool]:
    """The rollup rows of ``table`` in any segment ``k`` of a read: resolution
    ``resolutions[k]``, buckets in ``[lo_k, hi_k)`` (``segment_values``)."""
    parts = [segment_where(table, k, resolution) for k, resolution in enumerate(resolutions)]
    return parts[0] if len(parts) == 1 else or_(*parts)


def segment_values(segments: Sequence[Segment]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The resolutions of rollup ``segments`` (``segments_where``'s shape) and their bounds."""
    resolutions = []
    for segment in segments:
        assert segment.resolution is not None
        resolutions.append(segment.resolution.value)
    return tuple(resolutions), spans_values((s.start, s.end) for s in segments)


@lru_cache(maxsize=64)
def raw_where_shaped(shape: SelectorShape) -> ColumnElement[bool]:
    """``raw_where`` with the span (``lo``, ``hi``) and the selector's values as parameters
    (``span_values``); one condition object per shape."""
    return and_(
        requests.c.start >= bindparam("lo"),
        requests.c.start < bindparam("hi"),
        *selected_by_shape(requests, shape),
    )


@lru_cache(maxsize=64)
def rollup_where_shaped(shape: SelectorShape) -> ColumnElement[bool]:
    """``rollup_where`` with the segment (``resolution``, ``lo``, ``hi``) and the selector's
    values as parameters (``span_values``); one condition object per shape."""
    return and_(
        request_rollups.c.resolution == bindparam("resolution"),
        request_rollups.c.bucket >= bindparam("lo"),
        request_rollups.c.bucket < bindparam("hi"),
        *selected_by_shape(request_rollups, shape),
    )


def span_values(segment: Segment, selector: Selector) -> dict[str, Any]:
    """The parameters of ``raw_where_shaped`` (a raw segment) or ``rollup_where_shaped``."""
    out = {"lo": segment.start, "hi": segment.end, **selector_values(selector)}
    if segment.resolution is not None:
        out["resolution"] = segment.resolution.value
    return out


#: Record field (``ttft_s``) → the rollup column with its sketch (``ttft_sketch``).
_SKETCH_OF: Final = {field: column for column, field in SKETCH_COLUMNS.items()}


def sketch_column(field: str) -> Column[Any]:
    """The ``request_rollups`` column that keeps the sketch of latency field ``field``."""
    return request_rollups.c[_SKETCH_OF[field]]


def sketch_header(field: str) -> ColumnElement[bytes]:
    """The first ``HEADER_SIZE`` bytes of field ``field``'s sketch column: its count and sum,
    what ``core.sketch.header_totals`` reads, without the buckets."""
    return func.substr(sketch_column(field), 1, HEADER_SIZE, type_=LargeBinary)


def read_segments(
    window: Window,
    finest: Resolution,
    raw: Callable[[Segment], T],
    rollup: Callable[[Segment], T],
) -> Iterator[T]:
    """What ``raw`` reads of each raw edge of ``window`` and ``rollup`` of each rollup
    segment (rollups no finer than ``finest``), one answer per segment in time order."""
    for segment in split(window, finest):
        yield raw(segment) if segment.raw else rollup(segment)
