"""The shipper: spool → store exactly once, through outages, with stage fragments merged."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from infersight.collector.assembly import Reassembly
from infersight.collector.codec import (
    Kind,
    encode_client,
    encode_fragment,
    encode_link,
    encode_record,
    encode_sample,
)
from infersight.collector.mapping import Link, StageFragment
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.shipper import Backoff, Shipper, ShipPolicy
from infersight.collector.spool import Entry, Spool, SpoolConfig
from infersight.core.client import ClientRecord
from infersight.core.errors import ConfigurationError, InvalidInput, Unavailable
from infersight.core.records import RequestRecord
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.write import Sink, WriteResult
from infersight.storage.tables import client_requests, gpu_samples, requests, server_samples
from infersight.storage.writer import open_writer
from tests.collector.harness import stored_keys
from tests.conftest import STORES_AND_POOLER, Store, empty_store

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
#: Passes that stored records at least two seconds apart.
TWO_S = ShipPolicy(idle_s=2.0)


def record(i: int, **extra: object) -> RequestRecord:
    return RequestRecord(
        trace_id=f"{i + 1:032x}",
        span_id=f"{i + 1:016x}",
        start=T0,
        instance="node-1",
        e2e_s=1.0 + i / 1000,
        **extra,  # type: ignore[arg-type]
    )


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Pauses:
    """``Shipper.run``'s ``wait``: records each pause, moves ``clock`` on by it (when given)
    and stops the loop once the spool is empty."""

    def __init__(self, spool: Spool, clock: Clock | None = None) -> None:
        self.spool = spool
        self.clock = clock
        self.stop = threading.Event()
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> bool:
        self.waits.append(seconds)
        if self.clock is not None:
            self.clock.now += seconds
        if self.spool.stats()[0] == 0:
            self.stop.set()
        return self.stop.is_set()


@pytest.fixture
def spool(tmp_path: Path) -> Iterator[Spool]:
    spool = Spool(SpoolConfig(tmp_path / "spool", group_window_s=0.0))
    yield spool
    spool.close()


def put(spool: Spool, entries: Sequence[Entry]) -> None:
    spool.append(entries).result(timeout=10)


def record_entries(records: Sequence[RequestRecord], ready_at: float = 0.0) -> list[Entry]:
    return [Entry(Kind.RECORD, r.trace_id, ready_at, encode_record(r)) for r in records]


@pytest.fixture(params=STORES_AND_POOLER)
def store(request: pytest.FixtureRequest) -> Store:
    """The shipper's path into SQLite, PostgreSQL and PostgreSQL through PgBouncer (#19)."""
    return empty_store(request)


def test_records_land_in_the_store_exactly_once_even_when_replayed(store, spool: Spool) -> None:
    metrics = CollectorMetrics()
    shipper = Shipper(spool, open_writer(store.engine), metrics, ShipPolicy(batch_size=100))
    batch = [record(i) for i in range(250)]
    put(spool, record_entries(batch))
    while shipper.ship_once().shipped:
        pass
    put(spool, record_entries(batch[:50]))  # a replay after a crash between write and delete
    while shipper.ship_once().shipped:
        pass
    keys = stored_keys(store.engine)
    assert sorted(keys) == sorted((r.trace_id, r.span_id) for r in batch)
    assert spool.stats() == (0, 0)
    assert metrics.value("infersight_collector_ship_duplicates_total") == 50


def test_stage_fragments_are_merged_and_records_wait_for_the_window(store, spool: Spool) -> None:
    clock = Clock()
    shipper = Shipper(spool, open_writer(store.engine), CollectorMetrics(), clock=clock)
    root = record(1)
    put(spool, record_entries([root], ready_at=clock.now + 2.0))
    fragment = StageFragment(
        root.trace_id, "00000000000000ff", "preprocess", 0.012, parent_span_id=root.span_id
    )
    put(spool, [Entry(Kind.STAGE, root.trace_id, clock.now, encode_fragment(fragment))])
    assert shipper.ship_once().shipped == 0
    clock.now += 2.0
    assert shipper.ship_once().shipped == 1
    with store.engine.connect() as c:
        assert c.execute(select(requests.c.preprocess_s)).scalar_one() == pytest.approx(0.012)
    assert spool.stats() == (0, 0)


