"""``SqlStore``: the store seam (``storage.seam``) over SQLAlchemy, for PostgreSQL and SQLite.

Every method delegates to the storage module that owns the query (no SQL here), so the answers
are the ones those modules give. A ``SqlStore`` is bound to an engine, or (inside
``transaction()`` / ``reading()``) to one connection: a storage function that takes a
connection then runs on it (and so in the caller's transaction); one that takes an engine runs
on a connection of its own, as it always has. Bound to an engine, a function that takes a
connection gets a transaction of its own (``storage.sql.begin``) or, for reads, a connection.

``open_store(url)`` is the one way to open a store: the engine (``storage.engine``: timeouts,
the ``pooler=`` option, SQLite's create-or-refuse rule) wrapped in a ``SqlStore``;
``open_read_store`` opens a hot standby's (``storage.replica``).

Each storage module is imported on its first use (``_StorageModule``; mypy sees the real
imports), and the defaults that are storage modules' constants are read when a call omits
them: opening a store loads SQLAlchemy and ``storage.engine`` only, so ``db current`` and
``slo list`` load the modules of their own concern (``tests/test_cli_light_imports.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import date, datetime, timedelta
from decimal import Decimal
from functools import cache, cached_property
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Connection, Engine, TextClause, text

from infersight.core.query import Method, Selector
from infersight.core.window import Resolution, Window
from infersight.storage.engine import (
    DEFAULT_TIMEOUTS,
    LONG_STATEMENT_S,
    StoreTimeouts,
    create_store_engine,
    long_running,
    redact,
)


class _StorageModule:
    """A module of ``infersight.storage``, imported on its first attribute's use."""

    __slots__ = ("_module", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(f"infersight.storage.{self._name}")
        return getattr(module, attribute)


if TYPE_CHECKING:
    from infersight.core.accept import AcceptWindow
    from infersight.core.baseline import Baseline
    from infersight.core.budget import Budget
    from infersight.core.burn import AlertState, Incident, Transition
    from infersight.core.cost import CostModel, CostResult
    from infersight.core.focus import BillLine
    from infersight.core.gap import Side
    from infersight.core.goodput import GoodPolicy
    from infersight.core.incident_writes import Announcement, IncidentWrites
    from infersight.core.loadtest import LoadTestRun, MeasuredCapacity, RunListing
    from infersight.core.model_names import ModelAliases
    from infersight.core.profile import ProfileRequest
    from infersight.core.purchasing import GpuHour
    from infersight.core.query import Breakdown, LatencyResult, Throughput
    from infersight.core.retention import RetentionPolicy
    from infersight.core.scaling import Recommendation, ScalingPolicy
    from infersight.core.signals import WindowSignals
    from infersight.core.sketch import QuantileSketch
    from infersight.core.slo import EventCounts, Sli, SloSpec
    from infersight.core.write import Sink
    from infersight.storage import (
        baselines,
        bills,
        budgets,
        capacity,
        client_reads,
        contents,
        cost,
        cost_models,
        demand,
        gpu_rollup,
        incident_history,
        incident_paths,
        incidents,
        job_results,
        maintenance,
        migrate,
        outbox,
        pools,
        profiles,
        purchasing,
        queries,
        replica,
        reports,
        revisions,
        runs,
        scaling,
        scaling_reads,
        server_engines,
        sessions,
        signals,
        silences,
        slo_store,
        sql,
        tables,
        timeseries,
        writer,
    )
    from infersight.storage.contents import StoreContents
    from infersight.storage.maintenance import MaintenanceReport
    from infersight.storage.outbox import Message
    from infersight.storage.profiles import Profile
    from infersight.storage.seam import Evidence, FinestFor, LabelKey, Store
else:
    # The storage modules, each imported on first use: importing this module (opening a store)
    # stays light for the commands that touch one concern (``db current``, ``slo list``).
    baselines = _StorageModule("baselines")
    bills = _StorageModule("bills")
    budgets = _StorageModule("budgets")
    capacity = _StorageModule("capacity")
    client_reads = _StorageModule("client_reads")
    contents = _StorageModule("contents")
    cost = _StorageModule("cost")
    cost_models = _StorageModule("cost_models")
    demand = _StorageModule("demand")
    gpu_rollup = _StorageModule("gpu_rollup")
    incident_history = _StorageModule("incident_history")
    incident_paths = _StorageModule("incident_paths")
    incidents = _StorageModule("incidents")
    maintenance = _StorageModule("maintenance")
    migrate = _StorageModule("migrate")  # Alembic: only when migrating
    outbox = _StorageModule("outbox")
    pools = _StorageModule("pools")
    profiles = _StorageModule("profiles")  # pydantic (core.profile)
    purchasing = _StorageModule("purchasing")
    queries = _StorageModule("queries")
    replica = _StorageModule("replica")
    reports = _StorageModule("reports")
    revisions = _StorageModule("revisions")
    runs = _StorageModule("runs")
    scaling = _StorageModule("scaling")
    scaling_reads = _StorageModule("scaling_reads")
    server_engines = _StorageModule("server_engines")
    sessions = _StorageModule("sessions")
    job_results = _StorageModule("job_results")
    signals = _StorageModule("signals")
    silences = _StorageModule("silences")
    slo_store = _StorageModule("slo_store")
    sql = _StorageModule("sql")
    tables = _StorageModule("tables")
    timeseries = _StorageModule("timeseries")
    writer = _StorageModule("writer")


def _quantiles(quantiles: Sequence[float] | None) -> Sequence[float]:
    """``quantiles``, else ``core.quantiles.DEFAULT_QUANTILES`` (imported here: numpy)."""
    from infersight.core.quantiles import DEFAULT_QUANTILES  # noqa: PLC0415

    return DEFAULT_QUANTILES if quantiles is None else quantiles


Bind = Engine | Connection


class _Bound:
    """A concern bound to an engine or to one connection."""

    __slots__ = ("_bind",)

    def __init__(self, bind: Bind) -> None:
        self._bind = bind

    @property
    def _engine(self) -> Engine:
        """For the functions that open their own connection."""
        bind = self._bind
        return bind.engine if isinstance(bind, Connection) else bind

    def _writing(self) -> AbstractContextManager[Connection]:
        """The bound connection (the caller's transaction), else a transaction of its own."""
        return sql.begin(self._bind)

    def _reading(self) -> AbstractContextManager[Connection]:
        """The bound connection, else a connection of its own."""
        bind = self._bind
        return nullcontext(bind) if isinstance(bind, Connection) else bind.connect()


# -- telemetry --------------------------------------------------------------------------------


class SqlIngest(_Bound):
    __slots__ = ()

    def open_writer(
        self, accept: AcceptWindow | None = None, clock: Callable[[], datetime] | None = None
    ) -> Sink:
        return writer.open_writer(self._engine, accept, clock)


class SqlRequests(_Bound):
    __slots__ = ()

    def latency(
        self,
        metric: str,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        quantiles: Sequence[float] | None = None,
        method: Method = Method.AUTO,
        *,
        finest: Resolution = Resolution.MINUTE,
        exact_max_rows: int | None = None,
    ) -> LatencyResult:
        return queries.latency(
            self._engine,
            metric,
            window,
            selector,
            group_by,
            _quantiles(quantiles),
            method,
            finest=finest,
            exact_max_rows=queries.DEFAULT_EXACT_MAX_ROWS
            if exact_max_rows is None
            else exact_max_rows,
        )

    def latencies(
        self,
        metrics: Sequence[str],
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        quantiles: Sequence[float] | None = None,
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> dict[str, LatencyResult]:
        return queries.latencies(
            self._engine, metrics, window, selector, group_by, _quantiles(quantiles), finest=finest
        )

    def throughput(
        self,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[Throughput]:
        return queries.throughput(self._engine, window, selector, group_by, finest=finest)

    def data_span(
        self,
        window: Window,
        selector: Selector = Selector(),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> Window | None:
        return queries.data_span(self._engine, window, selector, finest=finest)

    def breakdown(
        self,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[Breakdown]:
        return queries.breakdown(self._engine, window, selector, group_by, finest=finest)

    def series(
        self,
        window: Window,
        step: Resolution,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        coarsest: Resolution | None = None,
        bucket_s: int | None = None,
    ) -> dict[LabelKey, dict[datetime, timeseries.Counts]]:
        return timeseries.request_series(
            self._engine, window, step, selector, group_by, coarsest, bucket_s
        )

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
        return timeseries.bucket_sketches_many(
            self._engine, metrics, window, step, bucket_s, selector, group_by, coarsest
        )

    def peaks(
        self, window: Window, step: Resolution, selector: Selector = Selector()
    ) -> dict[str, timeseries.RequestPeak]:
        return timeseries.request_peaks(self._engine, window, step, selector)

    def label_sets(self, window: Window, step: Resolution = Resolution.HOUR) -> list[LabelKey]:
        return timeseries.label_sets(self._engine, window, step)

    def first_seen(self, since: datetime, now: datetime) -> dict[LabelKey, datetime]:
        with self._reading() as connection:
            return timeseries.first_seen(connection, since, now)

    def pool_summaries(
        self, window: Window, finest: Resolution = Resolution.MINUTE
    ) -> list[pools.PoolLine]:
        return pools.pool_summaries(self._engine, window, finest)

    def production_capacity(
        self,
        window: Window,
        selector: Selector,
        *,
        ttft_p99_max_s: float | None = None,
        tpot_p99_max_s: float | None = None,
        instances: Collection[str] | None = None,
    ) -> MeasuredCapacity:
        return capacity.production_capacity(
            self._engine,
            window,
            selector,
            ttft_p99_max_s=ttft_p99_max_s,
            tpot_p99_max_s=tpot_p99_max_s,
            instances=instances,
        )

    def production_shapes(
        self, window: Window, selector: Selector, limit: int = 10000
    ) -> list[tuple[int, int]]:
        return runs.production_shapes(self._engine, window, selector, limit)

    def window_signals(
        self,
        window: Window,
        selector: Selector = Selector(),
        aliases: ModelAliases | None = None,
    ) -> WindowSignals:
        return signals.window_signals(self._engine, window, selector, aliases)

    def error_types(
        self, window: Window, selector: Selector = Selector()
    ) -> dict[str, dict[str, int]]:
        return signals.error_types(self._engine, window, selector)

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
        return baselines.capture_window(
            self._engine,
            name,
            window,
            selector,
            created_at,
            description=description,
            finest=finest,
            exact_max_rows=queries.DEFAULT_EXACT_MAX_ROWS
            if exact_max_rows is None
            else exact_max_rows,
            cost_model=cost_model,
        )


class SqlDemand(_Bound):
    __slots__ = ()

    def models_seen(self, window: Window) -> list[str]:
        return scaling_reads.models_seen(self._engine, window)

    def minute_demand(self, model: str, window: Window) -> list[scaling_reads.Minute]:
        return scaling_reads.minute_demand(self._engine, model, window)

    def peak_rate(self, model: str, window: Window) -> float | None:
        return scaling_reads.peak_rate(self._engine, model, window)

    def pool_members(
        self, window: Window, model: str | None = None
    ) -> dict[str, dict[str, frozenset[str]]]:
        return scaling_reads.pool_members(self._engine, window, model)

    def busiest_prefill_minute(
        self,
        model: str,
        window: Window,
        queue_max_s: float,
        instances: Collection[str] | None = None,
    ) -> scaling_reads.BusiestPrefill | None:
        return scaling_reads.busiest_prefill_minute(
            self._engine, model, window, queue_max_s, instances
        )

    def day_minutes(self, model: str, day: date) -> list[float]:
        return demand.day_minutes(self._engine, model, day)

    def recorded_demand(self, model: str, day: date, weeks: int = 4) -> demand.RecordedDemand:
        return demand.recorded_demand(self._engine, model, day, weeks)

    def busiest_models(self, day: date, limit: int = 20) -> Sequence[str]:
        return demand.busiest_models(self._engine, day, limit)


class SqlEvents(_Bound):
    __slots__ = ()

    def count(
        self,
        sli: Sli,
        window: Window,
        selector: Selector = Selector(),
        *,
        exact: bool = False,
        finest: Resolution = Resolution.MINUTE,
    ) -> EventCounts:
        with self._reading() as connection:
            return slo_store.count_events(
                connection, sli, window, selector, exact=exact, finest=finest
            )

    @contextmanager
    def cycle(
        self,
        now: datetime,
        finest_for: FinestFor | None = None,
        cache: object | None = None,
        *,
        cached: bool = True,
    ) -> Iterator[slo_store.CycleCounter]:
        if cache is not None and not isinstance(cache, slo_store.RollupCache):
            raise TypeError(f"not a cache of this store: {type(cache).__name__}")
        if cached and cache is None:
            cache = slo_store.rollup_cache(self._engine)
        with self._reading() as connection:
            yield slo_store.CycleCounter(connection, now, finest_for, cache if cached else None)

    def new_cache(self) -> slo_store.RollupCache:
        return slo_store.RollupCache()

    def goodput_misses(
        self, sli: Sli, window: Window, selector: Selector = Selector()
    ) -> dict[str, int]:
        with self._reading() as connection:
            return slo_store.goodput_misses(connection, sli, window, selector)


class SqlSamples(_Bound):
    __slots__ = ()

    def server_summaries(
        self, window: Window, instances: Sequence[str] | None = None
    ) -> list[server_engines.ServerSummary]:
        return server_engines.server_summaries(self._engine, window, instances)

    def engine_summaries(
        self, window: Window, instances: Sequence[str] | None = None
    ) -> list[server_engines.EngineSummary]:
        return server_engines.engine_summaries(self._engine, window, instances)

    def engine_series(
        self, window: Window, step_s: int, instances: Sequence[str] | None = None
    ) -> list[server_engines.EngineBucket]:
        return server_engines.engine_series(self._engine, window, step_s, instances)

    def server_gauges(
        self, model: str, window: Window, instances: Collection[str] | None = None
    ) -> scaling_reads.Gauges:
        return scaling_reads.server_gauges(self._engine, model, window, instances)

    def server_evidence(self, window: Window) -> dict[str, cost.ServerEvidence]:
        return cost.server_evidence(self._engine, window)

    def gpu_utilisation(
        self, instances: Sequence[str], window: Window
    ) -> tuple[float | None, datetime | None]:
        return scaling_reads.gpu_utilisation(self._engine, instances, window)

    def gpu_utilization_of(
        self, window: Window, selector: Selector, finest: Resolution = Resolution.MINUTE
    ) -> float | None:
        return baselines.gpu_utilization(self._engine, window, selector, finest)

    def gpu_series(
        self,
        window: Window,
        step_s: int,
        instances: Sequence[str] | None = None,
        finest: Resolution = Resolution.MINUTE,
        *,
        raw_only: bool = False,
    ) -> list[timeseries.GpuBucket]:
        return timeseries.gpu_series(
            self._engine, window, step_s, instances, finest, raw_only=raw_only
        )

    def hourly_gpu_usage(self, start: datetime, end: datetime) -> list[GpuHour]:
        return purchasing.hourly_gpu_usage(self._engine, start, end)


class SqlClients(_Bound):
    __slots__ = ()

    def read_pairs(
        self,
        window: Window,
        aliases: ModelAliases,
        *,
        model: str | None = None,
        tenant: str | None = None,
        max_calls: int | None = None,
    ) -> client_reads.Pairs:
        return client_reads.read_pairs(
            self._engine,
            window,
            aliases,
            model=model,
            tenant=tenant,
            max_calls=client_reads.MAX_CALLS if max_calls is None else max_calls,
        )


class SqlCost(_Bound):
    __slots__ = ()

    def cost(
        self,
        window: Window,
        model: CostModel,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
        slos: Sequence[SloSpec] | None = None,
    ) -> CostResult:
        return cost.cost(self._engine, window, model, selector, group_by, finest=finest, slos=slos)

    def good_policy(self, model: CostModel, slos: Sequence[SloSpec] | None = None) -> GoodPolicy:
        return cost.good_policy(self._engine, model, slos)

    def idle_method(
        self,
        floor: float,
        window: Window,
        gap: float | None = None,
        finest: Resolution = Resolution.MINUTE,
    ) -> str:
        gap = gpu_rollup.ROLLUP_GAP_S if gap is None else gap
        return cost.idle_method(floor, window, gap, finest)


# -- state ------------------------------------------------------------------------------------


class SqlSlos(_Bound):
    __slots__ = ()

    def put(self, spec: SloSpec, now: datetime) -> bool:
        return slo_store.put_slo(self._bind, spec, now)

    def get(self, name: str) -> SloSpec:
        return slo_store.get_slo(self._engine, name)

    def all(self) -> list[SloSpec]:
        return slo_store.list_slos(self._engine)

    def delete(self, name: str) -> None:
        slo_store.delete_slo(self._engine, name)


class SqlIncidents(_Bound):
    __slots__ = ()

    def firing(self, slo: str, scope: str) -> Incident | None:
        with self._reading() as connection:
            return incidents.firing(connection, slo, scope)

    def all_firing(self) -> dict[tuple[str, str], Incident]:
        with self._reading() as connection:
            return incidents.all_firing(connection)

    def apply_step(
        self,
        slo: str,
        scope: str,
        state: AlertState,
        transition: Transition,
        burn_rates: Mapping[str, float],
        now: datetime,
        *,
        current: Incident | Literal["lookup"] | None = "lookup",
        recovering: bool = False,
    ) -> Incident | None:
        with self._writing() as connection:
            return incidents.apply_step(
                connection,
                slo,
                scope,
                state,
                transition,
                burn_rates,
                now,
                current=current,
                recovering=recovering,
            )

    def resolve(self, incident_ids: Iterable[int], now: datetime) -> list[Incident]:
        with self._writing() as connection:
            return incidents.resolve(connection, incident_ids, now)

    def resolve_all(self, slo: str, now: datetime) -> list[Incident]:
        with self._writing() as connection:
            return incidents.resolve_all(connection, slo, now)

    def get(self, incident_id: int) -> Incident:
        return incidents.get_incident(self._engine, incident_id)

    def previous(self, incident: Incident) -> Incident | None:
        return incidents.previous(self._engine, incident)

    def all(self, state: str = "all", limit: int = 500) -> list[Incident]:
        return incidents.list_incidents(self._engine, state, limit)

    def save_diagnosis(
        self,
        incident_id: int,
        symptom: Mapping[str, Any],
        diagnosis: Mapping[str, Any],
        at: datetime,
    ) -> None:
        signals.save_diagnosis(self._bind, incident_id, symptom, diagnosis, at)

    def acknowledge(self, incident_id: int, by: str, at: datetime) -> signals.IncidentNote:
        return signals.acknowledge(self._engine, incident_id, by, at)

    def notes(self, incident_ids: Iterable[int]) -> dict[int, signals.IncidentNote]:
        return signals.notes(self._engine, incident_ids)

    def evidence(self, incident_id: int) -> Evidence:
        return incident_paths.evidence(SqlStore(self._bind), incident_id)

    def apply(self, incident_id: int, writes: IncidentWrites) -> int:
        return incident_paths.apply(SqlStore(self._bind), incident_id, writes)


class SqlHistory(_Bound):
    __slots__ = ()

    def append(
        self,
        incident_id: int,
        at: datetime,
        verdict: str,
        cause: str,
        diagnosis: Mapping[str, Any] | None = None,
    ) -> None:
        incident_history.append(self._bind, incident_id, at, verdict, cause, diagnosis)

    def entries(self, incident_id: int) -> list[incident_history.Entry]:
        return incident_history.entries(self._engine, incident_id)

    def last_diagnosis(self, incident_id: int) -> incident_history.Entry | None:
        return incident_history.last_diagnosis(self._engine, incident_id)

    def latest(self, incident_ids: Iterable[int]) -> dict[int, incident_history.Entry]:
        return incident_history.latest(self._engine, incident_ids)

    def onsets(self, incident_ids: Iterable[int]) -> dict[int, incident_history.Entry]:
        return incident_history.onsets(self._engine, incident_ids)

    def burn_points(self, incident_id: int) -> list[tuple[datetime, dict[str, float]]]:
        return incident_history.burn_points(self._engine, incident_id)


class SqlSilences(_Bound):
    __slots__ = ()

    def add(self, silence: silences.NewSilence, now: datetime) -> silences.Silence:
        return silences.add(self._engine, silence, now)

    def expire(self, silence_id: int, now: datetime) -> None:
        silences.expire(self._engine, silence_id, now)

    def active(self, now: datetime) -> list[silences.Silence]:
        return silences.active(self._engine, now)

    def silenced(self, labels: Mapping[str, str], now: datetime) -> bool:
        return silences.silenced(self._engine, labels, now)


class SqlOutbox(_Bound):
    """``storage.outbox.Outbox``, with its queueing in the bound transaction."""

    __slots__ = ("_outbox",)

    def __init__(self, bind: Bind) -> None:
        super().__init__(bind)
        self._outbox = outbox.Outbox(self._engine)

    @property
    def _connection(self) -> Connection | None:
        return self._bind if isinstance(self._bind, Connection) else None

    def enqueue(
        self,
        notifier: str,
        key: str,
        payload: str,
        now: datetime,
        not_before: datetime | None = None,
    ) -> bool:
        return self._outbox.enqueue(
            notifier, key, payload, now, not_before, connection=self._connection
        )

    def cancel_pending(self, notifier: str, key_like: str) -> int:
        return self._outbox.cancel_pending(notifier, key_like, connection=self._connection)

    def keys_like(self, key_like: str) -> set[tuple[str, str]]:
        return self._outbox.keys_like(key_like)

    def due(self, now: datetime, limit: int = 100) -> list[Message]:
        return self._outbox.due(now, limit)

    def claim(self, message_id: int, now: datetime) -> int | None:
        return self._outbox.claim(message_id, now)

    def delivered(self, message_id: int, now: datetime, attempt: int | None = None) -> bool:
        return self._outbox.delivered(message_id, now, attempt)

    def retry_at(
        self, message_id: int, at: datetime, error: str, attempt: int | None = None
    ) -> bool:
        return self._outbox.retry_at(message_id, at, error, attempt)

    def failed(self, message_id: int, error: str, attempt: int | None = None) -> bool:
        return self._outbox.failed(message_id, error, attempt)

    def recover(
        self, now: datetime, resend: Callable[[str], bool], *, every: bool = False
    ) -> list[Message]:
        return self._outbox.recover(now, resend, every=every)

    def messages(self, notifier: str | None = None, key_like: str | None = None) -> list[Message]:
        return self._outbox.messages(notifier, key_like)

    def pending(self) -> int:
        return self._outbox.pending()

    def announce(self, announcement: Announcement) -> int:
        return incident_paths.announce(SqlStore(self._bind), announcement)


class SqlCostModels(_Bound):
    __slots__ = ()

    def put(self, model: CostModel, now: datetime) -> bool:
        return cost_models.put_model(self._bind, model, now)

    def get(self, name: str) -> CostModel:
        return cost_models.get_model(self._engine, name)

    def find(self, name: str) -> CostModel | None:
        return cost_models.find_model(self._engine, name)

    def all(self) -> list[CostModel]:
        return cost_models.list_models(self._engine)


class SqlBudgets(_Bound):
    __slots__ = ()

    def put(self, budget: Budget, now: datetime) -> tuple[int, bool]:
        return budgets.put_budget(self._bind, budget, now)

    def all(self) -> list[Budget]:
        return budgets.list_budgets(self._engine)

    def get(self, name: str, version: int | None = None) -> Budget:
        return budgets.get_budget(self._engine, name, version)

    def versions(self, name: str) -> list[tuple[int, datetime]]:
        return budgets.versions(self._engine, name)

    def record_model(self, model: CostModel, now: datetime) -> str:
        return budgets.record_model(self._engine, model, now)

    def version_label(self, model: CostModel) -> str:
        return budgets.version_label(self._engine, model)

    def model_at(self, name: str, at: datetime) -> tuple[CostModel, str] | None:
        return budgets.model_at(self._engine, name, at)


class SqlScaling(_Bound):
    __slots__ = ()

    def put_policy(self, policy: ScalingPolicy, now: datetime) -> bool:
        return scaling.put_policy(self._bind, policy, now)

    def get_policy(self, name: str) -> ScalingPolicy:
        return scaling.get_policy(self._engine, name)

    def list_policies(self) -> list[ScalingPolicy]:
        return scaling.list_policies(self._engine)

    def delete_policy(self, name: str) -> None:
        scaling.delete_policy(self._engine, name)

    def record(self, rec: Recommendation) -> None:
        scaling.record(self._engine, rec)

    def latest(self) -> list[Recommendation]:
        return scaling.latest(self._engine)

    def history(
        self, model: str, start: datetime, end: datetime, pool: str = ""
    ) -> list[Recommendation]:
        return scaling.history(self._engine, model, start, end, pool)


class SqlBaselines(_Bound):
    __slots__ = ()

    def save(self, baseline: Baseline, *, replace: bool = False) -> bool:
        return baselines.save_baseline(self._engine, baseline, replace=replace)

    def get(self, name: str) -> Baseline:
        return baselines.get_baseline(self._engine, name)

    def all(self, limit: int | None = None) -> list[Baseline]:
        limit = baselines.MAX_LISTED if limit is None else limit
        return baselines.list_baselines(self._engine, limit)

    def delete(self, name: str) -> None:
        baselines.delete_baseline(self._engine, name)


class SqlRuns(_Bound):
    __slots__ = ()

    def save(self, run: LoadTestRun) -> int:
        return runs.save_run(self._engine, run)

    def all(self, limit: int = 100) -> list[RunListing]:
        return runs.list_runs(self._engine, limit)

    def get(self, run_id: int) -> LoadTestRun:
        return runs.get_run(self._engine, run_id)

    def delete(self, run_id: int) -> None:
        runs.delete_run(self._engine, run_id)

    def traced_calls(
        self,
        window: Window,
        aliases: ModelAliases,
        wanted: str | None,
        into: list[Side],
        max_calls: int,
    ) -> bool:
        return client_reads.traced_calls(self._engine, window, aliases, wanted, into, max_calls)


class SqlReports(_Bound):
    __slots__ = ()

    def save(
        self,
        kind: str,
        period: str,
        start: datetime,
        end: datetime,
        currency: str,
        created_at: datetime,
        summary: str,
        body: str,
        html: str,
        csv: str,
    ) -> int:
        return reports.save_report(
            self._engine, kind, period, start, end, currency, created_at, summary, body, html, csv
        )

    def all(self, kind: str | None = None, limit: int = 52) -> list[reports.ReportInfo]:
        return reports.list_reports(self._engine, kind, limit)

    def get(self, report_id: int) -> reports.StoredReport:
        return reports.get_report(self._engine, report_id)


class SqlProfiles(_Bound):
    __slots__ = ()

    def insert_request(
        self,
        instance: str,
        seconds: float,
        rate: int,
        at: datetime,
        *,
        reason: str = "manual",
        incident_id: int | None = None,
        requested_by: str = "",
    ) -> int:
        return profiles.insert_request(
            self._bind,
            instance,
            seconds,
            rate,
            at,
            reason=reason,
            incident_id=incident_id,
            requested_by=requested_by,
        )

    def expire_stale(
        self,
        now: datetime,
        instance: str | None = None,
        *,
        pending_after: timedelta | None = None,
    ) -> int:
        after = profiles.PENDING_AFTER if pending_after is None else pending_after
        with self._writing() as connection:
            return profiles.expire_stale(connection, now, instance, pending_after=after)

    def expire(self, now: datetime, instance: str | None = None) -> int:
        return profiles.expire(self._engine, now, instance)

    def claim(self, instance: str, now: datetime) -> ProfileRequest | None:
        return profiles.claim(self._engine, instance, now)

    def complete(
        self,
        profile_id: int,
        result: Mapping[str, Any] | None,
        error: str,
        now: datetime,
        *,
        instance: str,
        nonce: str,
    ) -> bool:
        return profiles.complete(
            self._engine, profile_id, result, error, now, instance=instance, nonce=nonce
        )

    def cancel(self, profile_id: int, now: datetime, by: str = "") -> Profile:
        return profiles.cancel(self._engine, profile_id, now, by)

    def prune(self, before: datetime) -> int:
        return profiles.prune(self._engine, before)

    def open_automatic(self) -> int:
        return profiles.open_automatic(self._engine)

    def get(self, profile_id: int, now: datetime | None = None) -> Profile:
        return profiles.get(self._bind, profile_id, now)

    def all(
        self,
        *,
        instance: str | None = None,
        incident_id: int | None = None,
        limit: int = 50,
        now: datetime | None = None,
    ) -> list[Profile]:
        return profiles.list_profiles(
            self._engine, instance=instance, incident_id=incident_id, limit=limit, now=now
        )

    def for_incidents(
        self, incident_ids: Iterable[int], now: datetime | None = None
    ) -> dict[int, Profile]:
        return profiles.for_incidents(self._engine, incident_ids, now)

    def open_or_recent(self, instance: str, since: datetime) -> Profile | None:
        return profiles.open_or_recent(self._engine, instance, since)


class SqlBills(_Bound):
    __slots__ = ()

    def find_import(self, sha256: str) -> int | None:
        with self._writing() as connection:
            return bills.find_import(connection, sha256)

    def add_import(
        self, name: str, sha256: str, fmt: str, mapping: dict[str, Any], now: datetime
    ) -> int:
        with self._writing() as connection:
            return bills.add_import(connection, name, sha256, fmt, mapping, now)

    def add_lines(self, import_id: int, lines: Sequence[tuple[int, str, BillLine]]) -> None:
        with self._writing() as connection:
            bills.add_lines(connection, import_id, lines)

    def finish_import(
        self,
        import_id: int,
        rows: int,
        currency: str,
        start: datetime,
        end: datetime,
        billed: Decimal,
    ) -> None:
        with self._writing() as connection:
            bills.finish_import(connection, import_id, rows, currency, start, end, billed)

    def list_imports(self, limit: int | None = None) -> list[bills.BillImport]:
        limit = bills.MAX_LIST if limit is None else limit
        return bills.list_imports(self._engine, limit)

    def imports_over(self, start: datetime, end: datetime) -> list[bills.BillImport]:
        return bills.imports_over(self._engine, start, end)

    def delete_import(self, import_id: int) -> int:
        return bills.delete_import(self._engine, import_id)

    def lines_over(self, start: datetime, end: datetime) -> Iterator[bills.StoredLine]:
        return bills.lines_over(self._engine, start, end)

    def line_count(self) -> int:
        return bills.line_count(self._engine)


class SqlSessions(_Bound):
    __slots__ = ()

    def revoke(self, cookie: str, expires_at: datetime, now: datetime) -> None:
        sessions.revoke(self._engine, cookie, expires_at, now)

    def is_revoked(self, cookie: str) -> bool:
        return sessions.is_revoked(self._engine, cookie)


class SqlResults(_Bound):
    __slots__ = ()

    def put(self, job: str, computed_at: datetime, body: str) -> None:
        job_results.put(self._bind, job, computed_at, body)

    def get(self, job: str) -> tuple[datetime, str] | None:
        return job_results.get(self._bind, job)


#: ``/healthz``'s probe: both request tables, no row (``LIMIT 0`` waits on their locks).
@cache
def _probe() -> TextClause:
    return text(
        f"SELECT (SELECT 1 FROM {tables.requests.name} LIMIT 0),"
        f" (SELECT 1 FROM {tables.request_rollups.name} LIMIT 0)"
    )


class SqlMaintenance(_Bound):
    __slots__ = ()

    def upgrade(self, revision: str = "head") -> None:
        migrate.upgrade(self._engine, revision)

    def downgrade(self, revision: str = "base") -> None:
        migrate.downgrade(self._engine, revision)

    def current(self) -> str | None:
        # ``storage.revisions``: the same answer as Alembic's, without importing Alembic.
        with self._reading() as connection:
            return revisions.current(connection)

    def maintain(self, now: datetime, policy: RetentionPolicy) -> MaintenanceReport:
        return maintenance.maintain(self._engine, now, policy)

    def contents(self) -> StoreContents:
        return contents.contents(self._engine)

    def stored_requests(self) -> int:
        return contents.stored_requests(self._engine)

    def probe(self) -> None:
        with self._reading() as connection:
            connection.execute(_probe())


# -- the store --------------------------------------------------------------------------------


class SqlStore:
    """The store over one SQLAlchemy engine (PostgreSQL or SQLite), or over one of its
    connections inside ``transaction()`` / ``reading()``. Concerns are made on first use."""

    def __init__(self, bind: Bind) -> None:
        self._bind = bind

    def __repr__(self) -> str:
        return f"SqlStore({self.describe()})"

    @property
    def engine(self) -> Engine:
        bind = self._bind
        return bind.engine if isinstance(bind, Connection) else bind

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    def describe(self) -> str:
        return redact(self.engine.url.render_as_string(hide_password=False))

    @contextmanager
    def transaction(self, *, dry_run: bool = False) -> Iterator[SqlStore]:
        bind = self._bind
        if isinstance(bind, Connection):  # nested: the caller's transaction
            if dry_run:
                raise ValueError("a dry run is a transaction of its own, not a nested one")
            yield self
            return
        with bind.connect() as connection:
            transaction = connection.begin()
            try:
                yield SqlStore(connection)
            except BaseException:
                transaction.rollback()
                raise
            if dry_run:
                transaction.rollback()
            else:
                transaction.commit()

    @contextmanager
    def reading(self) -> Iterator[SqlStore]:
        if isinstance(self._bind, Connection):
            yield self
            return
        with self._bind.connect() as connection:
            yield SqlStore(connection)

    def long_running(self, seconds: float = LONG_STATEMENT_S) -> SqlStore:
        return SqlStore(long_running(self.engine, seconds))

    def dispose(self) -> None:
        self.engine.dispose()

    @cached_property
    def ingest(self) -> SqlIngest:
        return SqlIngest(self._bind)

    @cached_property
    def requests(self) -> SqlRequests:
        return SqlRequests(self._bind)

    @cached_property
    def demand(self) -> SqlDemand:
        return SqlDemand(self._bind)

    @cached_property
    def events(self) -> SqlEvents:
        return SqlEvents(self._bind)

    @cached_property
    def samples(self) -> SqlSamples:
        return SqlSamples(self._bind)

    @cached_property
    def clients(self) -> SqlClients:
        return SqlClients(self._bind)

    @cached_property
    def cost(self) -> SqlCost:
        return SqlCost(self._bind)

    @cached_property
    def slos(self) -> SqlSlos:
        return SqlSlos(self._bind)

    @cached_property
    def incidents(self) -> SqlIncidents:
        return SqlIncidents(self._bind)

    @cached_property
    def history(self) -> SqlHistory:
        return SqlHistory(self._bind)

    @cached_property
    def silences(self) -> SqlSilences:
        return SqlSilences(self._bind)

    @cached_property
    def outbox(self) -> SqlOutbox:
        return SqlOutbox(self._bind)

    @cached_property
    def cost_models(self) -> SqlCostModels:
        return SqlCostModels(self._bind)

    @cached_property
    def budgets(self) -> SqlBudgets:
        return SqlBudgets(self._bind)

    @cached_property
    def scaling(self) -> SqlScaling:
        return SqlScaling(self._bind)

    @cached_property
    def baselines(self) -> SqlBaselines:
        return SqlBaselines(self._bind)

    @cached_property
    def runs(self) -> SqlRuns:
        return SqlRuns(self._bind)

    @cached_property
    def reports(self) -> SqlReports:
        return SqlReports(self._bind)

    @cached_property
    def profiles(self) -> SqlProfiles:
        return SqlProfiles(self._bind)

    @cached_property
    def bills(self) -> SqlBills:
        return SqlBills(self._bind)

    @cached_property
    def sessions(self) -> SqlSessions:
        return SqlSessions(self._bind)

    @cached_property
    def results(self) -> SqlResults:
        return SqlResults(self._bind)

    @cached_property
    def maintenance(self) -> SqlMaintenance:
        return SqlMaintenance(self._bind)


def open_store(url: str, *, timeouts: StoreTimeouts = DEFAULT_TIMEOUTS, **kwargs: Any) -> SqlStore:
    """The store at ``url`` (``kwargs``: ``create_store_engine``'s, e.g. the pool's size)."""
    return SqlStore(create_store_engine(url, timeouts=timeouts, **kwargs))


def open_read_store(
    url: str, *, timeouts: StoreTimeouts = DEFAULT_TIMEOUTS, **kwargs: Any
) -> SqlStore:
    """A hot standby's store: reads only, never migrated (``storage.replica``)."""
    return SqlStore(replica.create_read_engine(url, timeouts=timeouts, **kwargs))


def _conforms(store: SqlStore) -> Store:
    """For mypy: a ``SqlStore`` is a ``seam.Store``."""
    return store
