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

from sqlalchemy import ColumnElement, Connection, Engine, and_, case, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from core.errors import InvalidInput, NotFound
from core.query import Selector
from core.sketch import QuantileSketch
from core.slo import EventCounts, Sli, SliKind, SloSpec
from core.window import Resolution, Segment, Window, split
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


def put_slo(engine: Engine, spec: SloSpec, now: datetime) -> bool:
    """Create or replace ``spec``; ``True`` when it was created."""
    values = {"name": spec.name, "spec": spec_to_json(spec), "created_at": now, "updated_at": now}
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
    insert = dialect.insert(slos).values(**values)
    upsert = insert.on_conflict_do_update(
        index_elements=[slos.c.name],
        set_={"spec": insert.excluded.spec, "updated_at": insert.excluded.updated_at},
    )
    with engine.begin() as connection:
        existed = connection.execute(select(slos.c.name).where(slos.c.name == spec.name)).first()
        connection.execute(upsert)
    return existed is None


def get_slo(engine: Engine, name: str) -> SloSpec:
    with engine.connect() as connection:
        row = connection.execute(select(slos.c.spec).where(slos.c.name == name)).first()
    if row is None:
        raise NotFound(f"no SLO named {name!r}", details={"name": name})
    return spec_from_json(name, row[0])


def list_slos(engine: Engine) -> list[SloSpec]:
    with engine.connect() as connection:
        rows = connection.execute(select(slos.c.name, slos.c.spec).order_by(slos.c.name)).all()
    return [spec_from_json(name, text) for name, text in rows]


def delete_slo(engine: Engine, name: str) -> None:
    with engine.begin() as connection:
        if not connection.execute(delete(slos).where(slos.c.name == name)).rowcount:
            raise NotFound(f"no SLO named {name!r}", details={"name": name})


# -- event counts ---------------------------------------------------------------------------


def _pinned(columns: Any, selector: Selector) -> list[ColumnElement[bool]]:
    return [columns[name] == value for name, value in selector.items()]


def _raw_counts(
    connection: Connection, sli: Sli, start: datetime, end: datetime, selector: Selector
) -> EventCounts:
    where = [requests.c.start >= start, requests.c.start < end, *_pinned(requests.c, selector)]
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
    assert segment.resolution is not None
    where = and_(
        request_rollups.c.resolution == segment.resolution.value,
        request_rollups.c.bucket >= segment.start,
        request_rollups.c.bucket < segment.end,
        *_pinned(request_rollups.c, selector),
    )
    if sli.kind is SliKind.AVAILABILITY:
        row = connection.execute(
            select(func.sum(request_rollups.c.requests), func.sum(request_rollups.c.errors)).where(
                where
            )
        ).one()
        return EventCounts(int(row[0] or 0), int(row[1] or 0))
    assert sli.metric is not None
    assert sli.threshold_s is not None
    column = request_rollups.c[f"{sli.metric}_sketch"]
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
        return _raw_counts(connection, sli, window.start, window.end, selector)
    counts = EventCounts(0, 0)
    for segment in split(window, finest):
        if segment.raw:
            counts += _raw_counts(connection, sli, segment.start, segment.end, selector)
        else:
            counts += _rollup_counts(connection, sli, segment, selector)
    return counts


def count_windows(
    connection: Connection,
    spec: SloSpec,
    windows: Iterable[timedelta],
    now: datetime,
    *,
    finest_for: Callable[[Window, datetime], Resolution] | None = None,
) -> dict[timedelta, EventCounts]:
    """Counts for ``spec`` over each window that ends at ``now`` (burn windows, SLO window).

    ``finest_for(window, now)`` gives the finest rollup resolution still kept for a window
    (``RetentionPolicy.finest_for``); by default minute rollups are assumed everywhere.
    """
    out: dict[timedelta, EventCounts] = {}
    for length in windows:
        if length <= timedelta(0):
            raise InvalidInput("windows must be positive")
        window = Window.last(length, now)
        finest = finest_for(window, now) if finest_for is not None else Resolution.MINUTE
        out[length] = count_events(connection, spec.sli, window, spec.selector, finest=finest)
    return out
