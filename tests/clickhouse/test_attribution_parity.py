"""Attribution in ClickHouse answers as the SQL store's: requests whose tenant, team, workload
or adapter their trace's gateway or client span names, the span stored before the engine's
(filled before insert), after it (moved: ``storage_clickhouse.attribution``), both in one
batch, and a replay of either — latency (exact and sketch), throughput, series, chart
sketches, SLO event counts, label sets and first-seen times grouped or pinned by tenant, team
and workload equal PostgreSQL's on the same data."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.attribution import Attribution
from infersight.core.query import Method, Selector
from infersight.core.records import RequestRecord
from infersight.core.slo import Sli, SliKind, goodput_sli
from infersight.core.window import Resolution, Window
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.conftest import Store, fresh_database
from tests.factories import gateway_span, make_records

pytestmark = pytest.mark.postgres

T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
WINDOW = Window(
    T0 + timedelta(hours=3, seconds=1403.25), T0 + timedelta(days=1, hours=13, seconds=47.5)
)
SHORT = Window(T0 + timedelta(hours=7, seconds=12.5), T0 + timedelta(hours=9, seconds=3))
METRICS = ("ttft", "tpot", "e2e", "queue")
TEAMS = ("search", "ads", "chat")
WORKLOADS = ("rag", "batch-eval")
#: How each case writes: the spans before the requests, after them, interleaved per batch,
#: and a replay of the requests and spans after the spans came last or first.
ORDERS = ("gateway-first", "engine-first", "one-batch", "replay-engine-first", "replay-gateway")

Both = tuple[HybridStore, Store]


def _data() -> tuple[list[RequestRecord], list[Attribution]]:
    rng = np.random.default_rng(3607)
    records = make_records(
        rng,
        T0,
        1600,
        span=timedelta(days=1, hours=20),
        models=("llama-8b", "qwen-7b"),
        instances=("gpu-0", "gpu-1"),
    )
    out: list[RequestRecord] = []
    spans: list[Attribution] = []
    for i, shipped in enumerate(records):
        record = shipped
        if i % 5 == 0:  # the engine named no tenant: the gateway's fills it
            record = replace(record, tenant="")
        if i % 11 == 0:  # the engine named the workload itself: its own value wins
            record = replace(record, workload="own")
        out.append(record)
        if i % 7 == 3:
            continue  # a trace without a gateway span: stays unattributed
        spans.append(
            gateway_span(
                record,
                i + 1,
                tenant="gw-tenant",
                team=TEAMS[i % 3],
                workload=WORKLOADS[i % 2] if i % 4 else "",
            )
        )
        if i % 4 == 0:  # a client span names the workload the gateway's left empty
            spans.append(
                Attribution(
                    record.trace_id,
                    f"c{i:015x}",
                    record.start - timedelta(seconds=1),
                    duration_s=5.0,
                    workload="notebook",
                    source="client",
                )
            )
    return out, spans


def _write(
    sink: object, order: str, records: list[RequestRecord], spans: list[Attribution]
) -> None:
    write_requests = sink.write_requests  # type: ignore[attr-defined]
    write_attributions = sink.write_attributions  # type: ignore[attr-defined]

    def requests() -> None:
        for i in range(0, len(records), 400):
            write_requests(records[i : i + 400])

    def attributions() -> None:
        # A trace's gateway and client spans in one write (``storage_clickhouse.attribution``
        # on a request filled in two steps: the series it passed through keeps its minimum
        # and maximum in both stores, unless that series emptied and filled again between).
        batch: list[Attribution] = []
        for span in spans:
            if len(batch) >= 500 and span.trace_id != batch[-1].trace_id:
                write_attributions(batch)
                batch = []
            batch.append(span)
        write_attributions(batch)

    if order == "gateway-first":
        attributions()
        requests()
    elif order in ("engine-first", "replay-engine-first"):
        requests()
        attributions()
    elif order == "one-batch":
        # Each batch's traces: half the spans before the requests, half after.
        by_trace: dict[str, list[Attribution]] = {}
        for span in spans:
            by_trace.setdefault(span.trace_id, []).append(span)
        for i in range(0, len(records), 400):
            batch = records[i : i + 400]
            ids = [r.trace_id for r in batch]
            first = [s for t in ids[::2] for s in by_trace.get(t, [])]
            last = [s for t in ids[1::2] for s in by_trace.get(t, [])]
            write_attributions(first)
            write_requests(batch)
            write_attributions(last)
    elif order == "replay-gateway":
        attributions()
        requests()
    if order.startswith("replay"):
        requests()
        attributions()


@pytest.fixture(scope="module", params=ORDERS)
def order(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def both(order: str, chdb: ChdbTransport) -> Iterator[Both]:
    records, spans = _data()
    layout = Layout(database=f"attr_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    with fresh_database() as url:
        engine = create_store_engine(url)
        upgrade(engine)
        pg = Store(url, engine)
        hybrid = HybridStore(pg.sql, Telemetry(chdb, layout), sql_copy=True)
        _write(hybrid.ingest.open_writer(), order, records, spans)
        yield hybrid, pg
        engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


GROUPINGS = [
    # No attributed label: answered without the moves (``reads._touches``), still equal.
    (("model", "instance"), Selector(priority="interactive")),
    ((), Selector(team="ads")),
    (("team",), Selector()),
    (("workload",), Selector(model="qwen-7b")),
    (("tenant", "team", "workload"), Selector()),
    (("team",), Selector(workload="notebook")),
    (("workload",), Selector(tenant="gw-tenant")),
    ((), Selector(team="").excluding("workload", ["rag"])),
]


def _same_groups(ours: object, theirs: object) -> None:
    a, b = ours.groups, theirs.groups  # type: ignore[attr-defined]
    assert [g.labels for g in a] == [g.labels for g in b]
    for x, y in zip(a, b, strict=True):
        assert x.count == y.count
        assert x.quantiles == pytest.approx(y.quantiles, rel=1e-12, abs=0)


@pytest.mark.parametrize(("group_by", "selector"), GROUPINGS)
def test_latency_and_throughput_by_attributed_labels_equal_the_sql_store_s(
    both: Both, group_by: Sequence[str], selector: Selector
) -> None:
    hybrid, pg = both
    for method in (Method.EXACT, Method.SKETCH):
        for metric in METRICS:
            ours = hybrid.requests.latency(metric, WINDOW, selector, group_by, method=method)
            theirs = pg.sql.requests.latency(metric, WINDOW, selector, group_by, method=method)
            assert ours.groups, (metric, method)
            _same_groups(ours, theirs)
    many = hybrid.requests.latencies(METRICS, WINDOW, selector, group_by)
    for metric, result in many.items():
        _same_groups(result, pg.sql.requests.latencies(METRICS, WINDOW, selector, group_by)[metric])
    ours_t = hybrid.requests.throughput(WINDOW, selector, group_by)
    assert ours_t
    assert ours_t == pg.sql.requests.throughput(WINDOW, selector, group_by)


def test_the_attributed_labels_are_there(both: Both) -> None:
    """Not vacuous: the answers split by the gateway's teams and workloads."""
    hybrid, _ = both
    teams = {t.labels["team"] for t in hybrid.requests.throughput(WINDOW, Selector(), ("team",))}
    assert teams == {"", *TEAMS}
    workloads = {
        t.labels["workload"] for t in hybrid.requests.throughput(WINDOW, Selector(), ("workload",))
    }
    assert workloads == {"", "own", "notebook", *WORKLOADS}


