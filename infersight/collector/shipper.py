"""The shipper: drains the spool into the store through the storage bulk writer.

Records become eligible once their reassembly window has passed; the stage fragments of
their traces that are their own are merged in (``collector.assembly``: a request's stages are
its span's descendants in its service), the batch is written idempotently (the store ignores
keys it has), and only then are the entries deleted from the spool, with the fragments that
were merged or refused (refusals are counted by reason); fragments still waiting for a parent
stay. A store that is down is retried forever with backoff (5 s × 1.5, capped at 30 s), so an
outage only grows the spool. Stage fragments whose request never arrives are dropped (and
counted) after the orphan TTL (``Reassembly.orphan_ttl_s``); links (spans kept only for their
place in a trace) expire with them, uncounted.

Cadence: every pass costs the store a fixed amount of work (a transaction, the rollup rows of
each series read, merged and rewritten) besides its per-record cost, so a pass that stored
records is followed by the next one no sooner than ``idle_s`` after it started, unless a
whole batch is waiting. Within that bound a pass starts as soon as the oldest waiting record
becomes eligible: an OpenTelemetry SDK exports a few large batches (512 spans every few
seconds), and each is shipped the moment its reassembly window ends, in one pass, instead of
waiting for the next tick of a fixed timer. GPU and server samples have no such deadline and
are shipped every ``samples_every_s`` (the store merges each batch of a GPU's samples into its
rollups at a fixed cost, whatever the batch's size), and whenever the shipper drains.

Health tells a slow or stuck store from a working one (``health``): ``last_shipped_at`` moves
only on a real round trip to the store (a batch written, or, while nothing is to be shipped,
a probe: the sink's ``ping``, a ``SELECT 1``, every ``probe_every_s`` and on every pass while
failing), so an idle outage reads degraded like a busy one; and the answer is degraded with
"store slow" when the ship lag exceeds ``slow_after_s`` or one pass has waited on the store
longer than that (a watchdog read from memory: the pass itself may be blocked on a lock).

The parts: ``ShipPolicy`` is the tuning (cadence, batch, backoff, probes, the writer's opening),
fixed at construction; ``Conveyor`` moves due spool entries of each kind into the sink and
counts the store's answers; ``LateFold`` folds parallel sampling's late sequences into stored
requests; ``ShipHealth`` is what ``/metrics`` and ``/healthz`` read; ``Shipper`` decides when a
pass runs, opens the writer, backs off and drains, and is what the sidecar holds.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from infersight.collector.assembly import Piece, Reassembly, Request, SequenceMemory, assemble
from infersight.collector.codec import (
    Kind,
    decode_attribution,
    decode_client,
    decode_gpu,
    decode_piece,
    decode_placed,
    decode_server,
)
from infersight.collector.mapping import Link
from infersight.collector.metrics import CollectorMetrics
from infersight.collector.remote_sink import RETRY_FOLD_S, FoldUnsupported
from infersight.collector.spool import Spool, Stored
from infersight.core.attribution import Attribution
from infersight.core.client import ClientRecord
from infersight.core.errors import ConfigurationError, InvalidInput, InvalidRecord, Unavailable
from infersight.core.records import RequestRecord
from infersight.core.sequences import LateSequence
from infersight.core.wire import KindUnsupported
from infersight.core.write import AttributionSink, ClientSink, Sink, WriteResult

log = logging.getLogger(__name__)

#: The most trace pieces (stage fragments and links) of one trace read in a shipping pass:
#: a request's own stage spans are far fewer (SGLang's decode slices of a long answer are a
#: few thousand); beyond it a flooded trace's pieces wait and expire, and memory stays bounded.
MAX_PIECES_PER_TRACE: Final = 20_000


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float = 5.0
    factor: float = 1.5
    cap_s: float = 30.0

    def __post_init__(self) -> None:
        if self.initial_s < 0 or self.factor < 1 or self.cap_s < self.initial_s:
            raise ConfigurationError("backoff needs initial ≥ 0, factor ≥ 1, cap ≥ initial")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th consecutive failure (0-based)."""
        return float(min(self.cap_s, self.initial_s * self.factor ** min(attempt, 64)))


