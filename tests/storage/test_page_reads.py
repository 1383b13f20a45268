"""The dashboard's faster read paths answer exactly what the slower ones did (issue 35, item 4).

Each test reads a seeded store (three days of requests over two models and two instances, on
SQLite and PostgreSQL) through a read that the database now adds up, and through what the page
computed before from finer rows (kept here as the reference), and asks for the same answer.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from sqlalchemy import and_, case, func, select

from infersight.core.goodput import GoodLimits
from infersight.core.query import STAGES, Selector, breakdown_of
from infersight.core.records import GROUP_LABELS
from infersight.core.samples import GpuSample
from infersight.core.sketch import header_totals
from infersight.core.window import Resolution, Window, split
from infersight.storage import good_tokens, gpu_reads, queries, timeseries
from infersight.storage.sql import raw_where, rollup_where, sketch_column
from infersight.storage.tables import gpu_samples, request_rollups, requests
from infersight.storage.writer import open_writer
from tests.conftest import BOTH_STORES, empty_store
from tests.factories import make_records

START = datetime(2026, 11, 24, tzinfo=UTC)
END = START + timedelta(days=3)
#: Windows with ragged ends, a whole day, and one running past the data.
WINDOWS = (
    Window(START + timedelta(hours=5, minutes=17, seconds=9), START + timedelta(hours=29)),
    Window(START + timedelta(days=1), START + timedelta(days=2)),
    Window(START - timedelta(hours=7), END + timedelta(hours=3)),
)
#: Two selectors of one shape (``instance`` pinned) with different values: a value that stuck
#: to a statement built once per shape (``storage.sql``) would answer the second with the first.
SELECTORS = (
    Selector(),
    Selector(instance="gpu-1"),
    Selector(instance="gpu-0"),
    Selector(tenant="acme", priority="batch"),
)


@pytest.fixture(scope="module", params=BOTH_STORES)
def seeded(request):
    """Three days of traffic, loaded once per database; the tests only read it."""
    store = empty_store(request)
    rng = np.random.default_rng(35)
    records = make_records(rng, START, 9_000, span=END - START)
    # A third model on one instance, and a quiet night: peaks and gaps differ per model.
    records += make_records(
        rng,
        START + timedelta(hours=30),
        700,
        span=timedelta(hours=9),
        models=("mistral-7b",),
        instances=("gpu-0",),
    )
    writer = open_writer(store.engine)
    for i in range(0, len(records), 3000):
        writer.write_requests(records[i : i + 3000])
    writer.write_gpu_samples(_gpu_samples(rng))
    return store, records


def _gpu_samples(rng: np.random.Generator) -> list[GpuSample]:
    """Two GPUs of gpu-0 and one of gpu-1 every 30 s (with a silence and an energy counter
    reset) over the day from the 30th hour: the interval rule's edges have something to cut."""
    out = []
    first = START + timedelta(hours=30)
    for k in range(2880):
        at = first + timedelta(seconds=30 * k)
        if 1000 <= k < 1040:  # a 20-minute silence: intervals stop at the gap
            continue
        for instance, index in (("gpu-0", 0), ("gpu-0", 1), ("gpu-1", 0)):
            busy = float(rng.uniform(0.0, 1.0))
            out.append(
                GpuSample(
                    at,
                    instance,
                    index,
                    name="NVIDIA H100 80GB HBM3",
                    util_gpu=busy if k % 7 else None,
                    power_w=200.0 + 400.0 * busy,
                    energy_j=float((k % 2000) * 9000 + index),
                )
            )
    return out