@pytest.mark.parametrize(
    ("window", "step", "coarsest", "bucket_s"),
    [
        (SHORT, Resolution.MINUTE, None, 600),
        (WINDOW, Resolution.HOUR, Resolution.DAY, None),
        (WINDOW, Resolution.MINUTE, Resolution.DAY, 6 * 3600),
    ],
)
@pytest.mark.parametrize(
    ("group_by", "selector"),
    [(("team",), Selector()), (("workload", "tenant"), Selector(team="chat"))],
)
def test_series_and_chart_sketches_equal_the_sql_store_s(
    both: Both,
    order: str,
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
    bounded: list[object] = []
    for metric in METRICS:
        assert mine[metric].keys() == sql[metric].keys()
        for labels, buckets in mine[metric].items():
            assert buckets.keys() == sql[metric][labels].keys()
            for at, sketch in buckets.items():
                other = sql[metric][labels][at]
                assert (sketch.count, sketch.zero_count) == (other.count, other.zero_count)
                # The same buckets: each value's rank answers alike (the minimum and maximum
                # may differ where a request moved out of a series the SQL store's row then
                # emptied and refilled: ``storage_clickhouse.attribution``).
                for at_most in (0.01, 0.05, 0.2, 1.0, 5.0):
                    assert sketch.count_at_most(at_most) == other.count_at_most(at_most)
                if (sketch.min, sketch.max) == (other.min, other.max):
                    assert sketch.quantiles((0.5, 0.99)) == other.quantiles((0.5, 0.99))
                else:
                    bounded.append((metric, labels, at))
    if order in ("gateway-first", "engine-first"):
        assert not bounded  # no series emptied and refilled: bounds equal too


@pytest.mark.parametrize(
    "selector",
    [Selector(team="search"), Selector(workload="rag", tenant="gw-tenant"), Selector(team="")],
)
def test_slo_events_pinned_by_attributed_labels_equal_the_sql_store_s(
    both: Both, selector: Selector
) -> None:
    hybrid, pg = both
    slis = [
        Sli(SliKind.AVAILABILITY),
        Sli(SliKind.LATENCY, metric="ttft", threshold_s=0.1),
        Sli(SliKind.LATENCY, metric="e2e", threshold_s=4.0),
        goodput_sli(ttft_s=0.1, tpot_s=0.015),
    ]
    for sli in slis:
        for window in (WINDOW, SHORT):
            ours = hybrid.events.count(sli, window, selector)
            assert ours.total, sli
            assert ours == pg.sql.events.count(sli, window, selector), sli
        assert hybrid.events.count(sli, WINDOW, selector, exact=True) == pg.sql.events.count(
            sli, WINDOW, selector, exact=True
        )
    goodput = goodput_sli(ttft_s=0.1, tpot_s=0.015)
    assert hybrid.events.goodput_misses(goodput, WINDOW, selector) == (
        pg.sql.events.goodput_misses(goodput, WINDOW, selector)
    )


@pytest.mark.parametrize("step", [Resolution.HOUR, Resolution.DAY])
def test_label_sets_equal_the_sql_store_s(both: Both, step: Resolution) -> None:
    hybrid, pg = both
    ours = hybrid.requests.label_sets(WINDOW, step)
    theirs = pg.sql.requests.label_sets(WINDOW, step)
    assert {labels[5] for labels in ours} >= set(TEAMS)
    assert sorted(ours) == sorted(theirs)


def test_first_seen_equals_the_sql_store_s(both: Both) -> None:
    hybrid, pg = both
    now = T0 + timedelta(days=1, hours=2)
    for since in (T0, T0 + timedelta(hours=20, minutes=17)):
        ours = hybrid.requests.first_seen(since, now)
        assert ours
        assert ours == pg.sql.requests.first_seen(since, now)
