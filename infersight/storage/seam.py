"""The store seam: what the use cases (``service/``) need from a store, one protocol per concern.

``service/`` is handed a ``Store`` and calls ``store.<concern>.<method>(…)``; it imports nothing
else of ``storage`` (an import contract keeps it so). ``storage.sql_store.SqlStore`` is the one
implementation today: SQLAlchemy over PostgreSQL or SQLite, delegating to the storage modules.
A second backend implements the same protocols; docs/architecture.md ("The store seam") says
what each method must keep.

The concerns come in two kinds:

* **Telemetry** (``TELEMETRY``): the high-volume rows the sidecars write and every answer is
  read from — requests and their rollups with mergeable sketches, SLO event counts, client
  records, server / engine / GPU samples, the cost computed from them. A scale-out backend
  (ClickHouse, issue #36) replaces these.
* **State** (``STATE``): what people and jobs decide and record — SLOs, incidents and their
  history, silences, the outbox, documents (cost models, budgets, scaling policies,
  baselines), load-test runs, reports, recommendations, profiles, bills, sessions — and the
  store's maintenance. These stay in a transactional database.

Transactions. ``store.transaction()`` yields the store bound to one transaction: the state
concerns' writes made through it commit together or not at all (an incident step with its
diagnosis, history entry and notifications). ``store.reading()`` yields the store bound to one
read connection, for a run of reads (an evaluation cycle's counts). A method that does not take
part in the caller's transaction says so ("own connection"); the others join it when called on
the bound store and run in a transaction of their own otherwise.

The row and result types the protocols speak are re-exported here, so that ``service/`` names
them without importing a storage module.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from infersight.core.query import Method, Selector
from infersight.core.window import Resolution, Window

if TYPE_CHECKING:
    from sqlalchemy import Engine

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
    from infersight.storage.bills import BillImport, StoredLine
    from infersight.storage.client_reads import Pairs
    from infersight.storage.contents import StoreContents
    from infersight.storage.cost import ServerEvidence
    from infersight.storage.demand import RecordedDemand
    from infersight.storage.engine import reason, redact, transaction_pooled
    from infersight.storage.gpu_rollup import ROLLUP_GAP_S
    from infersight.storage.incident_history import Entry
    from infersight.storage.incidents import STATES, alert_state
    from infersight.storage.maintenance import MaintenanceReport
    from infersight.storage.outbox import Message, MessageState
    from infersight.storage.pools import PoolLine, disaggregated
    from infersight.storage.profiles import PENDING_AFTER, Profile
    from infersight.storage.reports import MAX_LIST as MAX_REPORTS
    from infersight.storage.reports import ReportInfo, StoredReport
    from infersight.storage.scaling_reads import DECODE, MAX_MODELS, PREFILL, BusiestPrefill, Gauges
    from infersight.storage.scaling_reads import Minute as DemandMinute
    from infersight.storage.server_engines import (
        HOT_MARGIN,
        EngineBucket,
        EngineSummary,
        ServerSummary,
    )
    from infersight.storage.signals import IncidentNote
    from infersight.storage.silences import NewSilence, Silence
    from infersight.storage.timeseries import Counts, GpuBucket, RequestPeak

#: The names this module hands on, each imported on first use (``__getattr__``): their modules
#: import numpy, SQLAlchemy's dialects, psycopg or pydantic (``core.profile``), which a command
#: that only reads one concern (``slo list``, ``db current``) does without.
_LAZY: Final = {
    "PENDING_AFTER": ("infersight.storage.profiles", "PENDING_AFTER"),
    "Profile": ("infersight.storage.profiles", "Profile"),
    "MaintenanceReport": ("infersight.storage.maintenance", "MaintenanceReport"),
    "AlertState": ("infersight.core.burn", "AlertState"),
    "BillImport": ("infersight.storage.bills", "BillImport"),
    "BusiestPrefill": ("infersight.storage.scaling_reads", "BusiestPrefill"),
    "Counts": ("infersight.storage.timeseries", "Counts"),
    "DECODE": ("infersight.storage.scaling_reads", "DECODE"),
    "DemandMinute": ("infersight.storage.scaling_reads", "Minute"),
    "EngineBucket": ("infersight.storage.server_engines", "EngineBucket"),
    "EngineSummary": ("infersight.storage.server_engines", "EngineSummary"),
    "Entry": ("infersight.storage.incident_history", "Entry"),
    "Gauges": ("infersight.storage.scaling_reads", "Gauges"),
    "GpuBucket": ("infersight.storage.timeseries", "GpuBucket"),
    "HOT_MARGIN": ("infersight.storage.server_engines", "HOT_MARGIN"),
    "IncidentNote": ("infersight.storage.signals", "IncidentNote"),
    "MAX_MODELS": ("infersight.storage.scaling_reads", "MAX_MODELS"),
    "MAX_REPORTS": ("infersight.storage.reports", "MAX_LIST"),
    "Message": ("infersight.storage.outbox", "Message"),
    "MessageState": ("infersight.storage.outbox", "MessageState"),
    "NewSilence": ("infersight.storage.silences", "NewSilence"),
    "PREFILL": ("infersight.storage.scaling_reads", "PREFILL"),
    "Pairs": ("infersight.storage.client_reads", "Pairs"),
    "PoolLine": ("infersight.storage.pools", "PoolLine"),
    "ROLLUP_GAP_S": ("infersight.storage.gpu_rollup", "ROLLUP_GAP_S"),
    "RecordedDemand": ("infersight.storage.demand", "RecordedDemand"),
    "ReportInfo": ("infersight.storage.reports", "ReportInfo"),
    "RequestPeak": ("infersight.storage.timeseries", "RequestPeak"),
    "RetentionPolicy": ("infersight.core.retention", "RetentionPolicy"),
    "STATES": ("infersight.storage.incidents", "STATES"),
    "ServerEvidence": ("infersight.storage.cost", "ServerEvidence"),
    "ServerSummary": ("infersight.storage.server_engines", "ServerSummary"),
    "Silence": ("infersight.storage.silences", "Silence"),
    "StoreContents": ("infersight.storage.contents", "StoreContents"),
    "StoredLine": ("infersight.storage.bills", "StoredLine"),
    "StoredReport": ("infersight.storage.reports", "StoredReport"),
    "alert_state": ("infersight.storage.incidents", "alert_state"),
    "disaggregated": ("infersight.storage.pools", "disaggregated"),
    "reason": ("infersight.storage.engine", "reason"),
    "redact": ("infersight.storage.engine", "redact"),
    "transaction_pooled": ("infersight.storage.engine", "transaction_pooled"),
}

__all__ = [
    "DECODE",
    "HOT_MARGIN",
    "MAX_MODELS",
    "MAX_REPORTS",
    "PENDING_AFTER",
    "PREFILL",
    "ROLLUP_GAP_S",
    "STATE",
    "STATES",
    "TELEMETRY",
    "AlertState",
    "BaselineStore",
    "BillImport",
    "BillStore",
    "BudgetStore",
    "BusiestPrefill",
    "ClientStore",
    "CostModelStore",
    "CostStore",
    "Counts",
    "DemandMinute",
    "DemandStore",
    "EngineBucket",
    "EngineSummary",
    "Entry",
    "EventCounter",
    "EventStore",
    "Evidence",
    "FinestFor",
    "Gauges",
    "GpuBucket",
    "HistoryStore",
    "IncidentNote",
    "IncidentStore",
    "IngestStore",
    "LabelKey",
    "MaintenanceReport",
    "MaintenanceStore",
    "Message",
    "MessageState",
    "NewSilence",
    "OutboxStore",
    "Pairs",
    "PoolLine",
    "Profile",
    "ProfileStore",
    "RecordedDemand",
    "ReportInfo",
    "ReportStore",
    "RequestPeak",
    "RequestStore",
    "RetentionPolicy",
    "RunStore",
    "SampleStore",
    "ScalingStore",
    "ServerEvidence",
    "ServerSummary",
    "SessionStore",
    "Silence",
    "SilenceStore",
    "SloStore",
    "Store",
    "StoreContents",
    "StoredLine",
    "StoredReport",
    "alert_state",
    "disaggregated",
    "reason",
    "redact",
    "transaction_pooled",
]


def __getattr__(name: str) -> Any:
    """The names of ``_LAZY``, imported on first use."""
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: A series' label values, in the order of the query's ``group_by``.
LabelKey = tuple[str, ...]
#: The finest rollup resolution a window may be read at, at ``now`` (``RetentionPolicy``).
FinestFor = Callable[[Window, datetime], Resolution]

#: The concerns a telemetry backend provides (the rest is state).
TELEMETRY: Final = ("ingest", "requests", "demand", "events", "samples", "clients", "cost")
#: The concerns that stay in the transactional store.
STATE: Final = (
    "slos",
    "incidents",
    "history",
    "silences",
    "outbox",
    "cost_models",
    "budgets",
    "scaling",
    "baselines",
    "runs",
    "reports",
    "profiles",
    "bills",
    "sessions",
    "results",
    "maintenance",
)


# -- telemetry --------------------------------------------------------------------------------


class IngestStore(Protocol):
    """The write side of telemetry: the sidecars' batches, exactly once."""

    def open_writer(
        self, accept: AcceptWindow | None = None, clock: Callable[[], datetime] | None = None
    ) -> Sink:
        """A ``core.write.Sink`` for request records, client records, server and GPU samples,
        trace links and late sequences. A batch commits whole or not at all; a batch written
        twice (a replay after a crash) changes nothing the second time (each row's key:
        instance, trace and span id, start); rollups and their sketches include every
        committed request exactly once."""
        ...


