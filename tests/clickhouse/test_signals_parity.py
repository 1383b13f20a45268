"""A window's diagnosis signals from ClickHouse (``storage_clickhouse.signals``) equal the SQL
store's (``storage.signals``) on the same data: request signals of several instances (one of
them slow, one with long prompts), disaggregated requests with their prefill legs and KV
sources, server gauges and the preemption counter across a restart, GPU readings of two boards
per instance (a gap, idle and throttled readings, ECC counters, XIDs), client calls joined by
trace id, and selectors that pin attributed labels — and the diagnosis's smoke cells stored
through the hybrid store (shipped fault scenarios, and a queue that backs up on one instance)
are diagnosed with the same causes from PostgreSQL and ClickHouse."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from bench.harness.scenarios import right_instance
from infersight.alerts.diagnose import diagnose
from infersight.alerts.rules import load_rules
from infersight.core.attribution import Attribution
from infersight.core.client import ClientRecord, TtftSource
from infersight.core.query import Selector
from infersight.core.records import RequestRecord, Role
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.signals import CLIENT, DISAGGREGATED, GPU, SERVER, WindowSignals
from infersight.core.window import Window
from infersight.simulator.fleet import run_scenario
from infersight.simulator.sinks import MemorySink
from infersight.simulator.specs import load_scenario
from infersight.storage import signals as sql_signals
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse import signals
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.signals import SignalReads
from infersight.storage_clickhouse.transport import ChdbTransport
from infersight.storage_clickhouse.writer import ClickHouseWriter
from tests.conftest import Store, fresh_database
from tests.factories import make_records

pytestmark = pytest.mark.postgres

#: Recent days: ClickHouse drops rows past their TTL (the raw retention) as it writes them.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
SPAN = timedelta(hours=1)
UNIFIED = ("gpu-0", "gpu-1", "gpu-slow", "gpu-long")
DECODE = ("dec-0", "dec-1")
PREFILL = ("pre-0", "pre-1", "pre-2")
SCRAPED = (*UNIFIED, *DECODE)
TEAMS = ("search", "ads")

Both = tuple[HybridStore, Store]


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _requests(rng: np.random.Generator) -> list[RequestRecord]:
    """Unified requests of four instances (one slow, one with long prompts, missing stage
    timings here and there), and disaggregated ones: a decode record on ``dec-*`` with its
    prefill peer and KV-transfer time, and the prefill leg on that peer (same trace)."""
    out: list[RequestRecord] = []
    for k, instance in enumerate(UNIFIED):
        model = "llama-70b" if instance == "gpu-1" else "llama-8b"
        rows = make_records(rng, T0, 500, span=SPAN, models=(model,), instances=(instance,),
                            error_rate=0.03)  # fmt: skip
        for i, shipped in enumerate(rows):
            r = shipped
            if instance == "gpu-slow":
                r = dataclasses.replace(r, ttft_s=r.ttft_s * 4, tpot_s=r.tpot_s * 3,
                                        queue_s=(r.queue_s or 0.0) + 0.5)  # fmt: skip
            if instance == "gpu-long" and i % 3 == 0:
                r = dataclasses.replace(r, input_tokens=(r.input_tokens or 0) * 8,
                                        ttft_s=r.ttft_s * 5)  # fmt: skip
            if i % 17 == k:
                r = dataclasses.replace(r, queue_s=None, preprocess_s=None, decode_s=None)
            if i % 23 == 0:
                r = dataclasses.replace(r, ttft_s=None, input_tokens=None)
            out.append(r)
    legs = make_records(rng, T0, 600, span=SPAN, models=("llama-8b",), instances=DECODE,
                        error_rate=0.02)  # fmt: skip
    for i, r in enumerate(legs):
        peer = PREFILL[(i * 7) % 5 % len(PREFILL)]
        kv = float(rng.exponential(0.01)) * (6.0 if peer == "pre-2" else 1.0)
        out.append(
            dataclasses.replace(r, role=Role.DECODE, peer=peer,
                                kv_transfer_s=None if i % 29 == 0 else kv)
        )  # fmt: skip
        if i % 13 == 5:
            continue  # a leg that was not stored
        out.append(
            dataclasses.replace(
                r,
                span_id=f"{int(r.span_id, 16) ^ 1:016x}",
                start=r.start + timedelta(milliseconds=int(rng.integers(1, 40))),
                instance=peer,
                role=Role.PREFILL,
                queue_s=None if i % 11 == 0 else float(rng.exponential(0.05)),
                kv_transfer_s=None,
            )
        )
    return out


def _scrapes(rng: np.random.Generator) -> list[ServerSample]:
    """A scrape every ~15 s (microseconds included) per instance; the preemption counter
    restarts once, some figures are missing, one instance speculates."""
    out = []
    for instance in SCRAPED:
        t, preempted = 0.0, 0.0
        n = 0
        while t < SPAN.total_seconds():
            t += float(rng.uniform(10, 20))
            n += 1
            preempted = 0.0 if n == 140 else preempted + float(rng.integers(0, 4))
            slow = instance == "gpu-slow"
            out.append(
                ServerSample(
                    _at(t),
                    instance,
                    engine="vllm",
                    model="llama-8b",
                    requests_running=float(rng.integers(1, 30)),
                    requests_waiting=float(rng.integers(5, 40) if slow else rng.integers(0, 3)),
                    kv_cache_usage=None if n % 9 == 0 else float(rng.uniform(0, 1)),
                    kv_cache_usage_max=None if n % 4 == 0 else float(rng.uniform(0.5, 1)),
                    preemptions_total=None if n % 7 == 0 else preempted,
                    spec_acceptance_rate=float(rng.uniform(0.3, 0.9)) if instance == "gpu-0"
                    else None,
                    spec_accept_length=float(rng.uniform(1, 4)) if instance == "gpu-0" else None,
                )
            )  # fmt: skip
    return out


def _gpus(rng: np.random.Generator) -> list[GpuSample]:
    """Two boards per unified instance, a reading every ~10 s (a four-minute gap on one),
    idle and throttled readings, ECC counters (one resets), an XID now and then."""
    reasons = ((), ("gpu_idle",), ("sw_thermal_slowdown",), ("sw_power_cap",),
               ("hw_slowdown", "sw_thermal_slowdown"))  # fmt: skip
    out = []
    for instance in UNIFIED:
        for board in (0, 1):
            t, sbe, dbe, n = float(rng.uniform(0, 5)), 0.0, 0.0, 0
            while t < SPAN.total_seconds():
                n += 1
                t += 240.0 if (board, n) == (1, 200) else float(rng.uniform(5, 15))
                sbe = 0.0 if n == 190 else sbe + float(rng.integers(0, 3))
                dbe += float(rng.integers(0, 2)) if board else 0.0
                why = reasons[int(rng.integers(0, len(reasons)))]
                util = 0.0 if "gpu_idle" in why else float(rng.uniform(0.2, 1.0))
                out.append(
                    GpuSample(
                        _at(t), instance, board,
                        util_gpu=None if n % 31 == 0 else util,
                        util_memory=float(rng.uniform(0, 1)),
                        dram_bw_util=None if n % 3 == 0 else float(rng.uniform(0, 1)),
                        sm_clock_mhz=float(rng.uniform(900, 1980)),
                        throttle_reasons=why,
                        temperature_c=float(rng.uniform(50, 90)),
                        power_w=None if n % 19 == 0 else float(rng.uniform(100, 700)),
                        ecc_sbe_total=None if n % 5 == 0 else sbe,
                        ecc_dbe_total=dbe if board else None,
                        xid_last=int(rng.integers(0, 80)) if n % 41 == 0 else None,
                    )
                )  # fmt: skip
    return out


def _clients(rng: np.random.Generator, records: list[RequestRecord]) -> list[ClientRecord]:
    """Client calls of every fourth user request (a second earlier, a little longer)."""
    out = []
    for i, r in enumerate(records):
        if r.role is Role.PREFILL or i % 4:
            continue
        extra = float(rng.uniform(0.0, 0.2))
        out.append(
            ClientRecord(
                r.trace_id, f"c{i:015x}", r.start - timedelta(seconds=0.01), service="app",
                model=r.model, tenant=r.tenant,
                e2e_s=None if r.e2e_s is None else r.e2e_s + extra,
                ttft_s=None if r.ttft_s is None else r.ttft_s + extra,
                ttft_source=TtftSource.NONE if r.ttft_s is None else TtftSource.EVENT,
            )
        )  # fmt: skip
    return out


def _spans(records: list[RequestRecord]) -> list[Attribution]:
    """Gateway spans naming a team (and a tenant for some) of most users' requests."""
    out = []
    for i, r in enumerate(records):
        if r.role is Role.PREFILL or i % 3 == 2:
            continue
        out.append(
            Attribution(r.trace_id, f"a{i:015x}", r.start - timedelta(seconds=0.5), 30.0,
                        tenant="gw" if i % 2 else "", team=TEAMS[i % 2], source="litellm")
        )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def both(chdb: ChdbTransport) -> Iterator[Both]:
    rng = np.random.default_rng(3612)
    records = _requests(rng)
    layout = Layout(database=f"signals_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    with fresh_database() as url:
        engine = create_store_engine(url)
        upgrade(engine)
        pg = Store(url, engine)
        hybrid = HybridStore(pg.sql, Telemetry(chdb, layout), sql_copy=True)
        sink = hybrid.ingest.open_writer()
        spans = _spans(records)
        sink.write_attributions(spans[: len(spans) // 2])  # half before the requests
        for i in range(0, len(records), 1000):
            sink.write_requests(records[i : i + 1000])
        sink.write_attributions(spans[len(spans) // 2 :])  # half after: moved
        sink.write_server_samples(_scrapes(rng))
        sink.write_gpu_samples(_gpus(rng))
        sink.write_client_requests(_clients(rng, records))  # type: ignore[attr-defined]
        yield hybrid, pg
        engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


def assert_same(ours: WindowSignals, theirs: WindowSignals, case: object = None) -> None:
    assert ours.window == theirs.window
    assert [s.instance for s in ours.instances] == [s.instance for s in theirs.instances], case
    for a, b in zip(ours.instances, theirs.instances, strict=True):
        where = (case, a.instance)
        assert a.model == b.model, where
        assert a.available == b.available, where
        assert sorted(a.values) == sorted(b.values), where
        for name, value in b.values.items():
            assert a.values[name] == pytest.approx(value, rel=1e-9, abs=1e-12), (where, name)
        assert sorted(a.kv_sources) == sorted(b.kv_sources), where
        for peer, value in b.kv_sources.items():
            assert a.kv_sources[peer] == pytest.approx(value, rel=1e-9), (where, peer)


WINDOWS = (
    # Ragged edges, ten minutes: every family.
    Window(_at(1800.25), _at(2400.5)),
    # Thirty seconds: a scrape or two, GPU readings that describe part of it.
    Window(_at(3000.125), _at(3030.125)),
    # The whole span (and past it: no scrape at the end).
    Window(T0 - timedelta(minutes=5), T0 + SPAN + timedelta(minutes=5)),
    # Before anything was stored: no instance.
    Window(T0 - timedelta(hours=2), T0 - timedelta(hours=1)),
)
SELECTORS = (
    Selector(),
    Selector(model="llama-8b"),
    Selector(instance="gpu-slow"),
    Selector(instance="pre-0"),  # pinned, no request of its own: scrapes only
    Selector(priority="batch"),
    Selector(team="ads"),  # attributed after insert for half of them
    Selector(tenant="gw"),
    Selector().within({"gw", "acme"}),
    Selector(team="search").excluding("tenant", ["globex"]),
)


#: Every selector over the ragged window; a few over the others.
CASES = [
    *((WINDOWS[0], selector) for selector in SELECTORS),
    *((WINDOWS[1], SELECTORS[i]) for i in (0, 2, 5)),
    *((WINDOWS[2], SELECTORS[i]) for i in (0, 6)),
    (WINDOWS[3], SELECTORS[0]),
]


def test_window_signals_equal_the_sql_store_s(both: Both) -> None:
    """Every case equal; the signals there (not vacuous); and ClickHouse's (one test: the
    data is stored once per test process)."""
    hybrid, pg = both
    for window, selector in CASES:
        theirs = pg.sql.requests.window_signals(window, selector)
        assert_same(hybrid.requests.window_signals(window, selector), theirs, (window, selector))
    _not_vacuous(hybrid)
    _from_clickhouse(hybrid, pg)


def _not_vacuous(hybrid: HybridStore) -> None:
    """Every family and the signals the data was built to move are there."""
    got = hybrid.requests.window_signals(WINDOWS[0]).by_instance()
    assert sorted(got) == sorted((*UNIFIED, *DECODE))
    for name in UNIFIED:
        assert {SERVER, GPU, CLIENT} <= got[name].available, name
        for signal in ("ecc_sbe_per_s", "preemptions_per_s", "throttled_share", "sm_clock_mhz"):
            assert got[name].get(signal) is not None, (name, signal)
    assert got["gpu-0"].get("spec_accept_length") is not None
    assert got["gpu-slow"].get("ttft_p90") > 2 * got["gpu-0"].get("ttft_p90")  # type: ignore[operator]
    assert got["gpu-long"].get("slow_input_tokens_p50") > got["gpu-0"].get("slow_input_tokens_p50")  # type: ignore[operator]
    for name in DECODE:
        assert DISAGGREGATED in got[name].available
        assert got[name].get("prefill_queue_mean") is not None
        assert got[name].get("kv_transfer_p90") is not None
        assert set(got[name].kv_sources) == set(PREFILL)
    whole = hybrid.requests.window_signals(WINDOWS[2]).by_instance()
    assert whole["gpu-0"].get("ecc_dbe_per_s") is not None


def _from_clickhouse(hybrid: HybridStore, pg: Store) -> None:
    """A request stored in ClickHouse alone is in the hybrid store's signals, not the SQL
    store's; without a client store, the same signals less the client family."""
    day = Window(T0 + timedelta(days=1), T0 + timedelta(days=1, minutes=10))
    [alone] = make_records(np.random.default_rng(1), day.start, 1, span=timedelta(minutes=1),
                           instances=("ch-only",), error_rate=0.0)  # fmt: skip
    telemetry = hybrid.telemetry
    ClickHouseWriter(telemetry.transport, telemetry.layout).write_requests([alone])
    assert [s.instance for s in hybrid.requests.window_signals(day).instances] == ["ch-only"]
    assert pg.sql.requests.window_signals(day).instances == ()
    bare = SignalReads(telemetry.transport, telemetry.layout).window_signals(WINDOWS[0])
    full = pg.sql.requests.window_signals(WINDOWS[0])
    for a, b in zip(bare.instances, full.instances, strict=True):
        assert a.available == b.available - {CLIENT}
        assert {n: v for n, v in b.values.items() if n in a.values} == pytest.approx(a.values)
        assert set(b.values) - set(a.values) <= {
            "client_pairs", "client_ttft_p90", "client_e2e_p90", "gap_ttft_p50",
            "gap_ttft_p90", "gap_e2e_p50", "gap_e2e_p90",
        }  # fmt: skip


def test_the_definitions_are_the_sql_store_s() -> None:
    assert signals.READING_SPAN_MAX == sql_signals.READING_SPAN_MAX
    assert signals.MAX_CLIENT_CALLS == sql_signals.MAX_CLIENT_CALLS


# -- The diagnosis's smoke cells: the same causes from either store ----------------------------

#: Shipped fault scenarios, compressed to ten minutes (the fault over the last five, the four
#: minutes before it the reference): TTFT and TPOT up with three times the arrivals
#: (overload), TPOT up on a throttled board (a GPU cause), one instance slower than its peers
#: (instance_degraded), and long prompts (TTFT up, TPOT normal: long_inputs).
SMOKE = (
    "fault-arrival-surge",
    "fault-thermal-throttle",
    "fault-degraded-instance",
    "fault-long-prompt-flood",
)
RUN_S = 600.0
FAULT_FROM_S = 300.0
REFERENCE_FROM_S = 60.0


@dataclasses.dataclass(frozen=True)
class Cell:
    """A smoke cell as stored: its windows and the cause it must be diagnosed with, where."""

    name: str
    incident: Window
    reference: Window
    cause: str
    right_instance: Callable[[str], bool]


Stored = tuple[Sequence[RequestRecord], Sequence[ServerSample], Sequence[GpuSample]]


def _simulated(name: str, day: int) -> tuple[Cell, Stored]:
    """Scenario ``name`` compressed, moved to ``day`` days after ``T0`` at its time of day."""
    shipped = load_scenario(name)
    faults = tuple(
        dataclasses.replace(f, start_s=FAULT_FROM_S, end_s=RUN_S) for f in shipped.faults[:1]
    )
    midnight = shipped.start.replace(hour=0, minute=0, second=0, microsecond=0)
    scenario = dataclasses.replace(
        shipped,
        start=T0 + timedelta(days=day) + (shipped.start - midnight),
        duration_s=RUN_S,
        faults=faults,
    )
    sink = MemorySink()
    run_scenario(scenario, [sink])
    stored = ([c.record for c in sink.completions], sink.server_samples, sink.gpu_samples)
    at = scenario.start
    incident = Window(at + timedelta(seconds=FAULT_FROM_S), at + timedelta(seconds=RUN_S))
    reference = Window(at + timedelta(seconds=REFERENCE_FROM_S), incident.start)
    [truth] = scenario.ground_truth()
    cell = Cell(name, incident, reference, truth.expected_cause,
                lambda named: right_instance(truth.kind, truth.instance, named))  # fmt: skip
    return cell, stored


def _queue_cell(day: int) -> tuple[Cell, Stored]:
    """TTFT up with TPOT normal on one of two instances: its requests wait 0.4 s longer in its
    queue and its scrapes show them waiting (no shipped fault does only that)."""
    rng = np.random.default_rng(36)
    start = T0 + timedelta(days=day, hours=9)
    fault = start + timedelta(minutes=5)
    records = make_records(rng, start, 4000, span=timedelta(minutes=10), models=("llama-8b",),
                           instances=("q-0", "q-1"), error_rate=0.0)  # fmt: skip
    waited = [
        dataclasses.replace(r, queue_s=(r.queue_s or 0.0) + 0.4, ttft_s=(r.ttft_s or 0.0) + 0.4,
                            e2e_s=(r.e2e_s or 0.0) + 0.4)
        if r.instance == "q-1" and r.start >= fault
        else r
        for r in records
    ]  # fmt: skip
    server, gpus = [], []
    for k in range(60):
        at = start + timedelta(seconds=10 * k)
        for instance in ("q-0", "q-1"):
            waiting = 8.0 if instance == "q-1" and at >= fault else 0.0
            server.append(
                ServerSample(at, instance, engine="vllm", model="llama-8b", requests_running=12.0,
                             requests_waiting=waiting, kv_cache_usage=0.3, preemptions_total=0.0)
            )  # fmt: skip
            gpus.append(
                GpuSample(at, instance, 0, util_gpu=0.8, dram_bw_util=0.5, sm_clock_mhz=1980.0,
                          temperature_c=60.0, power_w=500.0, ecc_sbe_total=0.0,
                          ecc_dbe_total=0.0)
            )  # fmt: skip
    cell = Cell("queue", Window(fault, start + timedelta(minutes=10)),
                Window(start + timedelta(minutes=1), fault), "queue_backlog",
                lambda named: named == "q-1")  # fmt: skip
    return cell, (waited, server, gpus)


@pytest.fixture(scope="module")
def smoke(chdb: ChdbTransport) -> Iterator[tuple[HybridStore, Store, list[Cell]]]:
    """Each smoke cell on a day of its own, through the hybrid store into both."""
    layout = Layout(database=f"smoke_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    with fresh_database() as url:
        engine = create_store_engine(url)
        upgrade(engine)
        pg = Store(url, engine)
        hybrid = HybridStore(pg.sql, Telemetry(chdb, layout), sql_copy=True)
        made = [_simulated(name, day) for day, name in enumerate(SMOKE, start=-len(SMOKE))]
        made.append(_queue_cell(-len(SMOKE) - 1))
        sink = hybrid.ingest.open_writer()
        for _, (records, server, gpus) in made:
            for i in range(0, len(records), 50_000):
                sink.write_requests(records[i : i + 50_000])
            sink.write_server_samples(server)
            sink.write_gpu_samples(gpus)
        yield hybrid, pg, [cell for cell, _ in made]
        engine.dispose()
    chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


def test_the_smoke_cells_are_diagnosed_alike_from_postgresql_and_clickhouse(
    smoke: tuple[HybridStore, Store, list[Cell]],
) -> None:
    hybrid, pg, cells = smoke
    pack = load_rules()
    causes = {}
    for cell in cells:
        windows = (cell.incident, cell.reference)
        ours = [hybrid.requests.window_signals(w) for w in windows]
        theirs = [pg.sql.requests.window_signals(w) for w in windows]
        for a, b in zip(ours, theirs, strict=True):
            assert_same(a, b, cell.name)
        mine, sql = diagnose(*ours, pack), diagnose(*theirs, pack)
        assert mine.cause == sql.cause, cell.name
        assert mine.instance == sql.instance, cell.name
        assert list(mine.ranked) == list(sql.ranked), cell.name
        assert mine.confidence == pytest.approx(sql.confidence, rel=1e-9), cell.name
        causes[cell.name] = (mine.cause.value, mine.instance)
    # Not vacuous: the injected causes, where they were injected.
    for cell in cells:
        cause, instance = causes[cell.name]
        assert cause == cell.cause, causes
        assert cell.right_instance(instance), causes
