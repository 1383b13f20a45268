"""The same server scrapes and GPU samples in the SQL store (SQLite and PostgreSQL) and in
ClickHouse (chdb) answer every scrape read and raw GPU read of ``SampleStore`` the same, and each
is stored once in ClickHouse however often its batch comes — also after a batch failed half-way
through.

The reads' tests read samples shipped once per module and SQL store, into stores of their own;
the tests that write get empty stores each."""

from __future__ import annotations

import dataclasses
import math
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from infersight.core.accept import AcceptWindow
from infersight.core.errors import Unavailable
from infersight.core.samples import EngineSample, GpuSample, ServerSample, combine_engines
from infersight.core.window import Window
from infersight.storage import server_engines, timeseries
from infersight.storage.engine import create_store_engine
from infersight.storage.migrate import upgrade
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.samples import (
    GPU_MEANS,
    GPU_ROLLUP_MIN_S,
    SERVER_FIGURES,
    SampleWriter,
)
from infersight.storage_clickhouse.schema import Layout, migrate
from infersight.storage_clickhouse.transport import ChdbTransport, Transport
from tests.conftest import BOTH_STORES, Store, fresh_database

#: Recent days: ClickHouse drops rows past their TTL (the raw retention) as it writes them.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
#: Windows with ragged edges, a day's, one inside a minute, the whole span, and an empty one.
WINDOWS = (
    Window(T0 + timedelta(hours=1, seconds=7.25), T0 + timedelta(days=1, hours=3, seconds=0.5)),
    Window(T0 + timedelta(days=1), T0 + timedelta(days=2)),
    Window(T0 + timedelta(hours=5, seconds=10), T0 + timedelta(hours=5, seconds=50)),
    Window(T0, T0 + timedelta(days=3)),
    Window(T0 - timedelta(days=2), T0 - timedelta(days=1)),
)
INSTANCES = ("dp-a", "dp-b", "one-a", "one-b", "spec")
MODELS = {"dp-a": "llama", "dp-b": "llama", "one-a": "qwen", "one-b": "llama", "spec": "qwen"}


def _maybe(rng: np.random.Generator, value: float, p_none: float = 0.1) -> float | None:
    return None if rng.random() < p_none else value


def _scrapes(n_per_instance: int = 120) -> list[ServerSample]:
    """Scrapes of five instances over two and a half days at irregular times (microseconds
    included): two data-parallel ones (2 and 4 engines), a speculating one, figures missing
    at random (a NULL in the newest scrape too)."""
    rng = np.random.default_rng(36)
    out = []
    for instance in INSTANCES:
        width = {"dp-a": 2, "dp-b": 4}.get(instance, 1)
        offsets = np.sort(rng.uniform(0, 2.5 * 86400, n_per_instance))
        for offset in offsets:
            at = T0 + timedelta(microseconds=int(offset * 1e6))
            engines = tuple(
                EngineSample(
                    str(rank),
                    requests_running=float(rng.integers(0, 30)),
                    requests_waiting=_maybe(rng, float(rng.integers(0, 9))),
                    kv_cache_usage=_maybe(rng, float(rng.uniform(0, 1))),
                    prefix_cache_hit_ratio=_maybe(rng, float(rng.uniform(0, 1)), 0.3),
                )
                for rank in range(width)
            )
            whole: dict[str, float | None] = {
                "requests_running": float(rng.integers(0, 60)),
                "requests_waiting": _maybe(rng, float(rng.integers(0, 20))),
                "requests_deferred": _maybe(rng, float(rng.integers(0, 3)), 0.5),
                "kv_cache_usage": _maybe(rng, float(rng.uniform(0, 1))),
                "prefix_cache_hit_ratio": _maybe(rng, float(rng.uniform(0, 1))),
            }
            if instance == "spec":
                whole["spec_acceptance_rate"] = float(rng.uniform(0.3, 0.9))
                whole["spec_accept_length"] = _maybe(rng, float(rng.uniform(1, 4)))
            per_engine = engines if width > 1 else ()
            out.append(
                ServerSample(
                    ts=at,
                    instance=instance,
                    engine="sglang" if instance == "spec" else "vllm",
                    model=MODELS[instance],
                    per_engine=per_engine,
                    **combine_engines(per_engine, whole),
                )
            )
    order = rng.permutation(len(out))
    return [out[i] for i in order]