class RequestStore(Protocol):
    """Requests and their minute / hour / day rollups (with mergeable sketches): reads."""

    def latency(
        self,
        metric: str,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        quantiles: Sequence[float] = ...,
        method: Method = Method.AUTO,
        *,
        finest: Resolution = Resolution.MINUTE,
        exact_max_rows: int = ...,
    ) -> LatencyResult:
        """Quantiles of ``metric`` per group: exact from raw rows when the window holds at most
        ``exact_max_rows`` requests (``Method.AUTO``), else from merged sketches (stating
        ``method`` and ``relative_error``)."""
        ...

    def latencies(
        self,
        metrics: Sequence[str],
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        quantiles: Sequence[float] = ...,
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> dict[str, LatencyResult]:
        """Sketch quantiles of several metrics read in one pass."""
        ...

    def throughput(
        self,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[Throughput]: ...

    def data_span(
        self, window: Window, selector: Selector = Selector(), *, finest: Resolution = ...
    ) -> Window | None:
        """The part of ``window`` that holds requests (first to last)."""
        ...

    def breakdown(
        self,
        window: Window,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[Breakdown]: ...

    def series(
        self,
        window: Window,
        step: Resolution,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        coarsest: Resolution | None = None,
        bucket_s: int | None = None,
    ) -> dict[LabelKey, dict[datetime, Counts]]:
        """Counts per time bucket (``bucket_s``, aligned to the epoch) and group."""
        ...

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
        """Merged sketches per metric, group and time bucket."""
        ...

    def peaks(
        self, window: Window, step: Resolution, selector: Selector = Selector()
    ) -> dict[str, RequestPeak]:
        """Per model: its busiest ``step`` bucket's requests (its instances added up), the
        requests of all its buckets, its first and last bucket and its instances."""
        ...

    def label_sets(self, window: Window, step: Resolution = Resolution.HOUR) -> list[LabelKey]:
        """The (model, instance, tenant, …) label sets seen in ``window``."""
        ...

    def first_seen(self, since: datetime, now: datetime) -> dict[LabelKey, datetime]: ...

    def pool_summaries(
        self, window: Window, finest: Resolution = Resolution.MINUTE
    ) -> list[PoolLine]:
        """Per model and pool: requests, latency and tokens, prefill legs included."""
        ...

    def production_capacity(
        self,
        window: Window,
        selector: Selector,
        *,
        ttft_p99_max_s: float | None = None,
        tpot_p99_max_s: float | None = None,
        instances: Collection[str] | None = None,
    ) -> MeasuredCapacity: ...

    def production_shapes(
        self, window: Window, selector: Selector, limit: int = 10000
    ) -> list[tuple[int, int]]:
        """(input tokens, output tokens) of recent requests, for a load test's replay."""
        ...

    def window_signals(
        self,
        window: Window,
        selector: Selector = Selector(),
        aliases: ModelAliases | None = None,
    ) -> WindowSignals:
        """The diagnosis's evidence over a window: request, server, GPU and client signals."""
        ...

    def error_types(
        self, window: Window, selector: Selector = Selector()
    ) -> dict[str, dict[str, int]]: ...

    def capture_baseline(
        self,
        name: str,
        window: Window,
        selector: Selector,
        created_at: datetime,
        *,
        description: str = "",
        finest: Resolution = Resolution.MINUTE,
        exact_max_rows: int = ...,
        cost_model: CostModel | None = None,
    ) -> Baseline:
        """A baseline measured from a window of production (not stored)."""
        ...


class DemandStore(Protocol):
    """Demand per model and minute (rollups), for the recommender and the forecasts."""

    def models_seen(self, window: Window) -> list[str]: ...

    def minute_demand(self, model: str, window: Window) -> list[DemandMinute]: ...

    def peak_rate(self, model: str, window: Window) -> float | None: ...

    def pool_members(
        self, window: Window, model: str | None = None
    ) -> dict[str, dict[str, frozenset[str]]]:
        """model → {``PREFILL``: instances, ``DECODE``: instances}."""
        ...

    def busiest_prefill_minute(
        self,
        model: str,
        window: Window,
        queue_max_s: float,
        instances: Collection[str] | None = None,
    ) -> BusiestPrefill | None: ...

    def day_minutes(self, model: str, day: date) -> list[float]: ...

    def recorded_demand(self, model: str, day: date, weeks: int = 4) -> RecordedDemand: ...

    def busiest_models(self, day: date, limit: int = 20) -> Sequence[str]: ...


class EventCounter(Protocol):
    """One evaluation cycle's counts at one ``now`` (an incremental reader)."""

    def prepare(self, windows: Iterable[timedelta], slis: Iterable[Sli] = ()) -> None: ...

    def count(
        self, spec: SloSpec, windows: Iterable[timedelta]
    ) -> dict[timedelta, EventCounts]: ...


class EventStore(Protocol):
    """SLO events (good / bad / total) counted from requests and rollups."""

    def count(
        self,
        sli: Sli,
        window: Window,
        selector: Selector = Selector(),
        *,
        exact: bool = False,
        finest: Resolution = Resolution.MINUTE,
    ) -> EventCounts:
        """The events of ``window`` (``exact``: from raw rows only)."""
        ...

    def cycle(
        self,
        now: datetime,
        finest_for: FinestFor | None = None,
        cache: object | None = None,
        *,
        cached: bool = True,
    ) -> AbstractContextManager[EventCounter]:
        """A counter for one cycle at ``now``, over one read connection while it is open.
        Rollup rows decoded in one cycle are kept for the next in ``cache`` (one from
        ``new_cache``; by default the process's cache for this store); ``cached=False``: none
        (a short-lived command that counts once). The counts are the same either way."""
        ...

    def new_cache(self) -> object:
        """A cache of decoded rollup rows of its own (a benchmark's cold start)."""
        ...

    def goodput_misses(
        self, sli: Sli, window: Window, selector: Selector = Selector()
    ) -> dict[str, int]: ...


class SampleStore(Protocol):
    """Server, per-engine and GPU samples and the GPU rollups."""

    def server_summaries(
        self, window: Window, instances: Sequence[str] | None = None
    ) -> list[ServerSummary]: ...

    def engine_summaries(
        self, window: Window, instances: Sequence[str] | None = None
    ) -> list[EngineSummary]: ...

    def engine_series(
        self, window: Window, step_s: int, instances: Sequence[str] | None = None
    ) -> list[EngineBucket]: ...

    def server_gauges(
        self, model: str, window: Window, instances: Collection[str] | None = None
    ) -> Gauges: ...

    def server_evidence(self, window: Window) -> dict[str, ServerEvidence]: ...

    def gpu_utilisation(
        self, instances: Sequence[str], window: Window
    ) -> tuple[float | None, datetime | None]:
        """Mean GPU utilisation of ``instances`` and the newest sample's time."""
        ...

    def gpu_utilization_of(
        self, window: Window, selector: Selector, finest: Resolution = Resolution.MINUTE
    ) -> float | None:
        """Mean GPU utilisation of the instances that served ``selector``'s requests."""
        ...

    def gpu_series(
        self,
        window: Window,
        step_s: int,
        instances: Sequence[str] | None = None,
        finest: Resolution = Resolution.MINUTE,
        *,
        raw_only: bool = False,
    ) -> list[GpuBucket]: ...

    def hourly_gpu_usage(self, start: datetime, end: datetime) -> list[GpuHour]: ...


class ClientStore(Protocol):
    """Client records (and load-test requests) joined to server records by trace id."""

    def read_pairs(
        self,
        window: Window,
        aliases: ModelAliases,
        *,
        model: str | None = None,
        tenant: str | None = None,
        max_calls: int = ...,
    ) -> Pairs: ...


class CostStore(Protocol):
    """Cost computed from GPU time and requests under a cost model."""

    def cost(
        self,
        window: Window,
        model: CostModel,
        selector: Selector = Selector(),
        group_by: Sequence[str] = (),
        *,
        finest: Resolution = Resolution.MINUTE,
        slos: Sequence[SloSpec] | None = None,
    ) -> CostResult: ...

    def good_policy(
        self, model: CostModel, slos: Sequence[SloSpec] | None = None
    ) -> GoodPolicy: ...

    def idle_method(
        self, floor: float, window: Window, gap: float = ..., finest: Resolution = ...
    ) -> str:
        """How idle GPU time over ``window`` is measured (raw samples, or rollup bins)."""
        ...


# -- state ------------------------------------------------------------------------------------


class SloStore(Protocol):
    def put(self, spec: SloSpec, now: datetime) -> bool:
        """Create or replace ``spec``; ``True`` when it was created (joins the transaction)."""
        ...

    def get(self, name: str) -> SloSpec: ...

    def all(self) -> list[SloSpec]: ...

    def delete(self, name: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Evidence:
    """What ``alerts.lifecycle.decide`` may ask about an incident, read at once
    (``IncidentStore.evidence``)."""

    #: The incident as stored now (the page tells it so).
    incident: Incident
    note: IncidentNote | None
    #: Its newest history entry, and its newest entry with a diagnosis.
    last: Entry | None
    prior: Entry | None
    #: The last incident of its SLO and scope before it (``IncidentStore.previous``).
    before: Incident | None
    #: Its SLO; ``None`` once deleted.
    spec: SloSpec | None


class IncidentStore(Protocol):
    """Incident rows (one per alert of an SLO and scope) and their notes (diagnosis, ack)."""

    def firing(self, slo: str, scope: str) -> Incident | None:
        """The open incident of ``slo`` and ``scope`` (joins the transaction)."""
        ...

    def all_firing(self) -> dict[tuple[str, str], Incident]:
        """Every open incident by (SLO, scope) (joins the transaction)."""
        ...

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
        """Write what ``core.burn.step`` decided (joins the transaction)."""
        ...

    def resolve(self, incident_ids: Iterable[int], now: datetime) -> list[Incident]: ...

    def resolve_all(self, slo: str, now: datetime) -> list[Incident]: ...

    def get(self, incident_id: int) -> Incident:
        """Own connection."""
        ...

    def previous(self, incident: Incident) -> Incident | None:
        """The last resolved incident of the same SLO and scope (own connection)."""
        ...

    def all(self, state: str = "all", limit: int = 500) -> list[Incident]:
        """Own connection."""
        ...

    def save_diagnosis(
        self,
        incident_id: int,
        symptom: Mapping[str, Any],
        diagnosis: Mapping[str, Any],
        at: datetime,
    ) -> None:
        """Joins the transaction."""
        ...

    def acknowledge(self, incident_id: int, by: str, at: datetime) -> IncidentNote: ...

    def notes(self, incident_ids: Iterable[int]) -> dict[int, IncidentNote]:
        """Own connection."""
        ...

    def evidence(self, incident_id: int) -> Evidence:
        """All that the lifecycle may ask about the incident, in one call."""
        ...

    def apply(self, incident_id: int, writes: IncidentWrites) -> int:
        """A decision's writes in one transaction (joins the caller's); the messages
        enqueued."""
        ...


class HistoryStore(Protocol):
    """An incident's history (verdicts, causes, diagnoses) and its burn-rate points."""

    def append(
        self,
        incident_id: int,
        at: datetime,
        verdict: str,
        cause: str,
        diagnosis: Mapping[str, Any] | None = None,
    ) -> None:
        """Joins the transaction."""
        ...

    def entries(self, incident_id: int) -> list[Entry]: ...

    def last_diagnosis(self, incident_id: int) -> Entry | None: ...

    def latest(self, incident_ids: Iterable[int]) -> dict[int, Entry]: ...

    def onsets(self, incident_ids: Iterable[int]) -> dict[int, Entry]: ...

    def burn_points(self, incident_id: int) -> list[tuple[datetime, dict[str, float]]]: ...


class SilenceStore(Protocol):
    def add(self, silence: NewSilence, now: datetime) -> Silence: ...

    def expire(self, silence_id: int, now: datetime) -> None: ...

    def active(self, now: datetime) -> list[Silence]: ...

    def silenced(self, labels: Mapping[str, str], now: datetime) -> bool: ...


class OutboxStore(Protocol):
    """Notifications to send, each once per (notifier, key), claimed before sending."""

    def enqueue(
        self,
        notifier: str,
        key: str,
        payload: str,
        now: datetime,
        not_before: datetime | None = None,
    ) -> bool:
        """Joins the transaction; ``False`` when (notifier, key) is queued already."""
        ...

    def cancel_pending(self, notifier: str, key_like: str) -> int:
        """Joins the transaction."""
        ...

    def announce(self, announcement: Announcement) -> int:
        """Enqueue a notification's messages (joins the transaction); the messages enqueued."""
        ...

    def keys_like(self, key_like: str) -> set[tuple[str, str]]: ...

    def due(self, now: datetime, limit: int = 100) -> list[Message]: ...

    def claim(self, message_id: int, now: datetime) -> int | None: ...

    def delivered(self, message_id: int, now: datetime, attempt: int | None = None) -> bool: ...

    def retry_at(
        self, message_id: int, at: datetime, error: str, attempt: int | None = None
    ) -> bool: ...

    def failed(self, message_id: int, error: str, attempt: int | None = None) -> bool: ...

    def recover(
        self, now: datetime, resend: Callable[[str], bool], *, every: bool = False
    ) -> list[Message]: ...

    def messages(
        self, notifier: str | None = None, key_like: str | None = None
    ) -> list[Message]: ...

    def pending(self) -> int: ...


class CostModelStore(Protocol):
    def put(self, model: CostModel, now: datetime) -> bool:
        """Create or replace ``model``; ``True`` when it was created (joins the transaction)."""
        ...

    def get(self, name: str) -> CostModel: ...

    def find(self, name: str) -> CostModel | None: ...

    def all(self) -> list[CostModel]: ...


class BudgetStore(Protocol):
    """Budgets (versioned) and the cost model's versions they are judged under."""

    def put(self, budget: Budget, now: datetime) -> tuple[int, bool]:
        """Store ``budget`` as its name's next version unless it equals the newest: the version
        in force and whether it is new (joins the transaction)."""
        ...

    def all(self) -> list[Budget]: ...

    def get(self, name: str, version: int | None = None) -> Budget: ...

    def versions(self, name: str) -> list[tuple[int, datetime]]: ...

    def record_model(self, model: CostModel, now: datetime) -> str: ...

    def version_label(self, model: CostModel) -> str: ...

    def model_at(self, name: str, at: datetime) -> tuple[CostModel, str] | None: ...


class ScalingStore(Protocol):
    """Scaling policies (documents) and the recommendations made under them."""

    def put_policy(self, policy: ScalingPolicy, now: datetime) -> bool:
        """Create or replace; ``True`` when created; two policies for one model are refused
        (joins the transaction)."""
        ...

    def get_policy(self, name: str) -> ScalingPolicy: ...

    def list_policies(self) -> list[ScalingPolicy]: ...

    def delete_policy(self, name: str) -> None: ...

    def record(self, rec: Recommendation) -> None: ...

    def latest(self) -> list[Recommendation]: ...

    def history(
        self, model: str, start: datetime, end: datetime, pool: str = ""
    ) -> list[Recommendation]: ...


class BaselineStore(Protocol):
    def save(self, baseline: Baseline, *, replace: bool = False) -> bool: ...

    def get(self, name: str) -> Baseline: ...

    def all(self, limit: int = ...) -> list[Baseline]: ...

    def delete(self, name: str) -> None: ...


class RunStore(Protocol):
    """Load-test runs and their per-request results."""

    def save(self, run: LoadTestRun) -> int: ...

    def all(self, limit: int = 100) -> list[RunListing]: ...

    def get(self, run_id: int) -> LoadTestRun: ...

    def delete(self, run_id: int) -> None: ...

    def traced_calls(
        self,
        window: Window,
        aliases: ModelAliases,
        wanted: str | None,
        into: list[Side],
        max_calls: int,
    ) -> bool:
        """Append the requests of load-test runs sent within ``window`` that kept a trace id
        (model ``wanted`` by its aliases, or any) to ``into`` as client calls, until it holds
        ``max_calls``; whether that cap cut them short (the client–server gap reads them
        beside the client records)."""
        ...


class ReportStore(Protocol):
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
    ) -> int: ...

    def all(self, kind: str | None = None, limit: int = 52) -> list[ReportInfo]: ...

    def get(self, report_id: int) -> StoredReport: ...


class ProfileStore(Protocol):
    """Profiles of serving processes: requested, claimed by a sidecar, completed or expired."""

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
        """Joins the transaction."""
        ...

    def expire_stale(
        self,
        now: datetime,
        instance: str | None = None,
        *,
        pending_after: timedelta | None = None,
    ) -> int:
        """Joins the transaction (``pending_after``: the store's default when ``None``)."""
        ...

    def expire(self, now: datetime, instance: str | None = None) -> int: ...

    def claim(self, instance: str, now: datetime) -> ProfileRequest | None: ...

    def complete(
        self,
        profile_id: int,
        result: Mapping[str, Any] | None,
        error: str,
        now: datetime,
        *,
        instance: str,
        nonce: str,
    ) -> bool: ...

    def cancel(self, profile_id: int, now: datetime, by: str = "") -> Profile: ...

    def prune(self, before: datetime) -> int: ...

    def open_automatic(self) -> int: ...

    def get(self, profile_id: int, now: datetime | None = None) -> Profile:
        """Joins the transaction."""
        ...

    def all(
        self,
        *,
        instance: str | None = None,
        incident_id: int | None = None,
        limit: int = 50,
        now: datetime | None = None,
    ) -> list[Profile]: ...

    def for_incidents(
        self, incident_ids: Iterable[int], now: datetime | None = None
    ) -> dict[int, Profile]: ...

    def open_or_recent(self, instance: str, since: datetime) -> Profile | None: ...


class BillStore(Protocol):
    """Cloud bills (FOCUS) imported all or nothing: the writes join the transaction."""

    def find_import(self, sha256: str) -> int | None: ...

    def add_import(
        self, name: str, sha256: str, fmt: str, mapping: dict[str, Any], now: datetime
    ) -> int: ...

    def add_lines(self, import_id: int, lines: Sequence[tuple[int, str, BillLine]]) -> None: ...

    def finish_import(
        self,
        import_id: int,
        rows: int,
        currency: str,
        start: datetime,
        end: datetime,
        billed: Decimal,
    ) -> None: ...

    def list_imports(self, limit: int = ...) -> list[BillImport]: ...

    def imports_over(self, start: datetime, end: datetime) -> list[BillImport]: ...

    def delete_import(self, import_id: int) -> int: ...

    def lines_over(self, start: datetime, end: datetime) -> Iterator[StoredLine]: ...

    def line_count(self) -> int: ...


class SessionStore(Protocol):
    """Revoked dashboard sessions (by a digest of the cookie, never the cookie)."""

    def revoke(self, cookie: str, expires_at: datetime, now: datetime) -> None: ...

    def is_revoked(self, cookie: str) -> bool: ...


class ResultStore(Protocol):
    """The scheduled jobs' last results (JSON), one per job, shared by every worker."""

    def put(self, job: str, computed_at: datetime, body: str) -> None:
        """Keep ``body`` as job ``job``'s last result (joins the transaction)."""
        ...

    def get(self, job: str) -> tuple[datetime, str] | None: ...


class MaintenanceStore(Protocol):
    """The schema and the data's lifetime."""

    def upgrade(self, revision: str = "head") -> None: ...

    def downgrade(self, revision: str = "base") -> None: ...

    def current(self) -> str | None: ...

    def maintain(self, now: datetime, policy: RetentionPolicy) -> MaintenanceReport:
        """Partitions ahead, retention (raw rows, rollups per resolution, samples, profiles),
        rollup compaction where the backend needs it."""
        ...

    def contents(self) -> StoreContents:
        """How many requests (and their first and last start), incidents and load-test runs
        the store holds — nothing where it has no schema yet (own connection; any other error
        is raised, never taken for an empty store): ``infersight demo`` plays only into a store
        of its own."""
        ...

    def stored_requests(self) -> int:
        """How many request records the store holds (own connection): the live demo's
        progress line."""
        ...

    def probe(self) -> None:
        """Read the request tables without reading a row (``/healthz``): it waits on their
        locks as a query would, and raises the store's error when it cannot be read."""
        ...


# -- the store --------------------------------------------------------------------------------


class Store(Protocol):
    """What ``service/`` is handed: the store's concerns, one attribute each."""

    @property
    def ingest(self) -> IngestStore: ...
    @property
    def requests(self) -> RequestStore: ...
    @property
    def demand(self) -> DemandStore: ...
    @property
    def events(self) -> EventStore: ...
    @property
    def samples(self) -> SampleStore: ...
    @property
    def clients(self) -> ClientStore: ...
    @property
    def cost(self) -> CostStore: ...
    @property
    def slos(self) -> SloStore: ...
    @property
    def incidents(self) -> IncidentStore: ...
    @property
    def history(self) -> HistoryStore: ...
    @property
    def silences(self) -> SilenceStore: ...
    @property
    def outbox(self) -> OutboxStore: ...
    @property
    def cost_models(self) -> CostModelStore: ...
    @property
    def budgets(self) -> BudgetStore: ...
    @property
    def scaling(self) -> ScalingStore: ...
    @property
    def baselines(self) -> BaselineStore: ...
    @property
    def runs(self) -> RunStore: ...
    @property
    def reports(self) -> ReportStore: ...
    @property
    def profiles(self) -> ProfileStore: ...
    @property
    def bills(self) -> BillStore: ...
    @property
    def sessions(self) -> SessionStore: ...
    @property
    def results(self) -> ResultStore: ...
    @property
    def maintenance(self) -> MaintenanceStore: ...

    @property
    def engine(self) -> Engine:
        """The SQL (state) store's engine, for the paths that need SQL itself: the leader's
        advisory lock, the health probe, the standby's lag. Not for reads or writes."""
        ...

    @property
    def dialect(self) -> str:
        """The state store's SQL dialect (``postgresql`` or ``sqlite``)."""
        ...

    def describe(self) -> str:
        """The store's URL(s) with passwords hidden, for logs and errors."""
        ...

    def transaction(self, *, dry_run: bool = False) -> AbstractContextManager[Store]:
        """The store bound to one transaction: the state writes made through it commit
        together when the block ends, or roll back when it raises; ``dry_run``: they roll
        back either way (seen inside the block: what applying would do, nothing stored).
        Inside a transaction, ``transaction()`` is the caller's."""
        ...

    def reading(self) -> AbstractContextManager[Store]:
        """The store bound to one read connection, for a run of reads."""
        ...

    def long_running(self) -> Store:
        """The same store with the long statement timeout (jobs' reads over weeks)."""
        ...

    def dispose(self) -> None:
        """Close the store's connections."""
        ...