def _peaks_from_series(engine, window, step, selector):
    """What the Capacity page added up from ``request_series`` per model before (the
    reference): per bucket over instances, the busiest bucket, the total, the first and last
    bucket and the instances."""
    series = timeseries.request_series(engine, window, step, selector, ("model", "instance"))
    buckets: dict[str, dict[datetime, int]] = defaultdict(dict)
    instances: dict[str, set[str]] = defaultdict(set)
    for (model, instance), per_bucket in series.items():
        instances[model].add(instance)
        for at, counts in per_bucket.items():
            buckets[model][at] = buckets[model].get(at, 0) + counts.requests
    return {
        model: (max(b.values()), sum(b.values()), min(b), max(b), tuple(sorted(instances[model])))
        for model, b in buckets.items()
    }


@pytest.mark.parametrize("step", list(Resolution))
def test_request_peaks_equal_the_series_added_up(seeded, step):
    store, _records = seeded
    for window in WINDOWS:
        for selector in SELECTORS:
            expected = _peaks_from_series(store.engine, window, step, selector)
            found = timeseries.request_peaks(store.engine, window, step, selector)
            assert expected, (window, selector)
            assert {
                model: (p.peak, p.requests, p.first, p.last, p.instances)
                for model, p in found.items()
            } == expected, (window, step, selector)
            for p in found.values():
                assert p.first.utcoffset() == timedelta(0)
                assert p.last.utcoffset() == timedelta(0)