def ship_twice(write: Callable[[Sequence[Any]], int], items: Sequence[Any], size: int) -> None:
    """``items`` written in batches of ``size``, every batch twice: all stored by the first
    writes, nothing by the replays."""
    stored = 0
    for i in range(0, len(items), size):
        batch = items[i : i + size]
        stored += write(batch)
        assert write(batch) == 0  # the replay: nothing new
    assert stored == len(items)


def _same(a: Any, b: Any, where: str = "") -> None:
    """``a`` equals ``b``, floats to 1e-9 relative (sums taken in another order)."""
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        assert type(a) is type(b), where
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, Mapping):
        assert isinstance(b, Mapping), where
        assert sorted(a) == sorted(b), where
        for key in a:
            _same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple), where
        assert len(a) == len(b), (where, a, b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert isinstance(b, float | int), (where, a, b)
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)
    else:
        assert a == b, (where, a, b)


def _count(telemetry: Telemetry, table: str, final: bool = False) -> int:
    rows = telemetry.transport.rows(
        f"SELECT count() FROM {telemetry.layout.table(table)}{' FINAL' if final else ''}"
    )
    return int(rows[0][0])


def _engines_in(scrapes: Sequence[ServerSample]) -> int:
    return sum(len(s.per_engine) for s in scrapes)


@contextmanager
def own_stores(
    kind: str, chdb: ChdbTransport, tmp_path_factory: pytest.TempPathFactory, name: str
) -> Iterator[tuple[Store, Telemetry]]:
    """A migrated SQL store (``kind``: ``sqlite`` or ``postgres``) and a migrated ClickHouse
    database, both of their own and dropped on leaving: for data a module's tests only read,
    shipped once (the tests that write take ``store`` and ``telemetry``, empty for each)."""
    layout = Layout(database=f"{name}_{uuid.uuid4().hex[:12]}")
    migrate(chdb, layout)
    try:
        with _sql_url(kind, tmp_path_factory, name) as url:
            engine = create_store_engine(url)
            try:
                upgrade(engine)
                yield Store(url, engine), Telemetry(chdb, layout)
            finally:
                engine.dispose()
    finally:
        chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")


@contextmanager
def _sql_url(kind: str, tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp(name) / 'infersight.db'}"
    else:
        with fresh_database() as url:
            yield url


Filled = tuple[HybridStore, Store, Telemetry, list[ServerSample]]


@pytest.fixture(scope="module", params=BOTH_STORES)
def filled(
    request: pytest.FixtureRequest, chdb: ChdbTransport, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Filled]:
    """The scrapes shipped through the hybrid sink in batches, every batch twice (a replay):
    once per module and SQL store, into stores of their own (its tests only read)."""
    with own_stores(request.param, chdb, tmp_path_factory, "scrapes") as (store, telemetry):
        scrapes = _scrapes()
        hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
        ship_twice(hybrid.ingest.open_writer().write_server_samples, scrapes, 97)
        yield hybrid, store, telemetry, scrapes


def test_the_figures_read_are_the_sql_stores() -> None:
    assert SERVER_FIGURES == server_engines.SERVER_FIGURES
    assert GPU_MEANS == timeseries.GPU_MEANS
    assert GPU_ROLLUP_MIN_S == timeseries.GPU_ROLLUP_MIN_S


