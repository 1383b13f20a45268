"""The shipper: drains the spool into the store through the storage bulk writer.

Records become eligible once their reassembly window has passed; the stage fragments of
their traces that are their own are merged in (``collector.assembly``: a request's stages are
its span's descendants in its service), the batch is written idempotently (the store ignores
keys it has), and only then are the entries deleted from the spool, with the fragments that
were merged or refused (refusals are counted by reason); fragments still waiting for a parent
stay. A store that is down is retried forever with backoff (5 s × 1.5, capped at 30 s), so an
outage only grows the spool. Stage fragments whose request never arrives are dropped (and
counted) after ``orphan_ttl_s``; links (spans kept only for their place in a trace) expire
with them, uncounted.

Cadence: every pass costs the store a fixed amount of work (a transaction, the rollup rows of
each series read, merged and rewritten) besides its per-record cost, so a pass that stored
records is followed by the next one no sooner than ``idle_s`` after it started, unless a
whole batch is waiting. Within that bound a pass starts as soon as the oldest waiting record
becomes eligible: an OpenTelemetry SDK exports a few large batches (512 spans every few
seconds), and each is shipped the moment its reassembly window ends, in one pass, instead of
waiting for the next tick of a fixed timer. GPU and server samples have no such deadline and
are shipped every ``samples_every_s`` (the store merges each batch of a GPU's samples into its
rollups at a fixed cost, whatever the batch's size), and whenever the shipper drains.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from collector.assembly import Piece, Request, assemble
from collector.codec import Kind, decode_gpu, decode_piece, decode_placed, decode_server
from collector.mapping import Link
from collector.metrics import CollectorMetrics
from collector.spool import Spool, Stored
from core.errors import ConfigurationError, InvalidInput, Unavailable
from core.records import RequestRecord
from core.samples import GpuSample, ServerSample

log = logging.getLogger(__name__)

#: The most trace pieces (stage fragments and links) of one trace read in a shipping pass:
#: a request's own stage spans are far fewer (SGLang's decode slices of a long answer are a
#: few thousand); beyond it a flooded trace's pieces wait and expire, and memory stays bounded.
MAX_PIECES_PER_TRACE: Final = 20_000


class Sink(Protocol):
    """What the shipper needs of ``storage.writer.Writer``."""

    def write_requests(self, records: Sequence[RequestRecord]) -> object: ...
    def write_gpu_samples(self, samples: Sequence[GpuSample]) -> int: ...
    def write_server_samples(self, samples: Sequence[ServerSample]) -> int: ...


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


class Shipper:
    def __init__(
        self,
        spool: Spool,
        sink: Sink,
        metrics: CollectorMetrics,
        backoff: Backoff | None = None,
        batch_size: int = 2000,
        orphan_ttl_s: float = 300.0,
        idle_s: float = 1.0,
        clock: Callable[[], float] | None = None,
        max_idle_s: float = 10.0,
        samples_every_s: float = 0.0,
    ) -> None:
        if idle_s < 0 or samples_every_s < 0:
            raise ConfigurationError("the shipper's pauses must not be negative")
        self.spool = spool
        self.sink = sink
        self.metrics = metrics
        self.backoff = backoff or Backoff()
        self.batch_size = batch_size
        self.orphan_ttl_s = orphan_ttl_s
        #: Least time from the start of a pass that stored records to the next pass, while
        #: less than a batch is waiting.
        self.idle_s = idle_s
        #: Most time between passes while records wait for their window (samples, orphans
        #: and gauges are handled on every pass).
        self.max_idle_s = max(idle_s, max_idle_s)
        #: Least time between two passes that ship samples (0: every pass).
        self.samples_every_s = samples_every_s
        self._clock = clock or spool.now
        self._samples_shipped_at = float("-inf")

    # --- one pass --------------------------------------------------------------------------

    def ship_once(self, *, ignore_window: bool = False) -> ShipResult:
        now = self._clock()
        horizon = float("inf") if ignore_window else now
        try:
            records = shipped = self._ship_records(horizon)
            if ignore_window or now - self._samples_shipped_at >= self.samples_every_s:
                shipped += self._ship_samples(horizon, now)
        except Unavailable as exc:
            self.metrics.ship_errors.labels("unavailable").inc()
            log.warning("store unavailable, will retry: %s", exc.message)
            return ShipResult(ok=False, retryable=True, error=exc.message)
        except Exception as exc:  # the loop must outlive any one failure; it is retried
            self.metrics.ship_errors.labels("unexpected").inc()
            log.exception("shipping failed, will retry")
            return ShipResult(ok=False, retryable=True, error=repr(exc)[:200])
        self._drop_orphans(now)
        next_ready_at = self.spool.oldest_ready_at([Kind.RECORD])
        self._update_gauges(now, next_ready_at)
        return ShipResult(ok=True, shipped=shipped, next_ready_at=next_ready_at, records=records)

    def _ship_records(self, horizon: float) -> int:
        stored = self.spool.ready(horizon, [Kind.RECORD], self.batch_size)
        if not stored:
            return 0
        traces = sorted({s.trace_id for s in stored})
        spooled = self.spool.by_trace(traces, Kind.STAGE, per_trace=MAX_PIECES_PER_TRACE)
        requests = [r for r in map(self._decode, stored) if r is not None]
        kept: list[Stored] = []
        pieces: list[Piece] = []
        for entry in spooled:
            piece = self._decode_piece(entry)
            if piece is not None:
                kept.append(entry)
                pieces.append(piece)
        assembly = assemble(requests, pieces)
        self._write_records(assembly.records)
        settled = [kept[j].seq for j in assembly.merged]
        for reason, indexes in assembly.refused.items():
            settled += [kept[j].seq for j in indexes]
            self.metrics.fragments_refused.labels(reason.value).inc(len(indexes))
        self.spool.delete([s.seq for s in stored] + settled)
        self.metrics.shipped.labels("record").inc(len(assembly.records))
        return len(stored)

    def _decode(self, entry: Stored) -> Request | None:
        try:
            return Request(*decode_placed(entry.payload))
        except (InvalidInput, ValueError, TypeError) as exc:
            self.metrics.ship_errors.labels("invalid_payload").inc()
            log.error("dropping an undecodable spool entry %d: %s", entry.seq, exc)
            return None

    def _decode_piece(self, entry: Stored) -> Piece | None:
        """A trace piece, or ``None`` for one that can settle nothing (it expires)."""
        try:
            return decode_piece(entry.trace_id, entry.payload)
        except (InvalidInput, ValueError, TypeError):
            return None

    def _write_records(self, records: list[RequestRecord]) -> None:
        if not records:
            return
        try:
            result = self.sink.write_requests(records)
        except InvalidInput:
            # One bad record must not block the spool: isolate it, keep the others.
            for record in records:
                try:
                    self.sink.write_requests([record])
                except InvalidInput as exc:
                    self.metrics.ship_errors.labels("invalid_record").inc()
                    log.error("the store refused record %s: %s", record.span_id, exc.message)
            return
        duplicates = getattr(result, "duplicates", 0)
        if duplicates:
            self.metrics.ship_duplicates.inc(duplicates)

    def _ship_samples(self, horizon: float, now: float) -> int:
        stored = self.spool.ready(horizon, [Kind.GPU, Kind.SERVER], self.batch_size)
        if len(stored) < self.batch_size:  # a backlog is shipped on the next passes too
            self._samples_shipped_at = now
        if not stored:
            return 0
        gpu = [decode_gpu(s.payload) for s in stored if s.kind == Kind.GPU]
        server = [decode_server(s.payload) for s in stored if s.kind == Kind.SERVER]
        if gpu:
            self.sink.write_gpu_samples(gpu)
        if server:
            self.sink.write_server_samples(server)
        self.spool.delete([s.seq for s in stored])
        self.metrics.shipped.labels("gpu").inc(len(gpu))
        self.metrics.shipped.labels("server").inc(len(server))
        return len(stored)

    def _drop_orphans(self, now: float) -> None:
        expired = self.spool.ready(now - self.orphan_ttl_s, [Kind.STAGE], self.batch_size)
        if expired:
            self.spool.delete([s.seq for s in expired])
            links = sum(isinstance(self._decode_piece(s), Link) for s in expired)
            if len(expired) > links:
                self.metrics.orphan_stages.inc(len(expired) - links)

    def _update_gauges(self, now: float, record_ready_at: float | None) -> None:
        # Samples are held for samples_every_s on purpose: only a wait beyond that is lag.
        lags = [0.0]
        if record_ready_at is not None:
            lags.append(now - record_ready_at)
        sample_ready_at = self.spool.oldest_ready_at([Kind.GPU, Kind.SERVER])
        if sample_ready_at is not None:
            lags.append(now - sample_ready_at - self.samples_every_s)
        self.metrics.ship_lag.set(max(lags))
        records, size = self.spool.stats()
        self.metrics.spool_records.set(records)
        self.metrics.spool_bytes.set(size)

    # --- the loop --------------------------------------------------------------------------

    def run(self, stop: threading.Event, wait: Callable[[float], bool] | None = None) -> None:
        """Ship until ``stop`` is set; ``wait(seconds)`` sleeps and says whether to stop."""
        pause = wait or stop.wait
        failures = 0
        while not stop.is_set():
            started = self._clock()
            result = self.ship_once()
            if not result.ok:
                if pause(self.backoff.delay(failures)):
                    return
                failures += 1
                continue
            failures = 0
            if result.shipped >= self.batch_size:
                continue  # a backlog: keep going
            if pause(self.idle_delay(started, result.next_ready_at, bool(result.records))):
                return

    def idle_delay(
        self, started: float, next_ready_at: float | None, shipped_records: bool = True
    ) -> float:
        """Seconds from now to the next pass, for a pass that started at ``started``: when
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
        return max(0.0, wake - self._clock())

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="shipper", daemon=True)
        thread.start()
        return thread

    def drain(self, timeout_s: float = 10.0) -> None:
        """Ship what is eligible now, for shutdown; stops at the first failure or timeout."""
        deadline = time.monotonic() + timeout_s
        self._samples_shipped_at = float("-inf")  # samples too, however recently shipped
        while time.monotonic() < deadline:
            result = self.ship_once()
            if not result.ok or result.shipped == 0:
                return
