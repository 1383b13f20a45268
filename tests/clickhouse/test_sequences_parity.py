"""Late sequences folded in ClickHouse answer as the SQL store's: requests with parallel
sampling (``n`` > 1) some of whose sequences came after the request was stored, folded into it
(``storage_clickhouse.sequences``) — one sequence, two at once, two folds in turn, a record
whose request is not stored, the folds replayed, a record partly folded before — with the
requests' gateway spans stored first, after the folds (the folded request moved) or before them
(the moved request folded). Every row's values, exact and sketch latency, throughput and
tokens, series, chart sketches, the stage breakdown, SLO event counts and goodput's misses
equal PostgreSQL's on the same data."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from infersight.core.attribution import Attribution
from infersight.core.query import Method, Selector
from infersight.core.records import DURATION_FIELDS, RequestRecord
from infersight.core.sequences import LateSequence, merge_sequences
from infersight.core.sketch import DEFAULT_RELATIVE_ACCURACY
from infersight.core.slo import Sli, SliKind, goodput_sli
from infersight.core.window import Resolution, Window
from infersight.core.write import WriteResult
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage.tables import requests
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.sequences import SequenceWriter
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.conftest import Store, fresh_database
from tests.factories import gateway_span, make_records

pytestmark = pytest.mark.postgres

T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
WINDOW = Window(
    T0 + timedelta(hours=2, seconds=1403.25), T0 + timedelta(days=1, hours=13, seconds=47.5)
)
SHORT = Window(T0 + timedelta(hours=7, seconds=12.5), T0 + timedelta(hours=9, seconds=3))
METRICS = ("ttft", "tpot", "e2e", "queue")
TEAMS = ("search", "ads", "chat")
#: How each case writes: the gateway spans before everything (requests filled at insert,
#: then folded), after the requests and before the folds (a moved request folded), after the
#: folds (a folded request moved).
ORDERS = ("spans-first", "moved-then-folded", "folded-then-moved")

Both = tuple[HybridStore, Store]


def _sibling(rng: np.random.Generator, stored: RequestRecord, n: int) -> RequestRecord:
    """Another sequence of ``stored``'s request: the same prompt, its own first token (earlier
    or later), decode and output."""
    ttft = float(stored.ttft_s or 0.05) * float(rng.uniform(0.6, 1.6))
    tpot = float(rng.lognormal(np.log(0.012), 0.3))
    outputs = int(rng.integers(1, 600))
    decode = tpot * max(outputs - 1, 0)
    failed = rng.random() < 0.04
    return dataclasses.replace(
        stored,
        span_id=f"{int(stored.span_id, 16) ^ (n << 40):016x}",
        start=stored.start + timedelta(microseconds=int(rng.integers(0, 300_000))),
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=ttft + decode,
        queue_s=float(stored.queue_s or 0.0) + float(rng.uniform(0, 0.01)),
        prefill_s=ttft * 0.5,
        decode_s=decode,
        output_tokens=outputs,
        status="error" if failed else "ok",
        error_type="timeout" if failed else "",
        finish_reason="" if failed else "length",
    )


def _late(
    rng: np.random.Generator, stored: RequestRecord, siblings: Sequence[RequestRecord]
) -> LateSequence:
    record = siblings[0] if len(siblings) == 1 else merge_sequences(siblings)
    assert record is not None
    return LateSequence(
        (stored.start, stored.trace_id, stored.span_id),
        record,
        tuple(s.span_id for s in siblings),
    )


def _data() -> tuple[list[RequestRecord], list[Attribution], list[list[LateSequence]]]:
    """The requests, their gateway spans, and the late sequences in the batches they come in:
    each request with ``i % 4 == 1`` gets one late sequence (two at once where ``i % 8 == 5``),
    those with ``i % 12 == 1`` a second one in a later batch; a few records whose request is
    not stored."""
    rng = np.random.default_rng(3611)
    records = make_records(
        rng,
        T0,
        1000,
        span=timedelta(days=1, hours=16),
        models=("llama-8b", "qwen-7b"),
        instances=("gpu-0", "gpu-1"),
    )
    out: list[RequestRecord] = []
    spans: list[Attribution] = []
    first: list[LateSequence] = []
    second: list[LateSequence] = []
    for i, shipped in enumerate(records):
        record = dataclasses.replace(shipped, tenant="") if i % 5 == 0 else shipped
        out.append(record)
        if i % 3 != 2:
            spans.append(
                gateway_span(
                    record,
                    i + 1,
                    tenant="gw-tenant",
                    team=TEAMS[i % 3],
                    workload="rag" if i % 2 else "",
                )
            )
        if i % 4 != 1:
            continue
        count = 2 if i % 8 == 5 else 1
        first.append(_late(rng, record, [_sibling(rng, record, n + 1) for n in range(count)]))
        if i % 12 == 1:
            second.append(_late(rng, record, [_sibling(rng, record, 7)]))
    for k in range(6):  # the request was never stored: each stored as a request of its own
        ghost = dataclasses.replace(
            records[100 * k + 3], trace_id=f"{k + 1:032x}", span_id=f"{k + 1:016x}"
        )
        sibling = _sibling(rng, ghost, 1)
        first.append(_late(rng, ghost, [sibling]))
    batches = [first[i : i + 90] for i in range(0, len(first), 90)]
    return out, spans, [*batches, second]


def _partial(batches: list[list[LateSequence]]) -> list[LateSequence]:
    """Records some of whose sequences were folded before: one folded member and a new one (a
    duplicate: not added again, its new member claimed), then that new member alone (folded
    before, as claimed)."""
    out = []
    for fold in batches[0][:5]:
        new = dataclasses.replace(fold.record, span_id=f"{int(fold.members[0], 16) ^ 1:016x}")
        out.append(LateSequence(fold.request, fold.record, (fold.members[0], new.span_id)))
    return out


def _write(sink: Any, order: str) -> list[WriteResult]:
    records, spans, batches = _data()

    def attribute() -> None:
        for i in range(0, len(spans), 400):
            sink.write_attributions(spans[i : i + 400])

    def fold() -> list[WriteResult]:
        return [sink.fold_sequences(batch) for batch in batches]

    if order == "spans-first":
        attribute()
    for i in range(0, len(records), 250):
        sink.write_requests(records[i : i + 250])
    if order == "moved-then-folded":
        attribute()
    results = fold()
    if order == "folded-then-moved":
        attribute()
    replayed = fold()  # a replay folds nothing
    assert all(r.inserted == 0 for r in replayed), replayed
    partial = _partial(batches)
    assert sink.fold_sequences(partial).duplicates == len(partial)
    alone = [
        LateSequence(f.request, f.record, (f"{int(f.members[0], 16) ^ 1:016x}",)) for f in partial
    ]
    assert sink.fold_sequences(alone).duplicates == len(alone)
    return results


@pytest.fixture(scope="module", params=ORDERS)
def order(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def both(order: str, chdb: ChdbTransport) -> Iterator[Both]:
    layout = Layout(database=f"seq_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    with fresh_database() as url:
        engine = create_store_engine(url)
        upgrade(engine)
        pg = Store(url, engine)
        hybrid = HybridStore(pg.sql, Telemetry(chdb, layout), sql_copy=True)
        results = _write(hybrid.ingest.open_writer(), order)
        # Not vacuous: most records folded, the ones without a stored request stored alone.
        assert sum(r.inserted for r in results) > 250
        yield hybrid, pg
        engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


#: The values a fold changes, and the labels attribution fills.
_COMPARED = (*DURATION_FIELDS, "output_tokens", "status", "error_type", "finish_reason")
_LABELS = ("tenant", "team", "workload")


def test_the_folded_sequences_are_the_sql_store_s(both: Both) -> None:
    """What a sidecar that restarted asks before shipping spooled records: which sequences
    were folded (or claimed) already."""
    hybrid, pg = both
    _, _, batches = _data()
    keys = [(f.record.trace_id, m) for b in batches for f in b for m in f.members]
    keys += [(f.record.trace_id, f"{int(m, 16) ^ 1:016x}") for f in batches[0] for m in f.members]
    keys.append(("f" * 32, "e" * 16))
    ours = SequenceWriter(hybrid.telemetry.transport, hybrid.telemetry.layout).folded(keys)
    theirs = pg.sql.ingest.open_writer().folded(keys)  # type: ignore[attr-defined]
    assert len(theirs) > 250
    assert ours == theirs
    assert hybrid.ingest.open_writer().folded(keys) == theirs  # type: ignore[attr-defined]


def test_every_row_holds_the_sql_store_s_values(both: Both) -> None:
    hybrid, pg = both
    telemetry = hybrid.telemetry
    low, high = "2000-01-01 00:00:00", "2100-01-01 00:00:00"
    columns = ", ".join(("trace_id", "span_id", *_COMPARED, *_LABELS))
    ours = {
        (r[0], r[1]): tuple(r[2:])
        for r in telemetry.transport.rows(
            f"SELECT {columns} FROM {telemetry.layout.table('requests_current')}"
            f"(low = '{low}', high = '{high}')"
        )
    }
    c = requests.c
    with pg.engine.connect() as connection:
        rows = connection.execute(
            select(*(c[n] for n in ("trace_id", "span_id", *_COMPARED, *_LABELS)))
        )
        theirs = {(r[0], r[1]): tuple(getattr(v, "value", v) for v in r[2:]) for r in rows}
    assert len(ours) == len(theirs) > 1000
    assert ours == theirs


GROUPINGS = [
    # No attributed label: the folds in the series as stored, without the moves.
    (("model", "instance"), Selector(priority="interactive")),
    ((), Selector()),
    (("team",), Selector()),
    (("tenant", "workload"), Selector(model="qwen-7b")),
]


#: How far a sketch quantile may be from the SQL store's (each is within the sketch's relative
#: accuracy of the values it answers for: ``storage_clickhouse.sequences``, "Bounds").
_SKETCH_REL = 2 * DEFAULT_RELATIVE_ACCURACY


def _same_groups(ours: Any, theirs: Any, exact: bool) -> None:
    a, b = ours.groups, theirs.groups
    assert [g.labels for g in a] == [g.labels for g in b]
    for x, y in zip(a, b, strict=True):
        assert x.count == y.count
        if exact:
            assert x.quantiles == pytest.approx(y.quantiles, rel=1e-12, abs=0)
        else:
            assert x.quantiles == pytest.approx(y.quantiles, rel=_SKETCH_REL, abs=0)


@pytest.mark.parametrize(("group_by", "selector"), GROUPINGS)
def test_latency_and_throughput_equal_the_sql_store_s(
    both: Both, group_by: Sequence[str], selector: Selector
) -> None:
    hybrid, pg = both
    for metric in METRICS[:3]:
        ours = hybrid.requests.latency(metric, WINDOW, selector, group_by, method=Method.EXACT)
        theirs = pg.sql.requests.latency(metric, WINDOW, selector, group_by, method=Method.EXACT)
        assert ours.groups, metric
        _same_groups(ours, theirs, exact=True)
    many = hybrid.requests.latencies(METRICS, WINDOW, selector, group_by)
    sql = pg.sql.requests.latencies(METRICS, WINDOW, selector, group_by)
    for metric, result in many.items():
        _same_groups(result, sql[metric], exact=False)
    ours_t = hybrid.requests.throughput(WINDOW, selector, group_by)
    assert ours_t
    assert ours_t == pg.sql.requests.throughput(WINDOW, selector, group_by)
    mine = hybrid.requests.breakdown(WINDOW, selector, group_by)
    other = pg.sql.requests.breakdown(WINDOW, selector, group_by)
    assert [(b.labels, b.requests) for b in mine] == [(b.labels, b.requests) for b in other]
    for x, y in zip(mine, other, strict=True):
        assert x.e2e_seconds_total == pytest.approx(y.e2e_seconds_total, rel=1e-9)
        assert x.scaled_by == pytest.approx(y.scaled_by, rel=1e-9)
        for p, q in zip(x.stages, y.stages, strict=True):
            assert (p.stage, p.coverage) == (q.stage, q.coverage)
            assert p.seconds_total == pytest.approx(q.seconds_total, rel=1e-9)


@pytest.mark.parametrize(
    ("window", "step", "coarsest", "bucket_s"),
    [
        (SHORT, Resolution.MINUTE, None, 600),
        (WINDOW, Resolution.HOUR, Resolution.DAY, None),
    ],
)
@pytest.mark.parametrize(("group_by", "selector"), [((), Selector()), (("team",), Selector())])
def test_series_and_chart_sketches_equal_the_sql_store_s(
    both: Both,
    window: Window,
    step: Resolution,
    coarsest: Resolution | None,
    bucket_s: int | None,
    group_by: Sequence[str],
    selector: Selector,
) -> None:
    hybrid, pg = both
    ours = hybrid.requests.series(window, step, selector, group_by, coarsest, bucket_s)
    assert ours
    assert ours == pg.sql.requests.series(window, step, selector, group_by, coarsest, bucket_s)
    chart = bucket_s or step.seconds
    mine = hybrid.requests.bucket_sketches(METRICS, window, step, chart, selector, group_by)
    sql = pg.sql.requests.bucket_sketches(METRICS, window, step, chart, selector, group_by)
    assert mine["ttft"]
    bounded = 0
    for metric in METRICS:
        assert mine[metric].keys() == sql[metric].keys()
        for labels, buckets in mine[metric].items():
            assert buckets.keys() == sql[metric][labels].keys()
            for at, sketch in buckets.items():
                other = sql[metric][labels][at]
                assert (sketch.count, sketch.zero_count) == (other.count, other.zero_count)
                for at_most in (0.01, 0.05, 0.2, 1.0, 5.0):
                    assert sketch.count_at_most(at_most) == other.count_at_most(at_most)
                # The same buckets; the bounds hold the SQL store's (and, where a fold batch
                # emptied and refilled the SQL store's row, the values it forgot).
                assert sketch.min <= other.min
                assert sketch.max >= other.max
                mine_q, sql_q = sketch.quantiles((0.5, 0.99)), other.quantiles((0.5, 0.99))
                if (sketch.min, sketch.max) == (other.min, other.max):
                    assert mine_q == sql_q
                else:
                    bounded += 1
                    assert mine_q == pytest.approx(sql_q, rel=_SKETCH_REL, abs=0)
    assert bounded < sum(len(b) for m in METRICS for b in mine[m].values())


@pytest.mark.parametrize("selector", [Selector(), Selector(team="search")])
def test_slo_events_and_goodput_misses_equal_the_sql_store_s(
    both: Both, selector: Selector
) -> None:
    hybrid, pg = both
    goodput = goodput_sli(ttft_s=0.1, tpot_s=0.015)
    slis = [
        Sli(SliKind.AVAILABILITY),
        Sli(SliKind.LATENCY, metric="ttft", threshold_s=0.1),
        goodput,
        goodput_sli(ttft_s=0.1, tpot_s=0.015, per="token"),
    ]
    for sli in slis:
        for window in (WINDOW, SHORT):
            ours = hybrid.events.count(sli, window, selector)
            assert ours.total, sli
            assert ours == pg.sql.events.count(sli, window, selector), sli
        assert hybrid.events.count(sli, WINDOW, selector, exact=True) == pg.sql.events.count(
            sli, WINDOW, selector, exact=True
        )
    assert hybrid.events.goodput_misses(goodput, WINDOW, selector) == (
        pg.sql.events.goodput_misses(goodput, WINDOW, selector)
    )


def test_label_sets_and_first_seen_equal_the_sql_store_s(both: Both) -> None:
    hybrid, pg = both
    assert sorted(hybrid.requests.label_sets(WINDOW, Resolution.HOUR)) == sorted(
        pg.sql.requests.label_sets(WINDOW, Resolution.HOUR)
    )
    now = T0 + timedelta(days=1, hours=2)
    assert hybrid.requests.first_seen(T0, now) == pg.sql.requests.first_seen(T0, now)


@pytest.mark.parametrize("finest", [Resolution.MINUTE, Resolution.HOUR])
def test_the_pool_table_counts_folded_requests_as_the_sql_store(
    both: Both, finest: Resolution
) -> None:
    """The pool table's raw edges read rows with their late sequences folded (its rollups
    already did): tokens and means equal the SQL store's, whose rows were rewritten. From
    hours, the window's raw edges are nearly an hour each, with folded requests in them."""
    hybrid, pg = both
    ours = sorted(hybrid.requests.pool_summaries(SHORT, finest), key=lambda p: p.instance)
    theirs = sorted(pg.sql.requests.pool_summaries(SHORT, finest), key=lambda p: p.instance)
    assert ours
    assert [(p.instance, p.role, p.requests, p.input_tokens, p.output_tokens) for p in ours] == [
        (p.instance, p.role, p.requests, p.input_tokens, p.output_tokens) for p in theirs
    ]
    for a, b in zip(ours, theirs, strict=True):
        assert a.means.keys() == b.means.keys()
        for name, value in a.means.items():
            expected = b.means[name]
            assert (value is None) == (expected is None), (a.instance, name)
            if expected is not None:
                assert value == pytest.approx(expected, rel=1e-9), (a.instance, name)
