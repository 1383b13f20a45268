"""The shared SQL pieces (``storage.sql``) against real stores (SQLite and PostgreSQL): the
dialect's insert, a selector's conditions, raw and rollup time ranges, the sketch column of a
latency field, and the raw-or-rollup reading of a window."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite

from infersight.core.query import Selector
from infersight.core.records import DURATION_FIELDS
from infersight.core.sketch import header_totals
from infersight.core.window import Resolution, Segment, Window, split
from infersight.storage.sql import (
    insert_for,
    raw_where,
    read_segments,
    rollup_where,
    selected,
    sketch_column,
)
from infersight.storage.tables import SKETCH_COLUMNS, request_rollups, requests, revoked_sessions
from infersight.storage.writer import open_writer
from tests.factories import make_records

START = datetime(2026, 11, 28, 10, tzinfo=UTC)
LATER = START + timedelta(days=1)


def _expiry(engine, digest):
    with engine.connect() as connection:
        return connection.execute(
            select(revoked_sessions.c.expires_at).where(revoked_sessions.c.digest == digest)
        ).scalar_one()


def test_insert_for_is_the_dialects_insert_and_its_on_conflict_clauses_work(store):
    statement = insert_for(store.engine, revoked_sessions)
    expected = postgresql.Insert if store.dialect == "postgresql" else sqlite.Insert
    assert type(statement) is expected
    with store.engine.begin() as connection:
        assert type(insert_for(connection, revoked_sessions)) is expected
        connection.execute(statement.values(digest="a", expires_at=START))
        connection.execute(
            insert_for(connection, revoked_sessions)
            .values(digest="a", expires_at=LATER)
            .on_conflict_do_nothing()
        )
    assert _expiry(store.engine, "a") == START
    upsert = insert_for(store.engine, revoked_sessions).values(digest="a", expires_at=LATER)
    upsert = upsert.on_conflict_do_update(
        index_elements=[revoked_sessions.c.digest],
        set_={"expires_at": upsert.excluded.expires_at},
    )
    with store.engine.begin() as connection:
        connection.execute(upsert)
    assert _expiry(store.engine, "a") == LATER


@pytest.fixture
def hours_of_data(store):
    records = make_records(np.random.default_rng(5), START, 2000, span=timedelta(hours=3))
    open_writer(store.engine).write_requests(records)
    return store, records


def _labels(record):
    return {n: getattr(record, n) for n in ("model", "instance", "tenant", "priority")}


@pytest.mark.parametrize(
    "selector",
    [
        Selector(),
        Selector(model="llama-8b"),
        Selector(model="llama-70b", tenant="acme"),
        Selector(instance="gpu-1", tenant="globex", priority="batch"),
        Selector(model="no-such-model"),
    ],
)
def test_selected_picks_the_rows_of_the_pinned_labels_in_raw_and_rollup_tables(
    hours_of_data, selector
):
    store, records = hours_of_data
    picked = [r for r in records if selector.matches(_labels(r))]
    assert len(selected(requests, selector)) == len(selector.items())
    day = request_rollups.c.resolution == Resolution.DAY.value
    with store.engine.connect() as connection:
        raw = connection.execute(
            select(func.count()).select_from(requests).where(*selected(requests, selector))
        ).scalar_one()
        rolled = connection.execute(
            select(func.coalesce(func.sum(request_rollups.c.requests), 0)).where(
                day, *selected(request_rollups, selector)
            )
        ).scalar_one()
    assert raw == len(picked)
    assert rolled == len(picked)


def test_raw_where_is_the_half_open_time_range_of_a_span_with_the_selector(hours_of_data):
    store, records = hours_of_data
    first, tenth = records[0].start, records[9].start
    selector = Selector(model="llama-8b")
    spans = [
        Window(first, tenth),
        Segment(first, tenth, None),
        Window(START + timedelta(minutes=7, seconds=13), START + timedelta(hours=2, seconds=1)),
    ]
    with store.engine.connect() as connection:
        for span in spans:
            expected = [r for r in records if span.start <= r.start < span.end]
            for pick in (Selector(), selector):
                got = connection.execute(
                    select(func.count()).select_from(requests).where(raw_where(span, pick))
                ).scalar_one()
                assert got == sum(1 for r in expected if pick.matches(_labels(r))), (span, pick)
    assert len(expected) > 0


def test_rollup_where_reads_the_segments_resolution_and_buckets_only(hours_of_data):
    store, records = hours_of_data
    cases = [
        Segment(START + timedelta(minutes=5), START + timedelta(minutes=50), Resolution.MINUTE),
        Segment(START, START + timedelta(hours=2), Resolution.HOUR),
        Segment(START.replace(hour=0), START.replace(hour=0) + timedelta(days=1), Resolution.DAY),
        Segment(START + timedelta(hours=1), START + timedelta(hours=2), Resolution.MINUTE),
    ]
    selector = Selector(tenant="acme")
    with store.engine.connect() as connection:
        for segment in cases:
            for pick in (Selector(), selector):
                got = connection.execute(
                    select(func.coalesce(func.sum(request_rollups.c.requests), 0)).where(
                        rollup_where(segment, pick)
                    )
                ).scalar_one()
                expected = sum(
                    1
                    for r in records
                    if segment.start <= r.start < segment.end and pick.matches(_labels(r))
                )
                assert got == expected, (segment, pick)


def test_rollup_where_refuses_a_raw_segment():
    with pytest.raises(AssertionError):
        rollup_where(Segment(START, LATER, None))


def test_sketch_column_names_each_latency_fields_sketch():
    assert {sketch_column(f).name: f for f in DURATION_FIELDS} == SKETCH_COLUMNS
    assert sketch_column("ttft_s") is request_rollups.c.ttft_sketch
    assert sketch_column("e2e_s") is request_rollups.c.e2e_sketch
    for not_a_latency in ("ttft", "input_tokens", "ttft_sketch"):
        with pytest.raises(KeyError):
            sketch_column(not_a_latency)


@pytest.mark.parametrize("field", ["ttft_s", "tpot_s", "decode_s", "queue_s"])
def test_the_sketch_column_of_a_field_holds_that_fields_values(hours_of_data, field):
    store, records = hours_of_data
    column = sketch_column(field)
    with store.engine.connect() as connection:
        blobs = connection.execute(
            select(column).where(
                request_rollups.c.resolution == Resolution.DAY.value, column.is_not(None)
            )
        ).scalars()
        count = total = 0.0
        for blob in blobs:
            n, s = header_totals(blob)
            count, total = count + n, total + s
    assert count == len(records)
    assert total == pytest.approx(sum(getattr(r, field) for r in records), rel=1e-9)


@pytest.mark.parametrize(
    ("window", "finest"),
    [
        (Window(START + timedelta(seconds=17), START + timedelta(days=2, minutes=3, seconds=5)),
         Resolution.MINUTE),
        (Window(START + timedelta(seconds=17), START + timedelta(days=2, minutes=3, seconds=5)),
         Resolution.HOUR),
        (Window(START + timedelta(seconds=3), START + timedelta(seconds=40)), Resolution.MINUTE),
        (Window(START, START + timedelta(hours=1)), Resolution.MINUTE),
    ],
)  # fmt: skip
def test_read_segments_reads_raw_edges_raw_and_the_rest_from_rollups_in_time_order(window, finest):
    read = list(
        read_segments(window, finest, lambda s: ("raw", s), lambda s: ("rollup", s)),
    )
    assert read == [("raw" if s.raw else "rollup", s) for s in split(window, finest)]
    assert read[0][1].start == window.start
    assert read[-1][1].end == window.end
    assert all(a[1].end == b[1].start for a, b in pairwise(read))
    for kind, segment in read:
        assert (kind == "raw") is (segment.resolution is None)
        if segment.resolution is not None:
            assert segment.resolution.seconds >= finest.seconds


def test_read_segments_reads_lazily_one_segment_at_a_time():
    window = Window(START + timedelta(seconds=17), START + timedelta(hours=3, seconds=5))
    calls = []
    reader = read_segments(window, Resolution.MINUTE, calls.append, calls.append)
    assert calls == []
    next(reader)
    assert len(calls) == 1
    assert len(list(reader)) == len(split(window)) - 1