@dataclass(frozen=True, slots=True)
class ShipResult:
    ok: bool
    shipped: int = 0
    retryable: bool = False
    error: str = ""
    #: When the oldest record left in the spool becomes eligible (``None``: none is left).
    next_ready_at: float | None = None
    #: Spool entries of request records among ``shipped``.
    records: int = 0


#: Seconds between refreshes of the shipper's gauges while it waits (backoff, idle).
REFRESH_S: Final = 1.0
#: Default bound of a healthy ship lag, and of one pass's wait on the store.
SLOW_AFTER_S: Final = 30.0
#: Default seconds between probes of the store while nothing is to be shipped.
PROBE_EVERY_S: Final = 10.0
#: Words of a store error that says it was too slow, not away (a statement, lock or pool
#: timeout; SQLite's busy timeout).
_SLOW_WORDS: Final = ("timeout", "timed out", "canceling statement", "database is locked")


@runtime_checkable
class Probe(Protocol):
    """A sink that can ask the store for one cheap, bounded round trip (``SELECT 1``),
    raising ``Unavailable`` when it does not answer (``storage.writer``'s writers)."""

    def ping(self) -> None: ...


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class ShipPolicy:
    """When the shipper ships, backs off, probes the store and builds its writer: its tuning,
    fixed for its life (the sidecar sets it from ``SidecarConfig``)."""

    backoff: Backoff = field(default_factory=Backoff)
    #: Most spool entries of one kind read in one pass; a pass that shipped this many is
    #: followed by the next at once (a backlog).
    batch_size: int = 2000
    #: Least time from the start of a pass that stored records to the next pass, while
    #: less than a batch is waiting.
    idle_s: float = 1.0
    #: Most time between passes while records wait for their window (samples, orphans and
    #: gauges are handled on every pass); never less than ``idle_s``.
    max_idle_s: float = 10.0
    #: Least time between two passes that ship samples (0: every pass).
    samples_every_s: float = 0.0
    #: Health says "store slow" beyond this lag, or this long a wait in one pass.
    slow_after_s: float = SLOW_AFTER_S
    #: Least time between probes of the store while nothing is shipped.
    probe_every_s: float = PROBE_EVERY_S
    #: A sink given as a factory is built once ``open_when()`` holds, or this long after the
    #: shipper's thread started (``Shipper``'s ``open_when``).
    open_delay_s: float = 0.0

    def __post_init__(self) -> None:
        pauses = (self.idle_s, self.samples_every_s, self.probe_every_s, self.open_delay_s)
        if not all(pause >= 0 for pause in pauses):
            raise ConfigurationError("the shipper's pauses must not be negative")
        if not self.slow_after_s > 0:
            raise ConfigurationError("the shipper's slow-store bound must be positive")
        if self.batch_size < 1:
            raise ConfigurationError("the shipper's batch size must be at least 1")
        if not self.max_idle_s >= self.idle_s:
            object.__setattr__(self, "max_idle_s", self.idle_s)

    def idle_delay(
        self, started: float, next_ready_at: float | None, shipped_records: bool, now: float
    ) -> float:
        """Seconds from ``now`` to the next pass, for a pass that started at ``started``: when
        the oldest waiting record becomes eligible, but no later than ``max_idle_s`` after
        that start and, if this pass stored records, no sooner than ``idle_s`` after it
        (``idle_s`` when no record waits). A pass that stored none cost the store nothing,
        so it does not hold back the next one."""
        earliest = started + self.idle_s
        wake = earliest
        if next_ready_at is not None:
            wake = min(started + self.max_idle_s, next_ready_at)
            if shipped_records:
                wake = max(earliest, wake)
        return max(0.0, wake - now)

    def samples_due(self, now: float, shipped_at: float) -> bool:
        """Whether samples are shipped in a pass at ``now``, the last shipped at ``shipped_at``."""
        return now - shipped_at >= self.samples_every_s