def test_each_scrape_and_engine_is_stored_once(filled: Filled) -> None:
    _, _, telemetry, scrapes = filled
    # Counted without FINAL: the replays inserted nothing, not rows a merge would fold.
    assert _count(telemetry, "server_samples") == len(scrapes)
    assert _count(telemetry, "server_engine_samples") == _engines_in(scrapes)


@pytest.mark.parametrize("w", range(len(WINDOWS)))
def test_every_scrape_read_answers_as_the_sql_store(filled: Filled, w: int) -> None:
    hybrid, store, _, _ = filled
    window = WINDOWS[w]
    ch, sql = hybrid.samples, store.sql.samples
    for instances in (None, ["dp-b", "spec"], ["one-a"], []):
        _same(ch.server_summaries(window, instances), sql.server_summaries(window, instances))
        _same(ch.engine_summaries(window, instances), sql.engine_summaries(window, instances))
        for step in (60, 900, 3600):
            _same(
                ch.engine_series(window, step, instances),
                sql.engine_series(window, step, instances),
            )
    for model in ("llama", "qwen", "none"):
        for pinned in (None, {"dp-a", "one-b"}, set()):
            _same(ch.server_gauges(model, window, pinned), sql.server_gauges(model, window, pinned))
    _same(ch.server_evidence(window), sql.server_evidence(window))


def test_the_reads_see_the_data(filled: Filled) -> None:
    """The parity above compares answers that hold rows (not two empty lists)."""
    hybrid, _, _, scrapes = filled
    window = WINDOWS[3]
    summaries = hybrid.samples.server_summaries(window)
    assert [s.instance for s in summaries] == sorted(INSTANCES)
    assert sum(s.samples for s in summaries) == len(scrapes)
    assert summaries[-1].speculates
    assert not summaries[0].speculates
    engines = hybrid.samples.engine_summaries(window)
    assert [(e.instance, e.rank) for e in engines] == [
        ("dp-a", "0"),
        ("dp-a", "1"),
        *(("dp-b", str(r)) for r in range(4)),
    ]
    gauges = hybrid.samples.server_gauges("llama", window)
    assert gauges.instances == ("dp-a", "dp-b", "one-b")
    newest = max(s.ts for s in scrapes if s.model == "llama")
    assert gauges.newest == newest


def test_a_key_repeated_in_a_batch_keeps_its_last_copy_in_both(
    store: Store, telemetry: Telemetry
) -> None:
    at = T0 + timedelta(hours=2, microseconds=123_457)
    first = ServerSample(ts=at, instance="x", model="m", requests_waiting=1.0)
    last = ServerSample(ts=at, instance="x", model="m", requests_waiting=7.0)
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    assert hybrid.ingest.open_writer().write_server_samples([first, last]) == 1
    window = Window(at, at + timedelta(seconds=1))
    got = hybrid.samples.server_gauges("m", window)
    assert got.waiting == (7.0,)
    _same(got, store.sql.samples.server_gauges("m", window))


class FailsOnce:
    """A transport whose first insert into ``table`` fails (after the inserts before it)."""

    def __init__(self, inner: Transport, table: str) -> None:
        self._inner = inner
        self._table = table
        self.failed = False
        self.database = inner.database

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def insert(self, table: str, columns: Any, payload: bytes, settings: Any) -> None:
        if table.endswith("." + self._table) and not self.failed:
            self.failed = True
            raise Unavailable("cut off")
        self._inner.insert(table, columns, payload, settings)


def test_a_batch_cut_off_between_its_inserts_is_stored_once_by_its_replay(
    telemetry: Telemetry,
) -> None:
    # One day's (a batch is stored a day at a time).
    scrapes = [s for s in _scrapes(30) if s.per_engine and s.ts.date() == T0.date()]
    assert scrapes
    failing = FailsOnce(telemetry.transport, "server_samples")
    writer = SampleWriter(failing, telemetry.layout)  # type: ignore[arg-type]
    with pytest.raises(Unavailable):
        writer.write_server_samples(scrapes)
    assert failing.failed
    # The engines went in, the scrapes did not: the replay stores the scrapes, and its
    # engines' insert is recognised as the one done.
    assert _count(telemetry, "server_engine_samples") == _engines_in(scrapes)
    assert _count(telemetry, "server_samples") == 0
    assert writer.write_server_samples(scrapes) == len(scrapes)
    assert _count(telemetry, "server_samples") == len(scrapes)
    assert _count(telemetry, "server_engine_samples") == _engines_in(scrapes)
    assert writer.write_server_samples(scrapes) == 0


