"""SLO definitions in the store, and the SLI event counts an evaluation needs.

Definitions are stored as a small JSON document of their own (not the user's spec file, whose
format is the API's business), keyed by name. Event counts cover a window the way every query
does (``core.window.split``): raw rows at the partial-minute edges, rollups in between. Rollups
count availability exactly; for a latency SLI they count from the minute sketches, which is
exact except for requests in the sketch bucket that holds the threshold (within 1 %, see
``QuantileSketch.count_at_most``). ``exact=True`` counts raw rows only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    case,
    func,
    select,
)

from core.errors import InvalidInput
from core.query import LATENCY_METRICS, Selector
from core.records import DURATION_FIELDS, GROUP_LABELS
from core.sketch import QuantileSketch, merge_all
from core.slo import EventCounts, Sli, SliKind, SloSpec
from core.window import Resolution, Segment, Window, split
from storage.documents import NamedDocuments
from storage.sql import raw_where, read_segments, rollup_where, sketch_column
from storage.tables import request_rollups, requests, slos

# -- definitions ----------------------------------------------------------------------------


def spec_to_json(spec: SloSpec) -> str:
    return json.dumps(
        {
            "sli": {
                "kind": spec.sli.kind.value,
                "metric": spec.sli.metric,
                "threshold_s": spec.sli.threshold_s,
            },
            "objective": spec.objective,
            "window_s": int(spec.window.total_seconds()),
            "selector": dict(spec.selector.items()),
            "description": spec.description,
        },
        sort_keys=True,
    )


def spec_from_json(name: str, text: str) -> SloSpec:
    data = json.loads(text)
    return SloSpec(
        name=name,
        sli=Sli(SliKind(data["sli"]["kind"]), data["sli"]["metric"], data["sli"]["threshold_s"]),
        objective=float(data["objective"]),
        window=timedelta(seconds=int(data["window_s"])),
        selector=Selector(**data["selector"]),
        description=str(data.get("description", "")),
    )


_SLOS = NamedDocuments(slos, "spec", "SLO")


def put_slo(engine: Engine, spec: SloSpec, now: datetime) -> bool:
    """Create or replace ``spec``; ``True`` when it was created."""
    return _SLOS.put_stamped(engine, spec.name, spec_to_json(spec), now)


def get_slo(engine: Engine, name: str) -> SloSpec:
    return spec_from_json(name, _SLOS.get(engine, name))


def list_slos(engine: Engine) -> list[SloSpec]:
    return [spec_from_json(name, text) for name, text in _SLOS.all(engine)]


def delete_slo(engine: Engine, name: str) -> None:
    _SLOS.delete(engine, name)


# -- event counts ---------------------------------------------------------------------------


def _raw_counts(
    connection: Connection, sli: Sli, span: Segment | Window, selector: Selector
) -> EventCounts:
    where = [raw_where(span, selector)]
    if sli.kind is SliKind.AVAILABILITY:
        total = func.count()
        bad = func.sum(case((requests.c.status == "error", 1), else_=0))
    else:
        assert sli.column is not None
        value = requests.c[sli.column]
        where.append(value.is_not(None))
        total = func.count()
        bad = func.sum(case((value > sli.threshold_s, 1), else_=0))
    row = connection.execute(select(total, bad).where(and_(*where))).one()
    return EventCounts(int(row[0] or 0), int(row[1] or 0))


def _rollup_counts(
    connection: Connection, sli: Sli, segment: Segment, selector: Selector
) -> EventCounts:
    where = rollup_where(segment, selector)
    if sli.kind is SliKind.AVAILABILITY:
        row = connection.execute(
            select(func.sum(request_rollups.c.requests), func.sum(request_rollups.c.errors)).where(
                where
            )
        ).one()
        return EventCounts(int(row[0] or 0), int(row[1] or 0))
    assert sli.column is not None
    assert sli.threshold_s is not None
    column = sketch_column(sli.column)
    total = good = 0
    for (blob,) in connection.execute(select(column).where(where, column.is_not(None))):
        sketch = QuantileSketch.from_bytes(blob)
        total += sketch.count
        good += sketch.count_at_most(sli.threshold_s)
    return EventCounts(total, total - good)


def count_events(
    connection: Connection,
    sli: Sli,
    window: Window,
    selector: Selector = Selector(),
    *,
    exact: bool = False,
    finest: Resolution = Resolution.MINUTE,
) -> EventCounts:
    """Events and bad events for ``sli`` among the requests ``selector`` picks in ``window``."""
    if exact:
        return _raw_counts(connection, sli, window, selector)
    counts = EventCounts(0, 0)
    for part in read_segments(
        window,
        finest,
        lambda segment: _raw_counts(connection, sli, segment, selector),
        lambda segment: _rollup_counts(connection, sli, segment, selector),
    ):
        counts += part
    return counts


def count_windows(
    connection: Connection,
    spec: SloSpec,
    windows: Iterable[timedelta],
    now: datetime,
    *,
    finest_for: FinestFor | None = None,
) -> dict[timedelta, EventCounts]:
    """Counts for ``spec`` over each window that ends at ``now`` (burn windows, SLO window)."""
    return CycleCounter(connection, now, finest_for).count(spec, windows)


FinestFor = Callable[[Window, datetime], Resolution]
_Key = tuple[str, ...]


class CycleCounter:
    """Event counts of many SLOs at one ``now``, reading each part of the store once.

    All windows of an evaluation cycle end at the same ``now``, so every SLO's windows split
    into the same few segments (``core.window.split``); only selectors and thresholds differ.
    The counter reads each segment once for every series — rollup counts, rollup sketches
    (merged per series and segment) and the few raw rows at the partial-minute edges — and
    each SLO then adds up its own series. The answer equals ``count_events`` per window.
    ``finest_for(window, now)`` gives the finest rollup resolution still kept for a window
    (``RetentionPolicy.finest_for``); by default minute rollups are assumed everywhere.
    """

    def __init__(
        self, connection: Connection, now: datetime, finest_for: FinestFor | None = None
    ) -> None:
        self.connection = connection
        self.now = now
        self.finest_for = finest_for
        self._plans: dict[timedelta, list[Segment]] = {}
        self._raw: dict[Segment, dict[_Key, list[tuple[Any, ...]]]] = {}
        self._totals: dict[Segment, dict[_Key, tuple[int, int]]] = {}
        self._sketches: dict[tuple[str, Segment], dict[_Key, QuantileSketch]] = {}

    def count(self, spec: SloSpec, windows: Iterable[timedelta]) -> dict[timedelta, EventCounts]:
        plans = {length: self._plan(length) for length in windows}
        wanted = {seg for plan in plans.values() for seg in plan}
        pinned = [(GROUP_LABELS.index(name), value) for name, value in spec.selector.items()]
        per_segment = {seg: self._segment(spec.sli, seg, pinned) for seg in wanted}
        out = {}
        for length, plan in plans.items():
            total = EventCounts(0, 0)
            for seg in plan:
                total += per_segment[seg]
            out[length] = total
        return out

    def _plan(self, length: timedelta) -> list[Segment]:
        if length not in self._plans:
            if length <= timedelta(0):
                raise InvalidInput("windows must be positive")
            window = Window.last(length, self.now)
            finest = self.finest_for(window, self.now) if self.finest_for else Resolution.MINUTE
            self._plans[length] = split(window, finest)
        return self._plans[length]

    def _segment(self, sli: Sli, seg: Segment, pinned: list[tuple[int, str]]) -> EventCounts:
        def picked(key: _Key) -> bool:
            return all(key[i] == value for i, value in pinned)

        if seg.raw:
            return _count_rows(
                sli,
                (row for key, rows in self._raw_rows(seg).items() if picked(key) for row in rows),
            )
        if sli.kind is SliKind.AVAILABILITY:
            total = bad = 0
            for key, (requests_, errors) in self._rollup_totals(seg).items():
                if picked(key):
                    total, bad = total + requests_, bad + errors
            return EventCounts(total, bad)
        assert sli.metric is not None
        assert sli.threshold_s is not None
        total = good = 0
        for key, sketch in self._rollup_sketches(sli.metric, seg).items():
            if picked(key):
                total += sketch.count
                good += sketch.count_at_most(sli.threshold_s)
        return EventCounts(total, total - good)

    def _raw_rows(self, seg: Segment) -> dict[_Key, list[tuple[Any, ...]]]:
        if seg not in self._raw:
            labels = [requests.c[name] for name in GROUP_LABELS]
            values = [requests.c.status, *(requests.c[name] for name in DURATION_FIELDS)]
            query = select(*labels, *values).where(raw_where(seg))
            grouped: dict[_Key, list[tuple[Any, ...]]] = {}
            for row in self.connection.execute(query):
                grouped.setdefault(tuple(row[:4]), []).append(tuple(row[4:]))
            self._raw[seg] = grouped
        return self._raw[seg]

    def _rollup_totals(self, seg: Segment) -> dict[_Key, tuple[int, int]]:
        if seg not in self._totals:
            r = request_rollups.c
            labels = [r[name] for name in GROUP_LABELS]
            query = (
                select(*labels, func.sum(r.requests), func.sum(r.errors))
                .where(rollup_where(seg))
                .group_by(*labels)
            )
            self._totals[seg] = {
                tuple(row[:4]): (int(row[4] or 0), int(row[5] or 0))
                for row in self.connection.execute(query)
            }
        return self._totals[seg]

    def _rollup_sketches(self, metric: str, seg: Segment) -> dict[_Key, QuantileSketch]:
        if (metric, seg) not in self._sketches:
            r = request_rollups.c
            column = sketch_column(LATENCY_METRICS[metric])
            query = select(*(r[name] for name in GROUP_LABELS), column).where(
                rollup_where(seg), column.is_not(None)
            )
            parts: dict[_Key, list[QuantileSketch]] = {}
            for *key, blob in self.connection.execute(query):
                parts.setdefault(tuple(key), []).append(QuantileSketch.from_bytes(blob))
            self._sketches[(metric, seg)] = {key: merge_all(p) for key, p in parts.items()}
        return self._sketches[(metric, seg)]


def _count_rows(sli: Sli, rows: Iterable[tuple[Any, ...]]) -> EventCounts:
    """``core.slo.count_events`` over raw ``(status, *DURATION_FIELDS)`` rows."""
    total = bad = 0
    if sli.column is None:
        for row in rows:
            total += 1
            bad += row[0] == "error"
        return EventCounts(total, bad)
    index, threshold = 1 + DURATION_FIELDS.index(sli.column), sli.threshold_s or 0.0
    for row in rows:
        value = row[index]
        if value is not None:
            total += 1
            bad += value > threshold
    return EventCounts(total, bad)