class ShipHealth:
    """What ``/metrics`` and ``/healthz`` say of shipping, true at any moment and read from
    memory only (the shipper's thread may be blocked on the store): the oldest eligible times
    (refreshed after every pass, failed or not, and every ``REFRESH_S`` while waiting; the
    lag is computed from them when it is read), since when shipping fails and why, when the
    store last answered, and since when a pass has been waiting on it."""

    def __init__(self, spool: Spool, clock: Callable[[], float], policy: ShipPolicy) -> None:
        self._spool = spool
        self._clock = clock
        self._policy = policy
        self.record_ready_at: float | None = None
        self.sample_ready_at: float | None = None
        self.failing_since: float | None = None
        self.last_error = ""
        self.last_error_at: float | None = None
        self.last_success_at: float | None = None
        #: ``time.monotonic()`` when the pass in flight started (``None``: none is).
        self.in_flight_since: float | None = None

    def lag(self) -> float:
        """How long the oldest eligible entry has waited (samples: beyond their interval)."""
        now = self._clock()
        lags = [0.0]
        if self.record_ready_at is not None:
            lags.append(now - self.record_ready_at)
        if self.sample_ready_at is not None:
            lags.append(now - self.sample_ready_at - self._policy.samples_every_s)
        return max(lags)

    def in_flight_s(self) -> float:
        """How long the pass in flight has run (0: none is)."""
        started = self.in_flight_since
        return 0.0 if started is None else max(0.0, time.monotonic() - started)

    def report(self, opened: bool) -> dict[str, Any]:
        """The shipping part of ``/healthz``: ``status`` is present only when degraded;
        ``opened``: whether the store writer exists yet."""
        lag, waited = self.lag(), self.in_flight_s()
        slow_after_s = self._policy.slow_after_s
        state: dict[str, Any] = {
            "ship_lag_seconds": round(lag, 3),
            "ship_in_flight_seconds": round(waited, 3),
            "shipping": "ok",
            "last_shipped_at": _iso(self.last_success_at) if self.last_success_at else None,
            "last_error": self.last_error or None,
            "last_error_at": _iso(self.last_error_at) if self.last_error_at else None,
        }
        if waited > slow_after_s:
            state["shipping"] = "slow"
            state["status"] = (
                f"degraded: store slow: one shipping pass has waited {waited:.0f} s on it "
                f"(ship lag {lag:.0f} s)"
            )
        elif self.failing_since is not None:
            state["shipping"] = "failing"
            slow = any(word in self.last_error.lower() for word in _SLOW_WORDS)
            state["status"] = (
                f"degraded: {'store slow: ' if slow else ''}cannot ship since "
                f"{_iso(self.failing_since)} ({self.last_error})"
            )
        elif lag > slow_after_s and opened:
            state["shipping"] = "slow"
            state["status"] = (
                f"degraded: store slow: ship lag {lag:.0f} s is over {slow_after_s:.0f} s"
            )
        elif not opened:
            state["shipping"] = "starting"
        return state

    def refresh(self) -> None:
        """Re-read the oldest eligible times from the spool (cheap: two indexed lookups)."""
        try:
            self.record_ready_at = self._spool.oldest_ready_at(
                [Kind.RECORD, Kind.CLIENT, Kind.ATTRIBUTION]
            )
            self.sample_ready_at = self._spool.oldest_ready_at([Kind.GPU, Kind.SERVER])
        except sqlite3.Error:  # the loop outlives a spool error; the last values stand
            log.exception("cannot read the spool's oldest entries")

    def failed(self, now: float, error: str) -> None:
        if self.failing_since is None:
            self.failing_since = now
        self.last_error, self.last_error_at = error, now
        self.refresh()

    def passed(self, now: float, answered: bool, at_its_word: bool) -> None:
        """A pass went through: the store ``answered`` (a round trip), or the sink is taken
        ``at_its_word`` (one that cannot be probed)."""
        if answered or at_its_word:
            if self.failing_since is not None:
                log.warning("shipping again after failing since %s", _iso(self.failing_since))
            self.failing_since = None
        if answered:
            self.last_success_at = now