def _records_by_bucket(records, window, step, bucket_s, selector, groups):
    """Each group's requests, errors and tokens per ``bucket_s`` bucket (epoch-aligned) of the
    records in the ``step`` buckets that overlap ``window``: what the rollups hold."""
    first, end = step.floor(window.start), step.ceil(window.end)
    out: dict[tuple[str, ...], dict[datetime, list[int]]] = defaultdict(dict)
    for r in records:
        labels = {name: getattr(r, name, "") for name in GROUP_LABELS}
        if not first <= r.start < end or not selector.matches(labels):
            continue
        at = datetime.fromtimestamp(r.start.timestamp() // bucket_s * bucket_s, UTC)
        sums = out[tuple(labels[g] for g in groups)].setdefault(at, [0, 0, 0, 0])
        for i, v in enumerate((1, r.status != "ok", r.input_tokens, r.output_tokens)):
            sums[i] += int(v)
    return {key: {at: tuple(v) for at, v in b.items()} for key, b in out.items()}


@pytest.mark.parametrize("groups", [(), ("model",), ("model", "instance")])
def test_request_series_equal_the_records_added_up(seeded, groups):
    """The statement built once per shape answers every shape of read: resolutions (with
    coarser rollups in between), selectors (a tenant set too) and chart buckets."""
    store, records = seeded
    for window in WINDOWS:
        for selector in (*SELECTORS, Selector().within(["acme"])):
            # A chart bucket is a whole number of the coarsest rollups read (shared.ChartStep).
            for step, coarsest, bucket_s in (
                (Resolution.MINUTE, None, None),
                (Resolution.MINUTE, None, 600),
                (Resolution.MINUTE, Resolution.HOUR, 6 * 3600),
                (Resolution.MINUTE, Resolution.DAY, 86400),
                (Resolution.HOUR, None, 6 * 3600),
                (Resolution.HOUR, Resolution.DAY, 2 * 86400),
            ):
                found = timeseries.request_series(
                    store.engine, window, step, selector, groups, coarsest, bucket_s
                )
                got = {
                    key: {
                        step.floor(at) if bucket_s is None else at: (
                            c.requests,
                            c.errors,
                            c.input_tokens,
                            c.output_tokens,
                        )
                        for at, c in b.items()
                    }
                    for key, b in found.items()
                }
                expected = _records_by_bucket(
                    records, window, step, bucket_s or step.seconds, selector, groups
                )
                assert got == expected, (window, selector, step, coarsest, bucket_s)


def test_label_sets_are_the_series_with_requests(seeded):
    store, records = seeded
    for window in WINDOWS:
        first, end = Resolution.HOUR.floor(window.start), window.end
        expected = sorted(
            {
                tuple(getattr(r, name, "") for name in GROUP_LABELS)
                for r in records
                if first <= Resolution.HOUR.floor(r.start) < end
            }
        )
        assert timeseries.label_sets(store.engine, window) == expected


def _breakdowns_from_whole_sketches(engine, window, selector, groups):
    """The breakdown as it was read before: every sketch column whole (its header parsed in
    Python), raw rows at the edges, literal-built statements (the reference)."""
    fields = ("e2e_s", *(f"{stage}_s" for stage in STAGES))
    acc: dict[tuple[str, ...], dict[str, list[float]]] = defaultdict(
        lambda: {name: [0, 0.0] for name in fields}
    )
    with engine.connect() as connection:
        for segment in split(window, Resolution.MINUTE):
            if segment.raw:
                keys = [requests.c[n] for n in groups]
                columns = []
                for name in fields:
                    columns += [func.count(requests.c[name]), func.sum(requests.c[name])]
                query = select(*keys, *columns).where(raw_where(segment, selector))
                rows = [
                    (
                        tuple(row[: len(groups)]),
                        list(zip(row[len(groups) :: 2], row[len(groups) + 1 :: 2], strict=True)),
                    )
                    for row in connection.execute(query.group_by(*keys))
                ]
            else:
                query = select(
                    *(request_rollups.c[n] for n in groups), *(sketch_column(n) for n in fields)
                ).where(rollup_where(segment, selector))
                rows = [
                    (
                        tuple(row[: len(groups)]),
                        [(0, 0.0) if b is None else header_totals(b) for b in row[len(groups) :]],
                    )
                    for row in connection.execute(query)
                ]
            for key, totals in rows:
                for name, (count, total) in zip(fields, totals, strict=True):
                    acc[key][name][0] += int(count or 0)
                    acc[key][name][1] += float(total or 0.0)
    out = []
    for key, per in sorted(acc.items()):
        stages = {stage: (int(per[f"{stage}_s"][0]), per[f"{stage}_s"][1]) for stage in STAGES}
        labels = dict(zip(groups, key, strict=True))
        out.append(breakdown_of(labels, (int(per["e2e_s"][0]), per["e2e_s"][1]), stages))
    return out


@pytest.mark.parametrize("groups", [(), ("model", "instance")])
def test_breakdown_from_sketch_headers_equals_whole_sketches(seeded, groups):
    """The rollups' stage totals are read as each sketch's header only (its count and sum),
    not the whole sketch: the same breakdown, to the last bit."""
    store, _records = seeded
    for window in WINDOWS:
        for selector in (
            Selector(),
            Selector(model="llama-70b"),
            Selector(model="llama-8b"),  # the same shape, another value
            Selector().within(["acme"]),
            Selector().within(["globex"]),
        ):
            expected = _breakdowns_from_whole_sketches(store.engine, window, selector, groups)
            assert expected
            assert queries.breakdown(store.engine, window, selector, groups) == expected


def _old_raw_intervals(connection, lo, hi, horizon, gap, floor, instance=None):
    """The interval rule as one statement per span, its values literal (the reference)."""
    g = gpu_samples.c
    t = gpu_reads.epoch(connection.dialect.name, g.ts)
    where = [g.ts >= lo, g.ts < horizon]
    if instance is not None:
        where.append(g.instance == instance)
    per_gpu = (g.instance, g.gpu_index)
    samples = (
        select(
            g.instance, g.gpu_index, g.name, g.gpu_slice, g.ts, g.util_gpu.label("util"),
            g.energy_j.label("energy"), g.power_w.label("power"), t.label("t"),
            func.lead(t).over(partition_by=per_gpu, order_by=g.ts).label("t_next"),
            func.lead(g.energy_j).over(partition_by=per_gpu, order_by=g.ts).label("energy_next"),
        )
        .where(*where)
        .subquery()
    )  # fmt: skip
    s = samples.c
    span = func.coalesce(s.t_next, horizon.timestamp()) - s.t
    dt = case((span > gap, gap), else_=span)
    energy = case(
        (
            and_(s.energy.is_not(None), s.energy_next.is_not(None), s.t_next - s.t <= gap),
            case((s.energy_next >= s.energy, s.energy_next - s.energy), else_=s.energy_next),
        ),
        (s.power.is_not(None), s.power * dt),
        else_=0.0,
    )
    intervals = (
        select(s.instance, s.gpu_index, s.name, s.gpu_slice, s.util, dt.label("dt"),
               energy.label("energy"))
        .where(s.ts < hi)
        .subquery()
    )  # fmt: skip
    i = intervals.c
    query = select(
        i.instance, i.gpu_index, func.max(i.name), func.max(i.gpu_slice), func.sum(i.dt),
        func.sum(case((i.util < floor, i.dt), else_=0.0)), func.sum(i.energy),
        func.sum(case((i.util.is_not(None), i.dt), else_=0.0)),
        func.sum(func.coalesce(i.util, 0.0) * i.dt),
    ).group_by(i.instance, i.gpu_index)  # fmt: skip
    return {
        (row[0], int(row[1])): (row[2], row[3], *(float(v or 0.0) for v in row[4:]))
        for row in connection.execute(query)
    }


def _covered_tuple(part):
    return (part.name, part.gpu_slice, part.covered_s, part.idle_s, part.energy_j, part.util_s,
            part.util_weighted_s)  # fmt: skip


def test_gpu_intervals_of_many_spans_in_one_statement_equal_one_statement_each(seeded):
    """``raw_intervals_many`` (the window's raw edges and last gap in one ``UNION ALL``) gives
    each span what its own statement gave, to the last bit."""
    store, _records = seeded
    day = START + timedelta(hours=30)
    spans = [
        (day - timedelta(minutes=3), day + timedelta(minutes=1, seconds=13),
         day + timedelta(minutes=6, seconds=13)),
        (day + timedelta(hours=8, seconds=41), day + timedelta(hours=8, minutes=9),
         day + timedelta(hours=8, minutes=9)),
        (day + timedelta(hours=23, minutes=55), day + timedelta(hours=24, minutes=5),
         day + timedelta(hours=24, minutes=10)),
    ]  # fmt: skip
    with store.engine.connect() as connection:
        for instance in (None, "gpu-0"):
            for floor in (0.05, 0.3):
                found = gpu_reads.raw_intervals_many(connection, spans, 300.0, floor, instance)
                expected = [
                    _old_raw_intervals(connection, *span, 300.0, floor, instance) for span in spans
                ]
                assert any(expected)
                assert [
                    {key: _covered_tuple(part) for key, part in one.items()} for one in found
                ] == expected


def test_raw_good_tokens_of_many_spans_in_one_statement_equal_one_statement_each(seeded):
    store, records = seeded
    limits = GoodLimits(ttft_s=0.1, tpot_s=0.015)
    spans = [
        (START + timedelta(hours=h, minutes=7 * h), START + timedelta(hours=h + 1, seconds=h))
        for h in range(0, 70, 2)  # more spans than one statement reads (SPANS_PER_READ)
    ]
    assert len(spans) > good_tokens.SPANS_PER_READ
    with store.engine.connect() as connection:
        for instance in (None, "gpu-1"):
            found = good_tokens.from_raw_spans(connection, spans, limits, instance)
            for (start, end), counted in zip(spans, found, strict=True):
                expected: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0])
                for r in records:
                    if start <= r.start < end and instance in (None, r.instance):
                        key = tuple(getattr(r, name, "") for name in GROUP_LABELS)
                        good = r.status == "ok" and r.ttft_s <= 0.1 and r.tpot_s <= 0.015
                        expected[key][0] += 1
                        expected[key][1] += r.input_tokens + r.output_tokens if good else 0
                assert counted == {k: tuple(v) for k, v in expected.items()}