def test_a_stage_whose_request_never_comes_is_dropped_after_its_ttl(store, spool: Spool) -> None:
    clock = Clock()
    metrics = CollectorMetrics()
    ttl = Reassembly(orphan_ttl_s=60)
    shipper = Shipper(spool, open_writer(store.engine), metrics, reassembly=ttl, clock=clock)
    fragment = StageFragment("ab" * 16, "00000000000000ff", "decode", 1.0)
    put(spool, [Entry(Kind.STAGE, fragment.trace_id, clock.now, encode_fragment(fragment))])
    shipper.ship_once()
    assert spool.stats()[0] == 1
    clock.now += 61
    shipper.ship_once()
    assert spool.stats()[0] == 0
    assert metrics.value("infersight_collector_orphan_stages_total") == 1


def test_links_expire_with_the_ttl_without_counting_as_orphan_stages(store, spool: Spool) -> None:
    clock = Clock()
    metrics = CollectorMetrics()
    ttl = Reassembly(orphan_ttl_s=60)
    shipper = Shipper(spool, open_writer(store.engine), metrics, reassembly=ttl, clock=clock)
    link = Link("ab" * 16, "00000000000000ee", "", "chat-app", 1)
    put(spool, [Entry(Kind.STAGE, link.trace_id, clock.now, encode_link(link))])
    clock.now += 61
    shipper.ship_once()
    assert spool.stats()[0] == 0
    assert metrics.value("infersight_collector_orphan_stages_total") == 0


@pytest.mark.parametrize(
    ("next_ready_in", "shipped_records", "expected_wait"),
    [
        pytest.param(None, True, 2.0, id="no record waits: the idle pause"),
        pytest.param(0.5, True, 2.0, id="after storing records, one ready sooner waits"),
        pytest.param(0.5, False, 0.5, id="after storing none, one ready sooner goes when ready"),
        pytest.param(3.25, True, 3.25, id="a record ready later is shipped when it is ready"),
        pytest.param(60.0, True, 10.0, id="a record ready much later waits at most max_idle_s"),
    ],
)
def test_the_next_pass_starts_when_the_oldest_record_is_ready_within_bounds(
    spool: Spool, next_ready_in: float | None, shipped_records: bool, expected_wait: float
) -> None:
    clock = Clock()
    shipper = Shipper(spool, NoStore(), CollectorMetrics(), ShipPolicy(idle_s=2.0), clock=clock)
    ready_at = None if next_ready_in is None else clock.now + next_ready_in
    started = clock.now
    assert shipper.idle_delay(started, ready_at, shipped_records) == pytest.approx(expected_wait)
    clock.now += 0.25  # the pass took this long: the pause counts from its start
    waited = shipper.idle_delay(started, ready_at, shipped_records)
    assert waited == pytest.approx(expected_wait - 0.25)


def test_the_loop_sleeps_until_the_next_export_leaves_its_window(store, spool: Spool) -> None:
    clock = Clock()
    shipper = Shipper(spool, open_writer(store.engine), CollectorMetrics(), TWO_S, clock=clock)
    put(spool, record_entries([record(1)], ready_at=clock.now))
    put(spool, record_entries([record(2)], ready_at=clock.now + 4.5))
    pauses = Pauses(spool, clock)
    shipper.run(pauses.stop, wait=pauses)
    assert pauses.waits[0] == pytest.approx(4.5)  # one pass for each export, none in between
    assert len(stored_keys(store.engine)) == 2


def test_an_empty_pass_does_not_delay_the_next_export(store, spool: Spool) -> None:
    clock = Clock()
    shipper = Shipper(spool, open_writer(store.engine), CollectorMetrics(), TWO_S, clock=clock)
    put(spool, record_entries([record(1)], ready_at=clock.now + 0.25))
    pauses = Pauses(spool, clock)
    shipper.run(pauses.stop, wait=pauses)
    assert pauses.waits[0] == pytest.approx(0.25)  # not the 2 s idle pause
    assert len(stored_keys(store.engine)) == 1


class NoStore:
    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult:
        raise AssertionError("nothing is shipped here")

    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int:
        raise AssertionError("nothing is shipped here")

    def write_server_samples(self, samples: Sequence[ServerSample]) -> int:
        raise AssertionError("nothing is shipped here")


