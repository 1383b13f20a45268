"""The hybrid store: telemetry in ClickHouse beside the SQL store's state (issue #36).

ClickHouse holds the telemetry and answers every telemetry read: ``requests`` (quantiles,
throughput, series, chart sketches, peaks, the breakdown, error types, production shapes and
capacity, pools, a window's baseline and its diagnosis signals, label sets), ``events`` (SLO
counts, an evaluation cycle, goodput's misses), ``demand``, ``samples`` (scrapes, GPU samples
and rollups, purchasing's hours), ``clients`` (the client–server gap) and ``cost`` (GPU time,
served work, good tokens). Gateway and client spans make ``tenant``, ``team``, ``workload``
and ``adapter`` ClickHouse's answers as attributed, whichever arrived first (``attribution``);
late parallel-sampling sequences are folded there (``sequences``). The SQL store keeps the
state (SLOs, incidents, the outbox, documents, sessions, baselines, reports, load-test runs).

``HybridSink`` writes each kind of telemetry to ClickHouse (each key once: a batch replayed
after a failure is stored once) and, with ``sql_copy`` (``INFERSIGHT_TELEMETRY_SQL_COPY``, for
a fleet moving from a SQL store), to the SQL store too under the same acknowledgement.
docs/past-one-primary.md ("Supported topology") says how each part keeps the SQL store's
answers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import Engine

from infersight.core.accept import AcceptWindow
from infersight.core.attribution import Attribution, usable
from infersight.core.baseline import Baseline
from infersight.core.client import ClientRecord
from infersight.core.cost import CostModel, GoodRequest
from infersight.core.errors import InvalidInput
from infersight.core.goodput import GoodPolicy
from infersight.core.loadtest import MeasuredCapacity
from infersight.core.model_names import ModelAliases
from infersight.core.quantiles import DEFAULT_QUANTILES
from infersight.core.query import Breakdown, LatencyResult, Method, Selector, Throughput
from infersight.core.records import RequestRecord
from infersight.core.retention import RetentionPolicy
from infersight.core.samples import GpuSample, ServerSample
from infersight.core.sequences import LateSequence
from infersight.core.signals import WindowSignals
from infersight.core.sketch import QuantileSketch
from infersight.core.slo import EventCounts, Sli, SloSpec
from infersight.core.window import Resolution, Window
from infersight.core.write import Sink, WriteResult
from infersight.storage.seam import (
    BaselineStore,
    BillStore,
    BudgetStore,
    BusiestPrefill,
    ClientStore,
    CostModelStore,
    CostStore,
    Counts,
    DemandMinute,
    DemandStore,
    EventCounter,
    EventStore,
    FinestFor,
    HistoryStore,
    IncidentStore,
    IngestStore,
    MaintenanceReport,
    MaintenanceStore,
    OutboxStore,
    PoolLine,
    ProfileStore,
    RecordedDemand,
    ReportStore,
    RequestPeak,
    RequestStore,
    ResultStore,
    RunStore,
    SampleStore,
    ScalingStore,
    SessionStore,
    SilenceStore,
    SloStore,
    Store,
    StoreContents,
)
from infersight.storage_clickhouse import baselines, schema
from infersight.storage_clickhouse.attribution import AttributionWriter
from infersight.storage_clickhouse.baselines import capture_window
from infersight.storage_clickhouse.capacity import CapacityReads
from infersight.storage_clickhouse.clients import ClientReads, ClientWriter
from infersight.storage_clickhouse.cost import CostReads, HybridCost
from infersight.storage_clickhouse.pools import PoolReads
from infersight.storage_clickhouse.reads import (
    DEFAULT_EXACT_MAX_ROWS,
    DemandReads,
    EventReads,
    LabelKey,
    Reads,
    RowReads,
)
from infersight.storage_clickhouse.samples import HybridSamples, SampleReads, SampleWriter
from infersight.storage_clickhouse.sequences import SequenceWriter
from infersight.storage_clickhouse.signals import SignalReads
from infersight.storage_clickhouse.transport import Transport, connect
from infersight.storage_clickhouse.writer import STARTED, ClickHouseWriter


class Telemetry:
    """One ClickHouse database: its transport, table layout and reads."""

    def __init__(self, transport: Transport, layout: schema.Layout) -> None:
        self.transport = transport
        self.layout = layout
        self.reads = Reads(transport, layout)
        self.sample_reads = SampleReads(transport, layout)

    def migrate(self) -> list[int]:
        return schema.migrate(self.transport, self.layout)

    def ping(self) -> None:
        self.transport.rows("SELECT 1")


class HybridSink:
    """Telemetry into ClickHouse: request records (prefill legs too), gateway and client spans
    (``attribution``), client records, server scrapes, GPU samples, and late sequences folded
    (``sequences``). With ``sql_copy`` (``INFERSIGHT_TELEMETRY_SQL_COPY``, for a move from a
    SQL store: both answer until the switch) each is written to the SQL store too, after
    ClickHouse, and acknowledged once both stored it; the answer is then the SQL store's.
    Without, the SQL store takes no telemetry and the answer is ClickHouse's. Its other
    methods (``ping``'s first half) are the SQL store's, reached through ``__getattr__``."""

    def __init__(
        self,
        sql: Sink,
        clickhouse: ClickHouseWriter,
        telemetry: Telemetry,
        *,
        sql_copy: bool = False,
    ) -> None:
        self._sql = sql
        self._clickhouse = clickhouse
        self._telemetry = telemetry
        self.sql_copy = sql_copy
        self._samples = SampleWriter(
            telemetry.transport, telemetry.layout, clickhouse.accept, clickhouse.clock
        )
        self._attribution = AttributionWriter(telemetry.transport, telemetry.layout)
        self._sequences = SequenceWriter(telemetry.transport, telemetry.layout, clickhouse.clock)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)

    def ping(self) -> None:
        ping = getattr(self._sql, "ping", None)
        if ping is not None:
            ping()
        self._telemetry.ping()

    def write_requests(self, records: Sequence[RequestRecord]) -> WriteResult:
        """Into ClickHouse, filled first from the spans it holds of their traces, then
        settled against spans stored meanwhile (``attribution``); with ``sql_copy``, then into
        the SQL store, which fills them itself."""
        filled = self._attribution.fill(records)
        result = self._clickhouse.write_requests(filled)
        self._attribution.join_late(records, filled)
        if self.sql_copy:
            return self._sql.write_requests(records)
        return result

    def _attribute(self, kept: Sequence[Attribution]) -> None:
        """Store the spans (accepted ones) and settle the requests they fill."""
        self._attribution.store(kept)
        self._attribution.settle_spans(kept)

    def _fresh(self, kept: Sequence[Attribution]) -> int:
        """How many distinct spans (by trace, start and span id) of ``kept`` are not stored
        yet: the rest are duplicates, as the SQL store counts them."""
        if not kept:
            return 0
        stored = self._attribution.spans(
            {a.trace_id for a in kept},
            min(a.start for a in kept),
            max(a.start for a in kept),
        )
        keys = {(t, s.start, s.span_id) for t, spans in stored.items() for s in spans}
        return len({(a.trace_id, a.start, a.span_id) for a in kept} - keys)

    def write_attributions(self, items: Sequence[Attribution]) -> WriteResult:
        """Gateway and client spans into ClickHouse (the stored requests they fill moved to
        their attributed series: ``attribution``); with ``sql_copy``, then into the SQL store,
        whose answer it is (the spans already stored are looked up only without it)."""
        kept = self._clickhouse.accepted(items, STARTED)
        fresh = 0 if self.sql_copy else self._fresh(kept)
        self._attribute(kept)
        if self.sql_copy:
            sql: Any = self._sql  # the SQL store's writer: ``Sink`` does not name these
            copied: WriteResult = sql.write_attributions(items)
            return copied
        return WriteResult(len(items), fresh, len(kept) - fresh, len(items) - len(kept))

    def fold_sequences(self, late: Sequence[LateSequence]) -> WriteResult:
        """Parallel-sampling sequences that came after their request was stored: folded in
        ClickHouse (``sequences``: each sequence once, the rollups corrected by views) and,
        with ``sql_copy``, then by the SQL store: acknowledged once both stored them."""
        result = self._sequences.fold(late)
        if not self.sql_copy:
            return result
        sql: Any = self._sql
        copied: WriteResult = sql.fold_sequences(late)
        return copied

    def folded(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of ``keys`` (trace id, span id) are sequences folded already: ClickHouse's
        claims (``sequences``), with ``sql_copy`` and the SQL store's (folds stored before
        schema step 11 are only there)."""
        done = self._sequences.folded(keys)
        if not self.sql_copy:
            return done
        sql: Any = self._sql
        return done | set(sql.folded(keys))

    def write_client_requests(self, records: Sequence[ClientRecord]) -> WriteResult:
        """Client records into ClickHouse (``clients``: each key once); a client span's own
        tenant names its trace's requests' tenant (as the SQL writer derives it), so that
        attribution goes to ClickHouse too; with ``sql_copy``, then into the SQL store."""
        clickhouse, telemetry = self._clickhouse, self._telemetry
        result = ClientWriter(
            telemetry.transport, telemetry.layout, clickhouse.accept, clickhouse.clock
        ).write_client_requests(records)
        spans = [
            Attribution(
                r.trace_id, r.span_id, r.start, r.e2e_s or 0.0, tenant=r.tenant, source="client"
            )
            for r in records
            if r.tenant and usable(r.tenant)
        ]
        self._attribute(self._clickhouse.accepted(spans, STARTED))
        if self.sql_copy:
            sql: Any = self._sql
            copied: WriteResult = sql.write_client_requests(records)
            return copied
        return result

    def write_server_samples(self, samples: Sequence[ServerSample]) -> int:
        """Into ClickHouse (which every scrape read answers from); with ``sql_copy``, then
        into the SQL store."""
        stored = self._samples.write_server_samples(samples)
        return self._sql.write_server_samples(samples) if self.sql_copy else stored

    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int:
        """Into ClickHouse (the samples and their GPU rollups, which every GPU and cost read
        answers from); with ``sql_copy``, then into the SQL store."""
        stored = self._samples.write_gpu_samples(samples)
        return self._sql.write_gpu_samples(samples) if self.sql_copy else stored


class HybridIngest:
    def __init__(self, sql: IngestStore, telemetry: Telemetry, *, sql_copy: bool) -> None:
        self._sql = sql
        self._telemetry = telemetry
        self._sql_copy = sql_copy

    def open_writer(
        self, accept: AcceptWindow | None = None, clock: Callable[[], datetime] | None = None
    ) -> Sink:
        writer = ClickHouseWriter(self._telemetry.transport, self._telemetry.layout, accept, clock)
        return HybridSink(
            self._sql.open_writer(accept, clock), writer, self._telemetry, sql_copy=self._sql_copy
        )


class HybridRequests:
    """``RequestStore``: the quantile, throughput, span and chart reads (series, chart sketches,
    peaks), the stage breakdown, error types, production's request shapes and the pools
    (prefill legs in ``request_parts``), the label sets and first-seen times, production
    capacity and a window's baseline (``capacity``, ``baselines``: its cost from ``store``'s
    ``cost``) and a window's diagnosis signals (``signals``: the client calls through
    ``store``'s ``clients``) from ClickHouse, labels as attributed (``attribution``); any
    other read is the SQL store's (reached through ``__getattr__``)."""

    def __init__(self, sql: RequestStore, telemetry: Telemetry, store: Store | None = None) -> None:
        self._sql = sql
        self._store = store
        self._telemetry = telemetry
        self._reads = telemetry.reads
        self._rows = RowReads(telemetry.transport, telemetry.layout)
        self._pools = PoolReads(telemetry.transport, telemetry.layout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)

    def latency(
        self,
        metric: str,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
        method: Method = Method.AUTO,
        *,
        finest: Resolution = Resolution.MINUTE,
        exact_max_rows: int = DEFAULT_EXACT_MAX_ROWS,
    ) -> LatencyResult:
        return self._reads.latency(
            metric,
            window,
            selector,
            group_by,
            quantiles,
            method,
            finest=finest,
            exact_max_rows=exact_max_rows,
        )

    def latencies(
        self,
        metrics: Sequence[str],
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        quantiles: Sequence[float] = DEFAULT_QUANTILES,
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> dict[str, LatencyResult]:
        return self._reads.latencies(metrics, window, selector, group_by, quantiles, finest=finest)

    def throughput(
        self,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[Throughput]:
        return self._reads.throughput(window, selector, group_by, finest=finest)

    def data_span(
        self,
        window: Window,
        selector: Selector = Selector(),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> Window | None:
        return self._reads.data_span(window, selector, finest=finest)

    def series(
        self,
        window: Window,
        step: Resolution,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        coarsest: Resolution | None = None,
        bucket_s: int | None = None,
    ) -> dict[LabelKey, dict[datetime, Counts]]:
        return self._reads.series(window, step, selector, group_by, coarsest, bucket_s)

    def bucket_sketches(
        self,
        metrics: Sequence[str],
        window: Window,
        step: Resolution,
        bucket_s: int,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        coarsest: Resolution | None = None,
    ) -> dict[str, dict[LabelKey, dict[datetime, QuantileSketch]]]:
        return self._reads.bucket_sketches(
            metrics, window, step, bucket_s, selector, group_by, coarsest
        )

    def peaks(
        self, window: Window, step: Resolution, selector: Selector = Selector()
    ) -> dict[str, RequestPeak]:
        return self._reads.peaks(window, step, selector)

    def error_types(
        self, window: Window, selector: Selector = Selector()
    ) -> dict[str, dict[str, int]]:
        return self._rows.error_types(window, selector)

    def window_signals(
        self,
        window: Window,
        selector: Selector = Selector(),
        aliases: ModelAliases | None = None,
    ) -> WindowSignals:
        """From ClickHouse (``signals``: the requests as attributed, their prefill legs, the
        scrapes and GPU samples folded per instance where they are); the client signals from
        the store's ``clients`` (none without a store)."""
        clients = None if self._store is None else self._store.clients
        reads = SignalReads(self._telemetry.transport, self._telemetry.layout, clients)
        return reads.window_signals(window, selector, aliases)

    def breakdown(
        self,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[Breakdown]:
        return self._reads.breakdown(window, selector, group_by, finest=finest)

    def label_sets(self, window: Window, step: Resolution = Resolution.HOUR) -> list[LabelKey]:
        """From ClickHouse's rollups, as attributed (``attribution``)."""
        return self._reads.label_sets(window, step)

    def first_seen(self, since: datetime, now: datetime) -> dict[LabelKey, datetime]:
        """From ClickHouse's rollups, as attributed (``attribution``)."""
        return self._reads.first_seen(since, now)

    def pool_summaries(
        self, window: Window, finest: Resolution = Resolution.MINUTE
    ) -> list[PoolLine]:
        """From ClickHouse (no selector: no attributed label)."""
        return self._pools.pool_summaries(window, finest)

    def production_shapes(
        self, window: Window, selector: Selector, limit: int = 10000
    ) -> list[tuple[int, int]]:
        """From ClickHouse whatever the selector (this read pins no attributed label)."""
        return self._rows.production_shapes(window, selector, limit)

    def production_capacity(
        self,
        window: Window,
        selector: Selector,
        *,
        ttft_p99_max_s: float | None = None,
        tpot_p99_max_s: float | None = None,
        instances: Collection[str] | None = None,
    ) -> MeasuredCapacity:
        """From ClickHouse's minute rollups, a pinned tenant as attributed (``capacity``)."""
        reads = CapacityReads(self._telemetry.transport, self._telemetry.layout)
        return reads.production_capacity(
            window,
            selector,
            ttft_p99_max_s=ttft_p99_max_s,
            tpot_p99_max_s=tpot_p99_max_s,
            instances=instances,
        )

    def capture_baseline(
        self,
        name: str,
        window: Window,
        selector: Selector,
        created_at: datetime,
        *,
        description: str = "",
        finest: Resolution = Resolution.MINUTE,
        exact_max_rows: int | None = None,
        cost_model: CostModel | None = None,
    ) -> Baseline:
        """From ClickHouse's reads (``baselines``); the cost per million tokens from the
        store's ``cost``, whichever store answers it (the SQL store's whole capture where no
        store was given and a cost model was)."""
        rows = DEFAULT_EXACT_MAX_ROWS if exact_max_rows is None else exact_max_rows
        if cost_model is not None and self._store is None:
            return self._sql.capture_baseline(
                name,
                window,
                selector,
                created_at,
                description=description,
                finest=finest,
                exact_max_rows=rows,
                cost_model=cost_model,
            )
        return capture_window(
            self._reads,
            self._telemetry.sample_reads,
            None if self._store is None else self._store.cost,
            name,
            window,
            selector,
            created_at,
            description=description,
            finest=finest,
            exact_max_rows=rows,
            cost_model=cost_model,
        )


class _EventCycle:
    """``seam.EventCounter`` over ClickHouse: each SLO's windows ending at ``now`` counted as
    ``EventReads.count_events`` counts them (each window split as the SQL store's cycle
    splits it: down to ``finest_for``'s resolution)."""

    def __init__(self, events: HybridEvents, now: datetime, finest_for: FinestFor | None) -> None:
        self._events = events
        self._now = now
        self._finest_for = finest_for

    def prepare(self, windows: Iterable[timedelta], slis: Iterable[Sli] = ()) -> None:
        """Nothing to read ahead: each count is two statements."""

    def count(self, spec: SloSpec, windows: Iterable[timedelta]) -> dict[timedelta, EventCounts]:
        out = {}
        for length in windows:
            if length <= timedelta(0):
                raise InvalidInput("windows must be positive")
            window = Window.last(length, self._now)
            finest = self._finest_for(window, self._now) if self._finest_for else Resolution.MINUTE
            out[length] = self._events.count(spec.sli, window, spec.selector, finest=finest)
        return out


class HybridEvents:
    """``EventStore``: SLO events counted from ClickHouse, whatever the selector pins (labels
    as attributed: ``attribution``)."""

    def __init__(self, sql: EventStore, telemetry: Telemetry) -> None:
        self._sql = sql
        self._reads = EventReads(telemetry.transport, telemetry.layout)

    def count(
        self,
        sli: Sli,
        window: Window,
        selector: Selector = Selector(),
        *,
        exact: bool = False,
        finest: Resolution = Resolution.MINUTE,
    ) -> EventCounts:
        return self._reads.count_events(sli, window, selector, exact=exact, finest=finest)

    @contextmanager
    def cycle(
        self,
        now: datetime,
        finest_for: FinestFor | None = None,
        cache: object | None = None,
        *,
        cached: bool = True,
    ) -> Iterator[EventCounter]:
        """A counter at ``now`` (ClickHouse keeps no decoded rows between cycles: ``cache``
        and ``cached`` change nothing; the counts are the same)."""
        yield _EventCycle(self, now, finest_for)

    def new_cache(self) -> object:
        return None

    def goodput_misses(
        self, sli: Sli, window: Window, selector: Selector = Selector()
    ) -> dict[str, int]:
        return self._reads.goodput_misses(sli, window, selector)


class HybridDemand:
    """``DemandStore``: a model's minute demand, peak rate, recorded days, the busiest models
    and the models seen (minute rollups and server scrapes) from ClickHouse, ``pool_members``
    and ``busiest_prefill_minute`` from its raw rows and prefill legs; whatever else the SQL
    store's (reached through ``__getattr__``)."""

    def __init__(self, sql: DemandStore, telemetry: Telemetry) -> None:
        self._sql = sql
        self._reads = DemandReads(telemetry.transport, telemetry.layout)
        self._pools = PoolReads(telemetry.transport, telemetry.layout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)

    def minute_demand(self, model: str, window: Window) -> list[DemandMinute]:
        return self._reads.minute_demand(model, window)

    def peak_rate(self, model: str, window: Window) -> float | None:
        return self._reads.peak_rate(model, window)

    def day_minutes(self, model: str, day: date) -> list[float]:
        return self._reads.day_minutes(model, day)

    def recorded_demand(self, model: str, day: date, weeks: int = 4) -> RecordedDemand:
        return self._reads.recorded_demand(model, day, weeks)

    def busiest_models(self, day: date, limit: int = 20) -> Sequence[str]:
        return self._reads.busiest_models(day, limit)

    def models_seen(self, window: Window) -> list[str]:
        return self._reads.models_seen(window)

    def pool_members(
        self, window: Window, model: str | None = None
    ) -> dict[str, dict[str, frozenset[str]]]:
        return self._pools.pool_members(window, model)

    def busiest_prefill_minute(
        self,
        model: str,
        window: Window,
        queue_max_s: float,
        instances: Collection[str] | None = None,
    ) -> BusiestPrefill | None:
        return self._pools.busiest_prefill_minute(model, window, queue_max_s, instances)


class HybridMaintenance:
    """The SQL store's maintenance (its other methods reached through ``__getattr__``), with
    ClickHouse's migrations, health and good-token counts beside it. ClickHouse's retention
    is its tables' ``TTL`` (set by the migrations from the settings)."""

    def __init__(self, sql: MaintenanceStore, telemetry: Telemetry, state: Store) -> None:
        self._sql = sql
        self._telemetry = telemetry
        self._state = state

    def maintain(self, now: datetime, policy: RetentionPolicy) -> MaintenanceReport:
        """The SQL store's maintenance, then ClickHouse's part of it: the good tokens of every
        raw day before today counted and kept (``cost.CostReads.keep_good_tokens``), under
        the limits the SQL store's step keeps them for — each cost model's and the plain
        request's, held to the stored SLOs — so a cost read past the raw rows' TTL is still
        exact."""
        report = self._sql.maintain(now, policy)
        slos = self._state.slos.all()
        goods = [GoodRequest(), *(model.good for model in self._state.cost_models.all())]
        policies = [GoodPolicy.of(slos, good.limits) for good in goods]
        CostReads(self._telemetry.transport, self._telemetry.layout).keep_good_tokens(
            now.date(), policies
        )
        return report

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)

    def upgrade(self, revision: str = "head") -> None:
        self._sql.upgrade(revision)
        if revision == "head":
            self._telemetry.migrate()

    def contents(self) -> StoreContents:
        """The SQL store's incidents and runs, ClickHouse's requests (``NOTHING``'s counts
        where neither has a schema yet)."""
        held = self._sql.contents()
        count, first, last = self._requests()
        return replace(held, requests=count, first=first, last=last)

    def stored_requests(self) -> int:
        return self._requests()[0]

    def _requests(self) -> tuple[int, datetime | None, datetime | None]:
        """How many requests ClickHouse holds, the first's and the last's start (``FINAL``:
        a row stored twice before a merge counts once); none before its migrations ran."""
        transport, layout = self._telemetry.transport, self._telemetry.layout
        if not int(transport.rows(f"EXISTS TABLE {layout.table('requests')}")[0][0]):
            return 0, None, None
        count, first, last = transport.rows(
            "SELECT count(), toUnixTimestamp64Micro(min(start)), toUnixTimestamp64Micro(max(start))"
            f" FROM {layout.table('requests')} FINAL"
        )[0]
        if not int(count):
            return 0, None, None
        epoch = datetime(1970, 1, 1, tzinfo=UTC)
        return (
            int(count),
            epoch + timedelta(microseconds=int(first)),
            epoch + timedelta(microseconds=int(last)),
        )

    def probe(self) -> None:
        self._sql.probe()
        layout = self._telemetry.layout
        for table in (
            "requests",
            "request_parts",
            "request_rollups_1m",
            "client_requests",
            "server_samples",
            "server_engine_samples",
            "gpu_samples",
            "gpu_rollups_1m",
        ):
            self._telemetry.transport.rows(f"SELECT 1 FROM {layout.table(table)} LIMIT 0")


class HybridStore:
    """A ``seam.Store``: the SQL store ``sql`` with ClickHouse's telemetry beside it. With
    ``sql_copy`` the telemetry is written to the SQL store too (``HybridSink``)."""

    def __init__(self, sql: Store, telemetry: Telemetry, *, sql_copy: bool = False) -> None:
        self._sql = sql
        self.telemetry = telemetry
        self.sql_copy = sql_copy

    def __repr__(self) -> str:
        return f"HybridStore({self.describe()})"

    # -- telemetry ---------------------------------------------------------------------------

    @property
    def ingest(self) -> IngestStore:
        return HybridIngest(self._sql.ingest, self.telemetry, sql_copy=self.sql_copy)

    @property
    def requests(self) -> RequestStore:
        return HybridRequests(self._sql.requests, self.telemetry, self)

    @property
    def demand(self) -> DemandStore:
        return HybridDemand(self._sql.demand, self.telemetry)

    @property
    def events(self) -> EventStore:
        return HybridEvents(self._sql.events, self.telemetry)

    @property
    def samples(self) -> SampleStore:
        reads, samples = self.telemetry.reads, self.telemetry.sample_reads
        return HybridSamples(
            self._sql.samples, samples, partial(baselines.gpu_utilization_of, reads, samples)
        )

    @property
    def clients(self) -> ClientStore:
        """From ClickHouse (``clients``: its client records joined to its requests as
        attributed), a window's load-test requests from the SQL store (a run is state)."""
        return ClientReads(
            self.telemetry.transport, self.telemetry.layout, self._sql.runs.traced_calls
        )

    @property
    def cost(self) -> CostStore:
        """From ClickHouse (``cost``: GPU time from its samples and rollups, served work and
        good tokens from its requests as attributed, prefill legs); the stored SLOs that
        goodput is held to are the SQL store's (state)."""
        return HybridCost(self._sql.cost, self.telemetry.transport, self.telemetry.layout)

    # -- state -------------------------------------------------------------------------------

    @property
    def slos(self) -> SloStore:
        return self._sql.slos

    @property
    def incidents(self) -> IncidentStore:
        return self._sql.incidents

    @property
    def history(self) -> HistoryStore:
        return self._sql.history

    @property
    def silences(self) -> SilenceStore:
        return self._sql.silences

    @property
    def outbox(self) -> OutboxStore:
        return self._sql.outbox

    @property
    def cost_models(self) -> CostModelStore:
        return self._sql.cost_models

    @property
    def budgets(self) -> BudgetStore:
        return self._sql.budgets

    @property
    def scaling(self) -> ScalingStore:
        return self._sql.scaling

    @property
    def baselines(self) -> BaselineStore:
        return self._sql.baselines

    @property
    def runs(self) -> RunStore:
        return self._sql.runs

    @property
    def reports(self) -> ReportStore:
        return self._sql.reports

    @property
    def profiles(self) -> ProfileStore:
        return self._sql.profiles

    @property
    def bills(self) -> BillStore:
        return self._sql.bills

    @property
    def sessions(self) -> SessionStore:
        return self._sql.sessions

    @property
    def results(self) -> ResultStore:
        return self._sql.results

    @property
    def maintenance(self) -> MaintenanceStore:
        return HybridMaintenance(self._sql.maintenance, self.telemetry, self._sql)

    # -- the store ---------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._sql.engine

    @property
    def dialect(self) -> str:
        return self._sql.dialect

    def describe(self) -> str:
        return f"{self._sql.describe()} + telemetry {self.telemetry.transport.describe()}"

    @contextmanager
    def transaction(self, *, dry_run: bool = False) -> Iterator[Store]:
        with self._sql.transaction(dry_run=dry_run) as bound:
            yield HybridStore(bound, self.telemetry, sql_copy=self.sql_copy)

    @contextmanager
    def reading(self) -> Iterator[Store]:
        with self._sql.reading() as bound:
            yield HybridStore(bound, self.telemetry, sql_copy=self.sql_copy)

    def long_running(self) -> Store:
        return HybridStore(self._sql.long_running(), self.telemetry, sql_copy=self.sql_copy)

    def dispose(self) -> None:
        self._sql.dispose()
        self.telemetry.transport.close()


def open_hybrid(
    sql: Store, url: str, layout: schema.Layout, *, sql_copy: bool = False
) -> HybridStore:
    """The SQL store ``sql`` with the telemetry database at ``url`` beside it (``layout``'s
    database: the URL's); ``sql_copy``: the telemetry is written to ``sql`` too."""
    transport = connect(url)
    telemetry = Telemetry(transport, replace(layout, database=transport.database))
    return HybridStore(sql, telemetry, sql_copy=sql_copy)


def _conforms(store: HybridStore) -> Store:
    """For mypy: a ``HybridStore`` is a ``seam.Store``."""
    return store