class LateFold:
    """Parallel sampling's late sequences (``assembly.SequenceMemory``), folded into the
    requests stored already where the sink folds (the store writer's ``fold_sequences``);
    where the sink refuses (an API older than the fold, or a batch it finds malformed) they
    are stored as requests of their own, as before there was a fold: nothing is lost, nothing
    is added twice (keyed rows). The memory of stored requests is kept in the spool too, so
    that a restart forgets none."""

    def __init__(
        self,
        spool: Spool,
        metrics: CollectorMetrics,
        clock: Callable[[], float],
        window_s: float,
    ) -> None:
        self.metrics = metrics
        self._clock = clock
        self.sequences = SequenceMemory(clock=clock, store=spool)
        #: Records that became eligible before this were spooled before this process started
        #: (their window ended by then): they may be replays of records folded already.
        self._replays_before = clock() + window_s
        #: Until when the sink is taken not to fold (an API older than the fold refused it).
        self._retry_at = float("-inf")

    @staticmethod
    def folds(sink: Sink | None) -> bool:
        return sink is not None and hasattr(sink, "fold_sequences")

    def split(
        self,
        sink: Sink | None,
        stored: list[Stored],
        records: list[RequestRecord],
        requests: list[Request],
    ) -> tuple[list[RequestRecord], list[LateSequence]]:
        """``records`` to store and the late sequences among them, when the sink folds; and,
        for records spooled before this process started, without those a fold stored already
        (a replay after a crash)."""
        if not self.folds(sink):
            return records, []
        if any(s.ready_at <= self._replays_before for s in stored):
            keys = [
                (r.record.trace_id, r.record.span_id)
                for r in requests
                if r.place is not None and r.place.request_id
            ]
            done = getattr(sink, "folded")(keys) if keys else set()  # noqa: B009 (not in Sink)
            if done:
                records = [r for r in records if (r.trace_id, r.span_id) not in done]
        return self.sequences.split(records, requests)

    def fold(self, sink: Sink, late: list[LateSequence]) -> tuple[bool, list[RequestRecord]]:
        """Fold ``late`` into the stored requests: whether the store answered, and the records
        to store as requests of their own (those it refused, or all while it is taken not to
        fold)."""
        apart = [fold.record for fold in late]
        if self._clock() < self._retry_at:
            return False, apart
        try:
            result = sink.fold_sequences(late)  # type: ignore[attr-defined]
        except InvalidInput as exc:  # the store answered, refusing
            if isinstance(exc, FoldUnsupported):
                self._retry_at = self._clock() + RETRY_FOLD_S
                log.warning(
                    "%s: %d late sequences stored as requests of their own; asking again in %.0f s",
                    exc.message,
                    len(late),
                    RETRY_FOLD_S,
                )
            else:
                log.error("the store refused late sequences (%s): stored apart", exc.message)
            self.metrics.ship_errors.labels("fold_refused").inc()
            return True, apart
        if result.duplicates:
            self.metrics.ship_duplicates.inc(result.duplicates)
        self.metrics.sequences_merged.inc(result.inserted)
        return True, []

    def remember(
        self, sink: Sink | None, records: list[RequestRecord], requests: list[Request]
    ) -> None:
        """Keep the requests just stored, so that their late sequences are recognised."""
        if self.folds(sink):
            self.sequences.remember(records, requests)