def test_samples_are_shipped_too(store, spool: Spool) -> None:
    gpu = GpuSample(
        ts=T0, instance="node-1", gpu_index=0, power_w=300.0, throttle_reasons=("sw_power_cap",)
    )
    server = ServerSample(ts=T0, instance="node-1", engine="vllm", requests_running=3.0)
    put(
        spool,
        [
            Entry(Kind.GPU, "", 0.0, encode_sample(gpu)),
            Entry(Kind.SERVER, "", 0.0, encode_sample(server)),
        ],
    )
    Shipper(spool, open_writer(store.engine), CollectorMetrics()).ship_once()
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(gpu_samples)).scalar_one() == 1
        assert c.execute(select(func.count()).select_from(server_samples)).scalar_one() == 1


class FlakyStore:
    """The real writer behind a connection that is down for the first ``failures`` calls."""

    def __init__(self, writer: Sink, failures: int) -> None:
        self.writer = writer
        self.failures = failures

    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult:
        if self.failures > 0:
            self.failures -= 1
            raise Unavailable("connection refused")
        return self.writer.write_requests(records)

    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int:
        return self.writer.write_gpu_samples(samples)

    def write_server_samples(self, samples: Sequence[ServerSample]) -> int:
        return self.writer.write_server_samples(samples)


def test_a_store_outage_is_retried_with_backoff_and_nothing_is_lost(store, spool: Spool) -> None:
    metrics = CollectorMetrics()
    sink = FlakyStore(open_writer(store.engine), failures=4)
    shipper = Shipper(spool, sink, metrics, ShipPolicy(backoff=Backoff(5.0, 1.5, 30.0)))
    batch = [record(i) for i in range(20)]
    put(spool, record_entries(batch))
    pauses = Pauses(spool)
    shipper.run(pauses.stop, wait=pauses)
    assert pauses.waits[:4] == [5.0, 7.5, 11.25, 16.875]
    assert len(stored_keys(store.engine)) == 20
    assert metrics.value("infersight_collector_ship_errors_total", reason="unavailable") == 4


def test_the_backoff_is_capped_at_30_seconds() -> None:
    backoff = Backoff()
    assert [backoff.delay(n) for n in range(7)] == pytest.approx(
        [5.0, 7.5, 11.25, 16.875, 25.3125, 30.0, 30.0]
    )


def test_samples_are_shipped_in_batches_every_samples_every_s(store, spool: Spool) -> None:
    clock = Clock(T0.timestamp())
    metrics = CollectorMetrics()
    shipper = Shipper(
        spool, open_writer(store.engine), metrics, ShipPolicy(samples_every_s=10.0), clock=clock
    )

    def sample(at: float) -> Entry:
        ts = datetime.fromtimestamp(at, tz=UTC)
        gpu = GpuSample(ts=ts, instance="node-1", gpu_index=0, power_w=300.0)
        return Entry(Kind.GPU, "", at, encode_sample(gpu))

    def count() -> int:
        with store.engine.connect() as c:
            return int(c.execute(select(func.count()).select_from(gpu_samples)).scalar_one())

    put(spool, [sample(clock.now)])
    assert shipper.ship_once().shipped == 1  # the first pass ships what is there
    for step in range(4):
        clock.now += 2.0
        put(spool, [sample(clock.now)])
        put(spool, record_entries([record(step)], ready_at=clock.now))
        assert shipper.ship_once().shipped == 1  # the record only
    assert count() == 1
    # Samples held back on purpose are not lag; eight seconds is within the ten.
    assert metrics.value("infersight_collector_ship_lag_seconds") == 0.0
    clock.now += 2.0
    assert shipper.ship_once().shipped == 4  # ten seconds on: the four samples at once
    assert count() == 5
    clock.now += 2.0
    put(spool, [sample(clock.now)])
    assert shipper.ship_once().shipped == 0  # two seconds since the last samples were shipped
    shipper.drain()  # shutting down: the samples go too
    assert count() == 6
    put(spool, [sample(clock.now + 1.0)])
    assert shipper.ship_once(ignore_window=True).shipped == 1  # a replay ships everything
    assert spool.stats() == (0, 0)


def test_ship_lag_is_how_long_an_eligible_record_has_waited(store, spool: Spool) -> None:
    clock = Clock()
    metrics = CollectorMetrics()
    shipper = Shipper(
        spool, open_writer(store.engine), metrics, ShipPolicy(batch_size=1), clock=clock
    )
    put(spool, record_entries([record(1)], ready_at=clock.now - 7.0))
    put(spool, record_entries([record(2)], ready_at=clock.now - 3.0))
    put(spool, record_entries([record(3)], ready_at=clock.now + 2.0))  # still in its window
    assert shipper.ship_once().shipped == 1
    assert metrics.value("infersight_collector_ship_lag_seconds") == pytest.approx(3.0)
    assert shipper.ship_once().shipped == 1
    assert metrics.value("infersight_collector_ship_lag_seconds") == 0.0


