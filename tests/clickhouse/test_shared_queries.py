"""One shared set of queries against two stores fed the same telemetry on their own (issue
#36): PostgreSQL through its own writer, and the hybrid store with the telemetry in ClickHouse
alone (``INFERSIGHT_TELEMETRY_SQL_COPY`` off: its SQL store, which keeps the state, took no
telemetry). Exact quantiles equal, sketch quantiles equal, throughput and SLO event counts
equal, cost and goodput equal to the Decimal, and the diagnosis matrix's queue cell given the
same cause from both."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import text

from infersight.alerts.diagnose import diagnose
from infersight.alerts.rules import load_rules
from infersight.core.query import Method, Selector
from infersight.core.slo import Sli, SliKind, SloSpec
from infersight.storage import slo_store
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport
from tests.clickhouse import test_cost_parity as cost_case
from tests.clickhouse import test_signals_parity as signals_case
from tests.conftest import Store, fresh_database

pytestmark = pytest.mark.postgres

QS = (0.5, 0.9, 0.99)
#: The SQL store's telemetry tables: none holds a row when ClickHouse holds the telemetry.
TELEMETRY_TABLES = (
    "requests",
    "request_parts",
    "request_rollups",
    "trace_attributions",
    "client_requests",
    "server_samples",
    "gpu_samples",
    "gpu_rollups",
)

Shared = tuple[HybridStore, Store, Store, list[signals_case.Cell]]


@pytest.fixture(scope="module")
def shared(chdb: ChdbTransport) -> Iterator[Shared]:
    """The cost case's requests, spans and GPU samples and the queue cell's requests, scrapes
    and GPU samples: into a PostgreSQL store through its own writer, and into ClickHouse
    through a hybrid store over a second PostgreSQL store (its state) that takes none of it."""
    records, spans = cost_case._records()
    samples = cost_case._gpu_samples()
    cell, (queued, scrapes, gpus) = signals_case._queue_cell(-1)
    layout = Layout(database=f"shared_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    with fresh_database() as sql_url, fresh_database() as state_url:
        engines = [create_store_engine(u) for u in (sql_url, state_url)]
        for engine in engines:
            upgrade(engine)
        sql, state = Store(sql_url, engines[0]), Store(state_url, engines[1])
        hybrid = HybridStore(state.sql, Telemetry(chdb, layout))
        for sink in (sql.sql.ingest.open_writer(), hybrid.ingest.open_writer()):
            sink.write_gpu_samples(samples)
            sink.write_gpu_samples(gpus)
            sink.write_server_samples(scrapes)
            for batch in (records, queued):
                for i in range(0, len(batch), 2000):
                    sink.write_requests(batch[i : i + 2000])
            sink.write_attributions(spans)  # type: ignore[attr-defined]
        for store in (sql, state):
            for spec in cost_case.SLOS:
                slo_store.put_slo(store.engine, spec, cost_case.T0)
        yield hybrid, sql, state, [cell]
        for engine in engines:
            engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


def test_the_store_beside_clickhouse_took_no_telemetry(shared: Shared) -> None:
    hybrid, sql, state, _ = shared
    with state.engine.connect() as connection:
        held = {
            t: connection.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()
            for t in TELEMETRY_TABLES
        }
    assert held == dict.fromkeys(TELEMETRY_TABLES, 0)
    assert hybrid.maintenance.stored_requests() == sql.sql.maintenance.stored_requests() > 0


@pytest.mark.parametrize("w", range(len(cost_case.WINDOWS)))
def test_quantiles_counts_and_events_are_the_same(shared: Shared, w: int) -> None:
    hybrid, sql, _, _ = shared
    window = cost_case.WINDOWS[w]
    for group_by in ((), ("model", "instance"), ("tenant",)):
        for method in (Method.EXACT, Method.SKETCH):
            ours = hybrid.requests.latency("ttft", window, Selector(), group_by, QS, method)
            theirs = sql.sql.requests.latency("ttft", window, Selector(), group_by, QS, method)
            assert [g.labels for g in ours.groups] == [g.labels for g in theirs.groups]
            for a, b in zip(ours.groups, theirs.groups, strict=True):
                assert a.count == b.count
                assert a.quantiles == pytest.approx(b.quantiles, rel=1e-12, abs=0)
        assert hybrid.requests.throughput(window, Selector(), group_by) == (
            sql.sql.requests.throughput(window, Selector(), group_by)
        )
    specs = [
        *cost_case.SLOS,
        SloSpec("available", Sli(SliKind.AVAILABILITY), 0.99, timedelta(days=1), Selector()),
    ]
    for spec in specs:
        for exact in (False, True):
            ours_events = hybrid.events.count(spec.sli, window, spec.selector, exact=exact)
            theirs_events = sql.sql.events.count(spec.sli, window, spec.selector, exact=exact)
            assert ours_events == theirs_events, (spec.name, exact)


@pytest.mark.parametrize("w", range(len(cost_case.WINDOWS)))
def test_cost_and_goodput_are_the_same_to_the_decimal(shared: Shared, w: int) -> None:
    hybrid, sql, _, _ = shared
    window = cost_case.WINDOWS[w]
    for model in cost_case.MODELS:
        ours = hybrid.cost.cost(window, model, group_by=("model",), slos=cost_case.SLOS)
        theirs = sql.sql.cost.cost(window, model, group_by=("model",), slos=cost_case.SLOS)
        cost_case._equal(ours, theirs, model.name)


def test_the_queue_cell_is_diagnosed_alike(shared: Shared) -> None:
    hybrid, sql, _, cells = shared
    pack = load_rules()
    for cell in cells:
        windows = (cell.incident, cell.reference)
        ours = [hybrid.requests.window_signals(w) for w in windows]
        theirs = [sql.sql.requests.window_signals(w) for w in windows]
        for a, b in zip(ours, theirs, strict=True):
            signals_case.assert_same(a, b, cell.name)
        mine, reference = diagnose(*ours, pack), diagnose(*theirs, pack)
        assert (mine.cause, mine.instance) == (reference.cause, reference.instance)
        assert mine.cause.value == cell.cause
        assert cell.right_instance(mine.instance)


def test_the_window_is_not_empty(shared: Shared) -> None:
    """Not vacuous: every window but the empty one holds requests in both."""
    hybrid, _, _, _ = shared
    counts = [
        sum(t.requests for t in hybrid.requests.throughput(w)) for w in cost_case.WINDOWS[:-1]
    ]
    assert all(counts)
    assert not sum(t.requests for t in hybrid.requests.throughput(cost_case.WINDOWS[-1]))