def test_a_batch_stored_in_clickhouse_only_is_stored_in_sql_by_its_replay(
    store: Store, telemetry: Telemetry
) -> None:
    """ClickHouse stored the batch, the SQL store failed: the replay through the hybrid sink
    stores it in SQL and nothing more in ClickHouse; both answer the same."""
    scrapes = _scrapes(20)
    assert SampleWriter(telemetry.transport, telemetry.layout).write_server_samples(scrapes) == len(
        scrapes
    )
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    assert hybrid.ingest.open_writer().write_server_samples(scrapes) == len(scrapes)
    assert _count(telemetry, "server_samples") == len(scrapes)
    window = WINDOWS[3]
    _same(hybrid.samples.server_summaries(window), store.sql.samples.server_summaries(window))
    _same(hybrid.samples.engine_summaries(window), store.sql.samples.engine_summaries(window))


GPU_INSTANCES = ("g-a", "g-b", "g-c")
REASONS = ("gpu_idle", "sw_power_cap", "hw_slowdown", "applications_clocks_setting", "sync_boost")


def _gpu_samples(n_per_gpu: int = 150) -> list[GpuSample]:
    """Two GPUs on each of three instances over two and a half days at irregular times, with
    figures missing at random, clock-event reasons benign and hard, and error counters."""
    rng = np.random.default_rng(37)
    out = []
    for instance in GPU_INSTANCES:
        for index in range(2):
            offsets = np.sort(rng.uniform(0, 2.5 * 86400, n_per_gpu))
            for k, offset in enumerate(offsets):
                picked = tuple(r for r in REASONS if rng.random() < 0.2)
                out.append(
                    GpuSample(
                        ts=T0 + timedelta(microseconds=int(offset * 1e6)),
                        instance=instance,
                        gpu_index=index,
                        uuid=f"GPU-{instance}-{index}",
                        name="NVIDIA H100 80GB HBM3",
                        util_gpu=_maybe(rng, float(rng.uniform(0, 1))),
                        util_memory=float(rng.uniform(0, 1)),
                        memory_used_bytes=float(rng.integers(1, 80)) * 2**30,
                        memory_total_bytes=80.0 * 2**30,
                        power_w=_maybe(rng, float(rng.uniform(60, 700)), 0.05),
                        power_limit_w=700.0,
                        energy_j=float(k * 1000),
                        temperature_c=float(rng.uniform(30, 85)),
                        sm_clock_mhz=_maybe(rng, float(rng.uniform(800, 1980))),
                        memory_clock_mhz=2619.0,
                        throttle_reasons=picked,
                        ecc_sbe_total=float(k // 40),
                        ecc_dbe_total=_maybe(rng, 0.0, 0.5),
                        xid_last=int(rng.integers(0, 80)) if rng.random() < 0.1 else None,
                    )
                )
    order = rng.permutation(len(out))
    return [out[i] for i in order]


Gpus = tuple[HybridStore, Store, Telemetry, list[GpuSample]]


@pytest.fixture(scope="module", params=BOTH_STORES)
def gpus(
    request: pytest.FixtureRequest, chdb: ChdbTransport, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gpus]:
    """GPU samples shipped through the hybrid sink in batches, every batch twice (a replay):
    once per module and SQL store, into stores of their own (its tests only read)."""
    with own_stores(request.param, chdb, tmp_path_factory, "gpus") as (store, telemetry):
        samples = _gpu_samples()
        hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
        ship_twice(hybrid.ingest.open_writer().write_gpu_samples, samples, 113)
        yield hybrid, store, telemetry, samples


def test_each_gpu_sample_is_stored_once_in_both(gpus: Gpus) -> None:
    hybrid, _, telemetry, samples = gpus
    assert _count(telemetry, "gpu_samples") == len(samples)
    # The SQL store has them too: its rollups (cost, purchasing) are built from them.
    hours = hybrid.samples.hourly_gpu_usage(T0, T0 + timedelta(days=3))
    assert {h.instance for h in hours} == set(GPU_INSTANCES)


#: Windows the SQL store reads from raw samples (at most GPU_ROLLUP_MIN_S long).
SHORT = (
    Window(T0 + timedelta(hours=1, seconds=7.25), T0 + timedelta(hours=6, seconds=0.5)),
    Window(T0 + timedelta(days=1, hours=23), T0 + timedelta(days=2, hours=4)),
    Window(T0 + timedelta(hours=5, seconds=10), T0 + timedelta(hours=5, seconds=50)),
)


@pytest.mark.parametrize("w", range(len(WINDOWS)))
def test_every_raw_gpu_read_answers_as_the_sql_store(gpus: Gpus, w: int) -> None:
    hybrid, store, _, _ = gpus
    ch, sql = hybrid.samples, store.sql.samples
    window = WINDOWS[w]
    for instances in (None, ["g-b"], ["g-a", "g-c", "nobody"], []):
        listed = list(GPU_INSTANCES) if instances is None else instances
        _same(ch.gpu_utilisation(listed, window), sql.gpu_utilisation(listed, window))
        for step in (7, 60, 300, 3600):
            _same(
                ch.gpu_series(window, step, instances, raw_only=True),
                sql.gpu_series(window, step, instances, raw_only=True),
            )
    for short in SHORT:
        for step in (15, 60, 600):
            _same(ch.gpu_series(short, step), sql.gpu_series(short, step))


def test_the_raw_gpu_reads_see_the_data(gpus: Gpus) -> None:
    hybrid, _, _, samples = gpus
    window = WINDOWS[3]
    series = hybrid.samples.gpu_series(window, 86400, raw_only=True)
    assert sum(b.samples for b in series) == len(samples)
    assert any(b.throttled_samples for b in series)
    assert {b.instance for b in series} == set(GPU_INSTANCES)
    mean, newest = hybrid.samples.gpu_utilisation(["g-a"], window)
    assert mean is not None
    assert newest == max(s.ts for s in samples if s.instance == "g-a" and s.util_gpu is not None)


def test_the_accepted_window_refuses_the_same_samples_in_both(
    store: Store, telemetry: Telemetry
) -> None:
    """Scrapes and GPU samples older than the accepted window (or too far ahead) are stored in
    neither store; the rest in both."""
    now = T0 + timedelta(days=2)
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    sink = hybrid.ingest.open_writer(AcceptWindow.of_days(1, 60.0), clock=lambda: now)
    times = [now - timedelta(days=1, seconds=1), now - timedelta(hours=3), now + timedelta(hours=1)]
    scrapes = [ServerSample(ts=t, instance="x", model="m", requests_waiting=1.0) for t in times]
    gpus = [GpuSample(ts=t, instance="x", gpu_index=0, util_gpu=0.5) for t in times]
    assert sink.write_server_samples(scrapes) == 1
    assert sink.write_gpu_samples(gpus) == 1
    assert _count(telemetry, "server_samples") == 1
    assert _count(telemetry, "gpu_samples") == 1
    window = Window(T0, T0 + timedelta(days=3))
    _same(hybrid.samples.server_summaries(window), store.sql.samples.server_summaries(window))
    _same(
        hybrid.samples.gpu_utilisation(["x"], window),
        store.sql.samples.gpu_utilisation(["x"], window),
    )
