"""The dashboard's request reads from ClickHouse answer as the SQL store's on the same data:
request series per bucket (each resolution, read up to a coarser one, binned per chart bucket),
the charts' merged sketches per bucket (the same sketch: the same buckets and counts, minimum
and maximum to the bit), the per-model peaks, and the SLO events (availability, latency and
goodput counts, one at a time and through an evaluation cycle, and goodput's misses), and
the demand reads (a model's minutes, peak rate, recorded days and the busiest models)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from infersight.core.errors import NotFound
from infersight.core.query import Selector
from infersight.core.records import RequestRecord
from infersight.core.slo import GoodputUnit, Sli, SliKind, SloSpec, goodput_sli
from infersight.core.window import Resolution, Window
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.conftest import Store, fresh_database
from tests.factories import make_records

pytestmark = pytest.mark.postgres

#: Recent days: ClickHouse drops rows past their TTL (the raw retention) as it writes them.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
WINDOW = Window(
    T0 + timedelta(hours=5, seconds=1403.25), T0 + timedelta(days=2, hours=13, seconds=47.5)
)
SHORT = Window(T0 + timedelta(hours=7, seconds=12.5), T0 + timedelta(hours=9, seconds=3))
METRICS = ("ttft", "tpot", "e2e", "queue")

Both = tuple[HybridStore, Store]
#: A TTFT every SLI below is judged at: one a stored request has exactly (its bucket's edge
#: cases), and round ones.
THRESHOLDS = (0.05, 0.1, 0.25, 1.0)


stored: list[RequestRecord] = []


@pytest.fixture(scope="module")
def both(chdb: ChdbTransport) -> Iterator[Both]:
    """The same requests written through the hybrid store into PostgreSQL and ClickHouse."""
    stored.clear()
    records: list[RequestRecord] = make_records(
        np.random.default_rng(3636),
        T0,
        3000,
        span=timedelta(days=2, hours=20),
        models=("llama-8b", "llama-70b", "qwen-7b"),
        instances=("gpu-0", "gpu-1", "gpu-2"),
    )
    layout = Layout(database=f"rparity_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    with fresh_database() as url:
        engine = create_store_engine(url)
        upgrade(engine)
        pg = Store(url, engine)
        hybrid = HybridStore(pg.sql, Telemetry(chdb, layout), sql_copy=True)
        sink = hybrid.ingest.open_writer()
        for i in range(0, len(records), 700):
            sink.write_requests(records[i : i + 700])
        stored.extend(records)
        yield hybrid, pg
        engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


@pytest.mark.parametrize(
    ("window", "step", "coarsest", "bucket_s"),
    [
        (SHORT, Resolution.MINUTE, None, None),
        (SHORT, Resolution.MINUTE, None, 300),
        (WINDOW, Resolution.HOUR, None, None),
        (WINDOW, Resolution.HOUR, Resolution.DAY, None),
        (WINDOW, Resolution.MINUTE, Resolution.DAY, 6 * 3600),
        (WINDOW, Resolution.DAY, None, None),
    ],
)
@pytest.mark.parametrize(
    ("group_by", "selector"),
    [
        ((), Selector()),
        (("model", "instance"), Selector()),
        (("tenant",), Selector(model="qwen-7b")),
    ],
)
def test_series_equal_the_sql_store_s(
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
    theirs = pg.sql.requests.series(window, step, selector, group_by, coarsest, bucket_s)
    assert ours
    assert ours == theirs


@pytest.mark.parametrize(
    ("window", "step", "bucket_s", "coarsest"),
    [
        (SHORT, Resolution.MINUTE, 60, None),
        (SHORT, Resolution.MINUTE, 900, None),
        (WINDOW, Resolution.HOUR, 6 * 3600, Resolution.DAY),
        (WINDOW, Resolution.MINUTE, 3600, Resolution.HOUR),
    ],
)
@pytest.mark.parametrize("group_by", [(), ("model",), ("model", "priority")])
def test_chart_sketches_are_the_sql_store_s(
    both: Both,
    window: Window,
    step: Resolution,
    bucket_s: int,
    coarsest: Resolution | None,
    group_by: Sequence[str],
) -> None:
    hybrid, pg = both
    ours = hybrid.requests.bucket_sketches(
        METRICS, window, step, bucket_s, Selector(), group_by, coarsest
    )
    theirs = pg.sql.requests.bucket_sketches(
        METRICS, window, step, bucket_s, Selector(), group_by, coarsest
    )
    assert ours["ttft"]
    assert ours == theirs  # QuantileSketch equality: buckets, counts, min and max to the bit
    for metric in METRICS:
        for labels, buckets in ours[metric].items():
            for at, sketch in buckets.items():
                assert sketch.quantiles((0.5, 0.99)) == theirs[metric][labels][at].quantiles(
                    (0.5, 0.99)
                )


@pytest.mark.parametrize("step", [Resolution.MINUTE, Resolution.HOUR, Resolution.DAY])
@pytest.mark.parametrize("selector", [Selector(), Selector(instance="gpu-1")])
def test_peaks_equal_the_sql_store_s(both: Both, step: Resolution, selector: Selector) -> None:
    hybrid, pg = both
    ours = hybrid.requests.peaks(WINDOW, step, selector)
    assert set(ours) == {"llama-8b", "llama-70b", "qwen-7b"}
    assert ours == pg.sql.requests.peaks(WINDOW, step, selector)


def _slis() -> list[Sli]:
    exact_value = next(
        r.ttft_s for r in stored if r.ttft_s is not None and WINDOW.start <= r.start < WINDOW.end
    )
    latency = [
        Sli(SliKind.LATENCY, metric=metric, threshold_s=t)
        for metric in ("ttft", "e2e")
        for t in (*THRESHOLDS, exact_value)
    ]
    return [
        Sli(SliKind.AVAILABILITY),
        *latency,
        Sli(SliKind.LATENCY, metric="tpot", threshold_s=0.012),
        goodput_sli(ttft_s=0.1, tpot_s=0.015),
        goodput_sli(ttft_s=0.2, e2e_s=4.0, per=GoodputUnit.TOKEN),
    ]


@pytest.mark.parametrize(
    "selector",
    [Selector(), Selector(model="llama-70b"), Selector(instance="gpu-2", tenant="acme")],
)
@pytest.mark.parametrize("finest", [Resolution.MINUTE, Resolution.HOUR])
def test_event_counts_equal_the_sql_store_s(
    both: Both, selector: Selector, finest: Resolution
) -> None:
    hybrid, pg = both
    for sli in _slis():
        for window in (WINDOW, SHORT):
            ours = hybrid.events.count(sli, window, selector, finest=finest)
            assert ours.total > 0
            assert ours == pg.sql.events.count(sli, window, selector, finest=finest), sli
        exact = hybrid.events.count(sli, WINDOW, selector, exact=True)
        assert exact == pg.sql.events.count(sli, WINDOW, selector, exact=True)


def test_an_evaluation_cycle_counts_as_the_sql_store_s(both: Both) -> None:
    hybrid, pg = both
    now = WINDOW.end
    windows = [timedelta(hours=1), timedelta(hours=6), timedelta(days=1), timedelta(days=2)]
    for i, sli in enumerate(_slis()):
        spec = SloSpec(f"s{i}", sli, 0.99, timedelta(days=2), Selector(model="llama-8b"))
        with hybrid.events.cycle(now) as ours, pg.sql.events.cycle(now) as theirs:
            ours.prepare(windows, [sli])
            theirs.prepare(windows, [sli])
            assert ours.count(spec, windows) == theirs.count(spec, windows)


def test_goodput_misses_equal_the_sql_store_s(both: Both) -> None:
    hybrid, pg = both
    for sli in _slis()[-2:]:
        for selector in (Selector(), Selector(model="qwen-7b")):
            ours = hybrid.events.goodput_misses(sli, WINDOW, selector)
            assert ours["bad"] > 0
            assert ours == pg.sql.events.goodput_misses(sli, WINDOW, selector)


@pytest.mark.parametrize("model", ["llama-8b", "qwen-7b", "absent"])
def test_demand_equals_the_sql_store_s(both: Both, model: str) -> None:
    hybrid, pg = both
    ours, theirs = hybrid.demand, pg.sql.demand
    for window in (
        WINDOW,
        SHORT,
        Window(T0 + timedelta(minutes=30, seconds=0.5), T0 + timedelta(hours=1)),
    ):
        assert ours.minute_demand(model, window) == theirs.minute_demand(model, window)
        assert ours.peak_rate(model, window) == theirs.peak_rate(model, window)
    for offset in range(4):
        day = (T0 + timedelta(days=offset)).date()
        assert ours.day_minutes(model, day) == theirs.day_minutes(model, day)
        assert list(ours.busiest_models(day)) == list(theirs.busiest_models(day))
    day = (T0 + timedelta(days=1)).date()
    if model == "absent":
        with pytest.raises(NotFound):
            ours.recorded_demand(model, day)
        assert ours.peak_rate(model, WINDOW) is None
    else:
        assert ours.recorded_demand(model, day, 2) == theirs.recorded_demand(model, day, 2)
        assert ours.minute_demand(model, SHORT)


@pytest.mark.parametrize(
    "selector", [Selector(), Selector(model="llama-8b"), Selector(tenant="globex")]
)
def test_error_types_and_production_shapes_equal_the_sql_store_s(
    both: Both, selector: Selector
) -> None:
    hybrid, pg = both
    ours = hybrid.requests.error_types(WINDOW, selector)
    assert sum(n for kinds in ours.values() for n in kinds.values()) > 0
    assert ours == pg.sql.requests.error_types(WINDOW, selector)
    for limit in (1, 50, 10_000):
        shapes = hybrid.requests.production_shapes(SHORT, selector, limit)
        assert shapes
        assert shapes == pg.sql.requests.production_shapes(SHORT, selector, limit)


def test_a_selector_that_excludes_values_reads_as_on_the_sql_store(both: Both) -> None:
    """``Selector.excluding`` (an answer folding the groups past its top N into one)."""
    hybrid, pg = both
    rest = Selector().excluding("model", ["llama-8b"]).excluding("instance", ["gpu-0", "gpu-2"])
    assert hybrid.requests.throughput(WINDOW, rest, ("model",)) == pg.sql.requests.throughput(
        WINDOW, rest, ("model",)
    )
    assert {t.labels["model"] for t in hybrid.requests.throughput(WINDOW, rest, ("model",))} == {
        "llama-70b",
        "qwen-7b",
    }
    assert hybrid.requests.series(WINDOW, Resolution.HOUR, rest) == pg.sql.requests.series(
        WINDOW, Resolution.HOUR, rest
    )
    assert hybrid.requests.latencies(METRICS, WINDOW, rest) == pg.sql.requests.latencies(
        METRICS, WINDOW, rest
    )
    sli = Sli(SliKind.LATENCY, metric="ttft", threshold_s=0.1)
    assert hybrid.events.count(sli, WINDOW, rest) == pg.sql.events.count(sli, WINDOW, rest)