class Conveyor:
    """Moves due spool entries into the sink, one kind at a time: request records with the
    stage fragments of their traces merged (``collector.assembly``) and late sequences
    folded (``LateFold``), client records, attributions, GPU and server samples; and drops
    the stage fragments whose request never came. An entry leaves the spool only once the store has
    taken or refused it; one bad record is isolated, not let to block the spool.
    ``round_trips`` counts the store's answers (the caller resets it for each pass)."""

    def __init__(
        self,
        spool: Spool,
        metrics: CollectorMetrics,
        fold: LateFold,
        *,
        batch_size: int,
        reassembly: Reassembly,
        adapters: Callable[[], Collection[str]],
    ) -> None:
        self.spool = spool
        self.metrics = metrics
        self.fold = fold
        self.batch_size = batch_size
        #: When unsettled trace pieces expire (records are due as the ingestor spooled them).
        self.reassembly = reassembly
        #: The instance's LoRA adapters (declared and scraped), asked once per pass: a
        #: caller's span naming one names a record's adapter (``assembly.attribute_adapters``).
        self.adapters = adapters
        #: The store writer (``None`` until it is built).
        self.sink: Sink | None = None
        self.round_trips = 0

    def _sink(self) -> Sink:
        if self.sink is None:
            raise Unavailable("the store writer is not open yet")
        return self.sink

    def ping(self, sink: Probe) -> None:
        """One round trip with nothing to move."""
        sink.ping()
        self.round_trips += 1

    # --- request records ---------------------------------------------------------------

    def records(self, horizon: float) -> int:
        """Ship the request records due by ``horizon``; the spool entries read."""
        stored = self.spool.ready(horizon, [Kind.RECORD], self.batch_size)
        if not stored:
            return 0
        traces = sorted({s.trace_id for s in stored})
        spooled = self.spool.by_trace(traces, Kind.STAGE, per_trace=MAX_PIECES_PER_TRACE)
        requests = [r for r in map(self._decode, stored) if r is not None]
        kept: list[Stored] = []
        pieces: list[Piece] = []
        for entry in spooled:
            piece = _decode_piece(entry)
            if piece is not None:
                kept.append(entry)
                pieces.append(piece)
        assembly = assemble(requests, pieces, self.adapters())
        records, late = self.fold.split(self.sink, stored, assembly.records, requests)
        self._write_records(records)
        if late:
            answered, apart = self.fold.fold(self._sink(), late)
            self.round_trips += answered
            self._write_records(apart)
        self.fold.remember(self.sink, records, requests)
        settled = [kept[j].seq for j in assembly.merged]
        for reason, indexes in assembly.refused.items():
            settled += [kept[j].seq for j in indexes]
            self.metrics.fragments_refused.labels(reason.value).inc(len(indexes))
        self.spool.delete([s.seq for s in stored] + settled)
        self.metrics.shipped.labels("record").inc(len(assembly.records))
        if assembly.sequences_merged:
            self.metrics.sequences_merged.inc(assembly.sequences_merged)
        if assembly.disaggregated:
            self.metrics.disaggregated.inc(assembly.disaggregated)
        return len(stored)

    def _decode(self, entry: Stored) -> Request | None:
        try:
            return Request(*decode_placed(entry.payload))
        except (InvalidInput, ValueError, TypeError) as exc:
            self.metrics.ship_errors.labels("invalid_payload").inc()
            log.error("dropping an undecodable spool entry %d: %s", entry.seq, exc)
            return None

    def _write_records(self, records: list[RequestRecord]) -> None:
        if not records:
            return
        sink = self._sink()
        try:
            result = sink.write_requests(records)
            self.round_trips += 1
        except InvalidInput:
            self.round_trips += 1  # the store answered, refusing
            # One bad record must not block the spool: isolate it, keep the others.
            for record in records:
                try:
                    self._count_refused(sink.write_requests([record]))
                except InvalidInput as exc:
                    self.metrics.ship_errors.labels("invalid_record").inc()
                    log.error("the store refused record %s: %s", record.span_id, exc.message)
            return
        if result.duplicates:
            self.metrics.ship_duplicates.inc(result.duplicates)
        self._count_refused(result)

    def _count_refused(self, result: WriteResult) -> None:
        if result.refused:  # outside the store's accepted window: dropped, as retention would
            self.metrics.ship_errors.labels("out_of_window").inc(result.refused)

    # --- client records and attributions: stored as they come -----------------------------

    def clients(self, horizon: float) -> int:
        """Store the client records that are due (no reassembly: they are whole as they come).
        A sink that stores no client records (the simulator's) gets none: they are dropped
        and counted as ``ship_errors{reason="no_client_store"}``."""
        return self._as_they_come(horizon, Kind.CLIENT, "client", decode_client, _client_writer)

    def attributions(self, horizon: float) -> int:
        """Store what gateway and client spans named of their traces (``core.attribution``),
        as they come. A sink that cannot join them (the simulator's) gets none: they are
        dropped and counted as ``ship_errors{reason="no_attribution_store"}``; so are they
        when an API older than attribution refuses their kind (``KindUnsupported``)."""
        return self._as_they_come(
            horizon, Kind.ATTRIBUTION, "attribution", decode_attribution, _attribution_writer
        )

    def _as_they_come(
        self,
        horizon: float,
        kind: Kind,
        name: str,
        decode: Callable[[bytes], _Keyed],
        writer: Callable[[Sink], Callable[[list[_Keyed]], WriteResult] | None],
    ) -> int:
        """Store the due entries of ``kind`` (each decoded by ``decode``) through the sink's
        ``writer`` (``None``: the sink stores none, ``no_{name}_store``); the entries read."""
        stored = self.spool.ready(horizon, [kind], self.batch_size)
        if not stored:
            return 0
        items: list[_Keyed] = []
        for entry in stored:
            try:
                items.append(decode(entry.payload))
            except (InvalidInput, InvalidRecord, ValueError, TypeError, KeyError) as exc:
                self.metrics.ship_errors.labels("invalid_payload").inc()
                log.error("dropping an undecodable %s entry %d: %s", name, entry.seq, exc)
        write = writer(self._sink())
        if write is None:
            self.metrics.ship_errors.labels(f"no_{name}_store").inc(len(items))
        elif items:
            self._write_keyed(name, write, items)
        self.spool.delete([s.seq for s in stored])
        self.metrics.shipped.labels(name).inc(len(items))
        return len(stored)

    def _write_keyed(
        self, name: str, write: Callable[[list[_Keyed]], WriteResult], items: list[_Keyed]
    ) -> None:
        self.round_trips += 1  # answered, whether it stores or refuses (raised otherwise)
        try:
            results = [write(items)]
        except KindUnsupported as exc:
            results = []
            self.metrics.ship_errors.labels(f"no_{name}_store").inc(len(items))
            log.warning("dropping %d %s entries: %s", len(items), name, exc.message)
        except InvalidInput:
            # One bad entry must not block the spool: isolate it, keep the others.
            results = []
            for item in items:
                try:
                    results.append(write([item]))
                except InvalidInput as exc:
                    self.metrics.ship_errors.labels("invalid_record").inc()
                    log.error("the store refused %s %s: %s", name, item.span_id, exc)
        for result in results:
            if result.duplicates:
                self.metrics.ship_duplicates.inc(result.duplicates)
            self._count_refused(result)

    # --- samples and orphans -----------------------------------------------------------

    def due_samples(self, horizon: float) -> list[Stored]:
        """The GPU and server samples due by ``horizon``, at most a batch."""
        return self.spool.ready(horizon, [Kind.GPU, Kind.SERVER], self.batch_size)

    def samples(self, stored: list[Stored]) -> int:
        """Ship ``stored`` (from ``due_samples``); the spool entries shipped."""
        if not stored:
            return 0
        gpu = [decode_gpu(s.payload) for s in stored if s.kind == Kind.GPU]
        server = [decode_server(s.payload) for s in stored if s.kind == Kind.SERVER]
        if gpu:
            self._sink().write_gpu_samples(gpu)
            self.round_trips += 1
        if server:
            self._sink().write_server_samples(server)
            self.round_trips += 1
        self.spool.delete([s.seq for s in stored])
        self.metrics.shipped.labels("gpu").inc(len(gpu))
        self.metrics.shipped.labels("server").inc(len(server))
        return len(stored)

    def drop_orphans(self, now: float) -> None:
        """Drop the trace pieces past the orphan TTL, counting the stage fragments."""
        horizon = self.reassembly.expired_before(now)
        expired = self.spool.ready(horizon, [Kind.STAGE], self.batch_size)
        if expired:
            self.spool.delete([s.seq for s in expired])
            links = sum(isinstance(_decode_piece(s), Link) for s in expired)
            if len(expired) > links:
                self.metrics.orphan_stages.inc(len(expired) - links)