def client_call(n: int) -> ClientRecord:
    return ClientRecord(f"{n + 1:032x}", f"{n + 1:016x}", T0, model="m", e2e_s=1.0)


def test_client_records_ship_apart_and_a_store_without_them_drops_them_counted(
    store, spool: Spool
) -> None:
    calls = [client_call(i) for i in range(3)]
    put(spool, [Entry(Kind.CLIENT, c.trace_id, 0.0, encode_client(c)) for c in calls])
    metrics = CollectorMetrics()
    result = Shipper(spool, NoStore(), metrics).ship_once()  # a sink of server records only
    assert result.ok
    assert metrics.value("infersight_collector_ship_errors_total", reason="no_client_store") == 3
    assert spool.ready(1e18, [Kind.CLIENT], 10) == []
    put(spool, [Entry(Kind.CLIENT, c.trace_id, 0.0, encode_client(c)) for c in calls])
    Shipper(spool, open_writer(store.engine), metrics).ship_once()
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(client_requests)).scalar_one() == 3


class RefusingOne:
    """The real writer, refusing (as the database would) any batch holding one record."""

    def __init__(self, writer: Any, bad: str) -> None:
        self.writer = writer
        self.bad = bad

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)

    def write_client_requests(self, records: Sequence[ClientRecord]) -> WriteResult:
        if any(r.span_id == self.bad for r in records):
            raise InvalidInput("the store refused the batch")
        result: WriteResult = self.writer.write_client_requests(records)
        return result


def test_one_client_record_the_store_refuses_does_not_block_the_others(store, spool: Spool) -> None:
    calls = [client_call(i) for i in range(4)]
    put(spool, [Entry(Kind.CLIENT, c.trace_id, 0.0, encode_client(c)) for c in calls])
    metrics = CollectorMetrics()
    sink = RefusingOne(open_writer(store.engine), calls[1].span_id)
    assert Shipper(spool, sink, metrics).ship_once().ok
    with store.engine.connect() as c:
        assert c.execute(select(func.count()).select_from(client_requests)).scalar_one() == 3
    assert metrics.value("infersight_collector_ship_errors_total", reason="invalid_record") == 1


@pytest.mark.parametrize(
    ("tuning", "words"),
    [
        pytest.param({"idle_s": -1.0}, "pauses must not be negative", id="negative idle"),
        pytest.param({"probe_every_s": math.nan}, "pauses must not be negative", id="NaN probe"),
        pytest.param({"open_delay_s": -0.5}, "pauses must not be negative", id="negative open"),
        pytest.param({"slow_after_s": 0.0}, "slow-store bound must be positive", id="no bound"),
        pytest.param({"batch_size": 0}, "batch size must be at least 1", id="empty batch"),
    ],
)
def test_a_ship_policy_refuses_bad_tuning_with_a_clear_error(
    tuning: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigurationError, match=words):
        ShipPolicy(**tuning)


def test_a_ship_policy_never_waits_longer_idle_than_its_idle_pause() -> None:
    policy = ShipPolicy(idle_s=5.0, max_idle_s=1.0)
    assert policy.max_idle_s == 5.0
    assert policy.idle_delay(100.0, 500.0, True, now=100.0) == pytest.approx(5.0)


def test_the_writer_is_built_by_the_first_pass_and_the_first_shipment_announced_once(
    store, spool: Spool
) -> None:
    built: list[Sink] = []
    announced: list[int] = []

    def build() -> Sink:
        built.append(open_writer(store.engine))
        return built[-1]

    shipper = Shipper(spool, build, CollectorMetrics(), on_first_ship=announced.append)
    assert shipper.sink is None
    assert not shipper.opened.is_set()
    assert shipper.health()["shipping"] == "starting"
    assert shipper.ship_once().shipped == 0  # builds the writer; nothing to ship yet
    assert shipper.opened.is_set()
    assert shipper.sink is built[0]
    assert announced == []  # nothing shipped: nothing announced
    put(spool, record_entries([record(1), record(2)]))
    assert shipper.ship_once().shipped == 2
    put(spool, record_entries([record(3)]))
    assert shipper.ship_once().shipped == 1
    assert announced == [2]  # once, with the first shipment's entries
    assert len(built) == 1
    assert len(stored_keys(store.engine)) == 3