#: An entry stored as it comes: a client record or an attribution.
_Keyed = TypeVar("_Keyed", ClientRecord, Attribution)


def _client_writer(sink: Sink) -> Callable[[list[ClientRecord]], WriteResult] | None:
    return sink.write_client_requests if isinstance(sink, ClientSink) else None


def _attribution_writer(sink: Sink) -> Callable[[list[Attribution]], WriteResult] | None:
    return sink.write_attributions if isinstance(sink, AttributionSink) else None


def _decode_piece(entry: Stored) -> Piece | None:
    """A trace piece, or ``None`` for one that can settle nothing (it expires)."""
    try:
        return decode_piece(entry.trace_id, entry.payload)
    except (InvalidInput, ValueError, TypeError):
        return None


class Shipper:
    """Drains the spool into the store: decides when a pass runs (``ShipPolicy``), has the
    ``Conveyor`` move what is due, opens the store writer, probes an idle store, backs off
    while it fails, and drains at shutdown; ``health`` is its state for ``/healthz``.

    ``sink`` is the store writer, or a factory that builds it in the shipper's thread once
    ``open_when()`` holds or ``policy.open_delay_s`` has passed (so that the sidecar accepts
    exports while the store's libraries load). ``on_first_ship`` is called once, with the
    entries shipped, after the first pass that shipped any."""

    def __init__(
        self,
        spool: Spool,
        sink: Sink | Callable[[], Sink],
        metrics: CollectorMetrics,
        policy: ShipPolicy | None = None,
        *,
        reassembly: Reassembly | None = None,
        clock: Callable[[], float] | None = None,
        adapters: Callable[[], Collection[str]] = frozenset,
        open_when: Callable[[], bool] = _always,
        on_first_ship: Callable[[int], None] | None = None,
    ) -> None:
        self.spool = spool
        self.metrics = metrics
        self.policy = policy or ShipPolicy()
        self._clock = clock or spool.now
        self.reassembly = reassembly or Reassembly()
        fold = LateFold(spool, metrics, self._clock, self.reassembly.window_s)
        self.conveyor = Conveyor(
            spool,
            metrics,
            fold,
            batch_size=self.policy.batch_size,
            reassembly=self.reassembly,
            adapters=adapters,
        )
        self.state = ShipHealth(spool, self._clock, self.policy)
        #: Builds the store writer (``None``: it was given built).
        self.open_sink: Callable[[], Sink] | None = None
        #: Set once the sink exists.
        self.opened = threading.Event()
        if isinstance(sink, Sink):
            self.conveyor.sink = sink
            self.opened.set()
        else:
            self.open_sink = sink
        self.open_when = open_when
        self._on_first_ship = on_first_ship
        self._samples_shipped_at = float("-inf")
        self._probed_at = float("-inf")
        state = self.state
        metrics.ship_lag.set_function(state.lag)
        metrics.spool_records.set_function(lambda: spool.stats()[0])
        metrics.spool_bytes.set_function(lambda: spool.stats()[1])
        metrics.ship_failing_since.set_function(lambda: state.failing_since or 0.0)
        metrics.ship_last_success.set_function(lambda: state.last_success_at or 0.0)

    # --- state -----------------------------------------------------------------------------

    @property
    def sink(self) -> Sink | None:
        """The store writer; ``None`` until it is built."""
        return self.conveyor.sink

    @property
    def last_error(self) -> str:
        return self.state.last_error

    @property
    def last_error_at(self) -> float | None:
        return self.state.last_error_at

    def health(self) -> dict[str, Any]:
        """The shipping part of ``/healthz`` (``ShipHealth.report``), from memory only."""
        return self.state.report(self.sink is not None)

    # --- one pass --------------------------------------------------------------------------

    def ship_once(self, *, ignore_window: bool = False) -> ShipResult:
        self.state.in_flight_since = time.monotonic()
        try:
            return self._ship_once(ignore_window)
        finally:
            self.state.in_flight_since = None

    def _ship_once(self, ignore_window: bool) -> ShipResult:
        now = self._clock()
        if self.sink is None and not self._open(now):
            return ShipResult(ok=False, retryable=True, error=self.state.last_error)
        horizon = float("inf") if ignore_window else now
        move = self.conveyor
        move.round_trips = 0
        try:
            records = shipped = move.records(horizon)
            clients = move.clients(horizon) + move.attributions(horizon)
            records += clients
            shipped += clients
            if ignore_window or self.policy.samples_due(now, self._samples_shipped_at):
                due = move.due_samples(horizon)
                if len(due) < self.policy.batch_size:  # a backlog goes on the next passes too
                    self._samples_shipped_at = now
                shipped += move.samples(due)
            if not move.round_trips:
                self._probe()
        except Unavailable as exc:
            log.warning("store unavailable, will retry: %s", exc.message)
            return self._failed(now, "unavailable", exc.message)
        except Exception as exc:  # the loop must outlive any one failure; it is retried
            log.exception("shipping failed, will retry")
            return self._failed(now, "unexpected", repr(exc)[:200])
        move.drop_orphans(now)
        self.state.passed(now, bool(move.round_trips), not isinstance(self.sink, Probe))
        if shipped and self._on_first_ship is not None:
            first, self._on_first_ship = self._on_first_ship, None
            first(shipped)
        self.state.refresh()
        return ShipResult(
            ok=True, shipped=shipped, next_ready_at=self.state.record_ready_at, records=records
        )

    def _failed(self, now: float, reason: str, error: str) -> ShipResult:
        self.metrics.ship_errors.labels(reason).inc()
        self.state.failed(now, error)
        return ShipResult(ok=False, retryable=True, error=error)

    def _probe(self) -> None:
        """Nothing was shipped: ask the store for a round trip when one is due (every
        ``probe_every_s``, and on every pass while failing), so that an idle outage is seen."""
        sink = self.sink
        if not isinstance(sink, Probe):
            return
        if (
            self.state.failing_since is None
            and time.monotonic() - self._probed_at < self.policy.probe_every_s
        ):
            return
        self._probed_at = time.monotonic()
        self.conveyor.ping(sink)

    def _open(self, now: float) -> bool:
        """Build the sink (imports the store's libraries, connects nothing yet)."""
        assert self.open_sink is not None
        try:
            sink = self.open_sink()
        except Exception as exc:  # a bad URL or a missing driver: reported, retried
            log.exception("cannot open the store writer, will retry")
            self._failed(now, "open", f"cannot open the store writer: {exc}"[:300])
            return False
        self.conveyor.sink = sink
        self.opened.set()
        return True

    # --- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event, wait: Callable[[float], bool] | None = None) -> None:
        """Ship until ``stop`` is set; ``wait(seconds)`` sleeps and says whether to stop."""
        pause = wait or self._waiter(stop)
        if self.sink is None and self._hold_open(stop):
            return
        failures = 0
        while not stop.is_set():
            started = self._clock()
            result = self.ship_once()
            if not result.ok:
                if pause(self.policy.backoff.delay(failures)):
                    return
                failures += 1
                continue
            failures = 0
            if result.shipped >= self.policy.batch_size:
                continue  # a backlog: keep going
            if pause(self.idle_delay(started, result.next_ready_at, bool(result.records))):
                return

    def idle_delay(
        self, started: float, next_ready_at: float | None, shipped_records: bool = True
    ) -> float:
        """Seconds from now to the next pass (``ShipPolicy.idle_delay``)."""
        return self.policy.idle_delay(started, next_ready_at, shipped_records, self._clock())

    def _hold_open(self, stop: threading.Event) -> bool:
        """Before building the sink, let the receivers answer the first export alone:
        importing the store's libraries holds the GIL for a second or more, and a restarted
        sidecar's first job is to acknowledge its exporters' retries. Waits until
        ``open_when()`` or ``open_delay_s``; whether to stop."""
        deadline = time.monotonic() + self.policy.open_delay_s
        while not self.open_when() and time.monotonic() < deadline:
            if stop.wait(0.02):
                return True
        return stop.is_set()

    def _waiter(self, stop: threading.Event) -> Callable[[float], bool]:
        """``stop.wait`` in slices of ``REFRESH_S``, refreshing the gauges between them."""

        def wait(seconds: float) -> bool:
            deadline = time.monotonic() + seconds
            while (left := deadline - time.monotonic()) > REFRESH_S:
                if stop.wait(REFRESH_S):
                    return True
                self.state.refresh()
            return stop.wait(max(0.0, left))

        return wait

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="shipper", daemon=True)
        thread.start()
        return thread

    def drain(self, timeout_s: float = 10.0) -> None:
        """Ship what is eligible now, for shutdown; stops at the first failure or timeout."""
        if self.sink is None:
            return  # never opened: everything stays in the spool for the next start
        deadline = time.monotonic() + timeout_s
        self._samples_shipped_at = float("-inf")  # samples too, however recently shipped
        while time.monotonic() < deadline:
            result = self.ship_once()
            if not result.ok or result.shipped == 0:
                return
