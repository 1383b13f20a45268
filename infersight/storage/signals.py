"""Diagnosis signals from the store: per-instance aggregates of one window (``core.signals``).

Three reads per window, each one pass over raw rows in time order: requests (latency
quantiles, stage means, input lengths of the slowest requests), server samples (queue and KV
gauges, the preemption counter's rate) and GPU samples (utilisation, clocks while busy,
throttle share, ECC counter rates, XIDs). Diagnosis windows are incident-sized (minutes to
hours), so raw rows are read; the row cap keeps a mistaken month-long window from exhausting
memory.

Samples are sparse (a scrape every 10–30 s) while the first diagnosis of an incident reads a
window of 30–60 s, so which readings describe a window matters:

* A counter's rate is its increase between two readings over the time between them: the last
  reading at or before the window's start (up to ``READING_SPAN_MAX`` before it) anchors it,
  the last one in the window ends it. One reading has no rate: the signal is then absent, not
  0 (a board that reads one ECC counter value in the window has not shown "no errors").
* A GPU reading describes the time *before* it: utilisation and DCGM's profiling fields are
  averages over the sample period that ends at the reading. Each reading stands for the time
  since its board's previous one (at most ``READING_SPAN_MAX``) and weighs in a window's means
  by how much of that time lies in the window; a reading at the window's start describes the
  minute before the burn and weighs nothing. Server gauges (running, waiting, KV usage) are
  the engine's state at the scrape and are read as such, over ``[start, end)``.
Client calls (``client_requests``, and ``infersight loadtest`` requests) of the window are
joined to the server's records by trace id (``storage.client_reads.read_pairs``, at most
``MAX_CLIENT_CALLS``); each joined pair counts for its server record's instance, so the
selector's labels are the server's. A window without a joined call of an instance has no
``client`` family for it ("not measured", the usual case where callers do not propagate their
trace context). Gaps are client − server; a negative quantile (noise: each side times the call
on its own clock) reads as 0.

Each instance also says which signal families the store had data of (``available``: stage
timings on any request, any server scrape, any GPU sample), so that a deployment without GPU
telemetry reads as "not measured", never as zeros.

The diagnoses made from those signals are kept here too: the latest one per incident, with
the incident's acknowledgement (``incident_diagnoses``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any, Final

import numpy as np
from sqlalchemy import Connection, Engine, func, insert, select, update

from infersight.core.errors import InvalidInput, NotFound
from infersight.core.gap import Pair, client_signals
from infersight.core.model_names import ModelAliases
from infersight.core.query import Selector
from infersight.core.samples import BENIGN_REASONS, THROTTLE_REASONS
from infersight.core.signals import (
    CLIENT,
    DISAGGREGATED,
    GPU,
    MAX_KV_SOURCES,
    REQUESTS,
    SERVER,
    STAGES,
    InstanceSignals,
    WindowSignals,
    families_of,
)
from infersight.core.window import Window
from infersight.storage.client_reads import read_pairs
from infersight.storage.sql import begin, raw_where
from infersight.storage.tables import (
    gpu_samples,
    incident_diagnoses,
    incidents,
    request_parts,
    requests,
    server_samples,
)

MAX_ROWS: Final = 2_000_000
#: Client calls one window's signals join at most (the newest; incident windows are minutes).
MAX_CLIENT_CALLS: Final = 50_000
#: The longest time one reading stands for, and how far before a window its anchor readings
#: (a counter's start, a GPU reading's predecessor) are looked for.
READING_SPAN_MAX: Final = timedelta(seconds=120)
_NOT_BENIGN: Final = frozenset(THROTTLE_REASONS) - BENIGN_REASONS
_NONE: Final[frozenset[str]] = frozenset()
_STAGES: Final = ("queue_s", "preprocess_s", "prefill_s", "decode_s")


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present else None


def _quantile(values: Sequence[float | None], q: float) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.quantile(present, q)) if present else None


def _increase(values: Iterable[float | None]) -> float:
    """A counter's increase over consecutive readings, counting a reset as a restart from 0."""
    total = 0.0
    last: float | None = None
    for v in values:
        if v is None:
            continue
        if last is not None:
            total += v - last if v >= last else v
        last = v
    return total


def _counter_rate(
    readings: Sequence[tuple[datetime, float | None]], start: datetime
) -> float | None:
    """A counter's rate from time-ordered ``(ts, value)`` readings: its increase from the last
    reading at or before ``start`` (or the first after it) to the last one, over the time
    between them; ``None`` without two readings of it that far apart."""
    present = [(ts, v) for ts, v in readings if v is not None]
    first = 0
    for k, (ts, _) in enumerate(present):
        if ts <= start:
            first = k
    kept = present[first:]
    if len(kept) < 2:
        return None
    seconds = (kept[-1][0] - kept[0][0]).total_seconds()
    if seconds <= 0.0:
        return None
    return _increase(v for _, v in kept) / seconds


def _put(out: dict[str, float], name: str, value: float | None) -> None:
    if value is not None and math.isfinite(value):
        out[name] = max(0.0, value)


def _request_values(rows: Sequence[Any], seconds: float) -> dict[str, float]:
    out: dict[str, float] = {}
    n = len(rows)
    out["requests"] = float(n)
    out["request_rate"] = n / seconds
    out["error_ratio"] = sum(r.status == "error" for r in rows) / n if n else 0.0
    ttft = [r.ttft_s for r in rows]
    _put(out, "ttft_p50", _quantile(ttft, 0.5))
    _put(out, "ttft_p90", _quantile(ttft, 0.9))
    _put(out, "tpot_p50", _quantile([r.tpot_s for r in rows], 0.5))
    _put(out, "tpot_p90", _quantile([r.tpot_s for r in rows], 0.9))
    _put(out, "e2e_p90", _quantile([r.e2e_s for r in rows], 0.9))
    _put(out, "queue_mean", _mean([r.queue_s for r in rows]))
    _put(out, "queue_p90", _quantile([r.queue_s for r in rows], 0.9))
    _put(out, "preprocess_mean", _mean([r.preprocess_s for r in rows]))
    _put(out, "prefill_mean", _mean([r.prefill_s for r in rows]))
    _put(out, "decode_mean", _mean([r.decode_s for r in rows]))
    per_token = [
        r.decode_s / (r.output_tokens - 1)
        for r in rows
        if r.decode_s is not None and r.output_tokens is not None and r.output_tokens > 1
    ]
    _put(out, "decode_per_token_mean", _mean(per_token))
    _put(out, "input_tokens_mean", _mean([r.input_tokens for r in rows]))
    cut = out.get("ttft_p90")
    if cut is not None:
        slow = [r.input_tokens for r in rows if r.ttft_s is not None and r.ttft_s >= cut]
        _put(out, "slow_input_tokens_p50", _quantile(slow, 0.5))
    split = [r for r in rows if r.role == "decode"]
    if split:
        _put(out, "kv_transfer_mean", _mean([r.kv_transfer_s for r in split]))
        _put(out, "kv_transfer_p90", _quantile([r.kv_transfer_s for r in split], 0.9))
    return out


def _kv_sources(rows: Sequence[Any]) -> dict[str, float]:
    """A decode instance's mean KV-transfer time by the prefill source of its split requests
    (the busiest ``MAX_KV_SOURCES`` sources)."""
    times: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.role == "decode" and r.peer and r.kv_transfer_s is not None:
            times[r.peer].append(float(r.kv_transfer_s))
    busiest = sorted(times, key=lambda peer: -len(times[peer]))[:MAX_KV_SOURCES]
    return {peer: sum(times[peer]) / len(times[peer]) for peer in busiest}


def _prefill_queues(
    engine: Engine, window: Window, reqs: Mapping[str, Sequence[Any]]
) -> dict[str, float]:
    """Per instance, the mean queue time of its disaggregated requests' prefill legs
    (``request_parts``, joined by trace id; a leg starts after its request, before its end)."""
    traces = {r.trace_id: name for name, rows in reqs.items() for r in rows if r.role == "decode"}
    if not traces:
        return {}
    parts = request_parts.c
    query = select(parts.trace_id, parts.queue_s).where(
        parts.start >= window.start,
        parts.start < window.end + READING_SPAN_MAX,
        parts.queue_s.is_not(None),
    )
    sums: dict[str, list[float]] = defaultdict(list)
    with engine.connect() as connection:
        for trace_id, queue_s in connection.execute(query.limit(MAX_ROWS)):
            name = traces.get(trace_id)
            if name is not None:
                sums[name].append(float(queue_s))
    return {name: sum(values) / len(values) for name, values in sums.items()}


def _server_values(rows: Sequence[Any], window: Window) -> dict[str, float]:
    """Server gauges over the scrapes in ``window``; ``rows`` may begin with scrapes before it
    (the preemption counter's anchor)."""
    out: dict[str, float] = {}
    inside = [r for r in rows if r.ts >= window.start]
    _put(out, "requests_running", _mean([r.requests_running for r in inside]))
    _put(out, "requests_waiting", _mean([r.requests_waiting for r in inside]))
    _put(out, "kv_cache_usage", _mean([r.kv_cache_usage for r in inside]))
    # Rows stored before the hottest engine was kept have none: their instance figure stands in.
    hottest = [r.kv_cache_usage if r.kv_cache_usage_max is None else r.kv_cache_usage_max
               for r in inside]  # fmt: skip
    _put(out, "kv_cache_usage_max", _mean(hottest))
    if inside:
        readings = [(r.ts, r.preemptions_total) for r in rows]
        _put(out, "preemptions_per_s", _counter_rate(readings, window.start))
    # Each scrape's figure covers the interval before it (counters gained over the interval).
    _put(out, "spec_acceptance_rate", _mean([r.spec_acceptance_rate for r in inside]))
    _put(out, "spec_accept_length", _mean([r.spec_accept_length for r in inside]))
    _put(out, "requests_deferred", _mean([r.requests_deferred for r in inside]))
    return out


def _reading_weights(rows: Sequence[Any], window: Window) -> list[float]:
    """How many seconds of ``window`` each GPU reading of one board describes (``rows`` in
    time order): the time since the board's previous reading (at most ``READING_SPAN_MAX``;
    for its first, the board's usual gap) that lies in the window."""
    limit = READING_SPAN_MAX.total_seconds()
    gaps = [(b.ts - a.ts).total_seconds() for a, b in pairwise(rows)]
    usual = float(np.median([g for g in gaps if 0.0 < g <= limit] or [limit]))
    out = []
    for k, r in enumerate(rows):
        span = gaps[k - 1] if k and 0.0 < gaps[k - 1] <= limit else usual
        begin = max(r.ts - timedelta(seconds=span), window.start)
        out.append(max(0.0, (min(r.ts, window.end) - begin).total_seconds()))
    return out


def _weighted(pairs: Iterable[tuple[float, float | None]]) -> float | None:
    total = weight = 0.0
    for w, v in pairs:
        if v is not None and w > 0.0:
            total += w * v
            weight += w
    return total / weight if weight > 0.0 else None


def _gpu_values(rows: Sequence[Any], window: Window) -> dict[str, float]:
    """GPU signals over ``window`` from one instance's readings, board by board in time order;
    ``rows`` may begin with readings before the window (each board's anchor)."""
    out: dict[str, float] = {}
    boards: dict[int, list[Any]] = defaultdict(list)
    for r in rows:
        boards[r.gpu_index].append(r)
    weighted: list[tuple[float, Any, frozenset[str]]] = []
    rates: dict[str, list[float]] = {"ecc_sbe_per_s": [], "ecc_dbe_per_s": []}
    for board in boards.values():
        for w, r in zip(_reading_weights(board, window), board, strict=True):
            if w > 0.0:
                why = frozenset(r.throttle_reasons.split(",")) if r.throttle_reasons else _NONE
                weighted.append((w, r, why))
        for name, column in (
            ("ecc_sbe_per_s", "ecc_sbe_total"),
            ("ecc_dbe_per_s", "ecc_dbe_total"),
        ):
            readings = [(r.ts, getattr(r, column)) for r in board]
            rate = _counter_rate(readings, window.start)
            if rate is not None:
                rates[name].append(rate)
    if not weighted:
        return out
    _put(out, "util_gpu", _weighted((w, r.util_gpu) for w, r, _ in weighted))
    dram = (
        (w, r.dram_bw_util if r.dram_bw_util is not None else r.util_memory) for w, r, _ in weighted
    )
    _put(out, "dram_bw_util", _weighted(dram))
    busy = ((w, r.sm_clock_mhz) for w, r, why in weighted
            if (r.util_gpu or 0.0) > 0.0 and "gpu_idle" not in why)  # fmt: skip
    _put(out, "sm_clock_mhz", _weighted(busy))
    throttled = ((w, float(not why.isdisjoint(_NOT_BENIGN))) for w, _, why in weighted)
    _put(out, "throttled_share", _weighted(throttled))
    out["xid_samples"] = float(
        sum(r.xid_last is not None and r.xid_last > 0 for _, r, _ in weighted)
    )
    _put(out, "temperature_c", _weighted((w, r.temperature_c) for w, r, _ in weighted))
    _put(out, "power_w", _weighted((w, r.power_w) for w, r, _ in weighted))
    for name, found in rates.items():
        if found:
            out[name] = sum(found)
    return out


def _client_pairs(
    engine: Engine, window: Window, selector: Selector, aliases: ModelAliases
) -> dict[str, list[Pair]]:
    """The window's joined client calls per server instance, those whose server record the
    selector picks (its labels are the server's)."""
    read = read_pairs(engine, window, aliases, model=selector.model, max_calls=MAX_CLIENT_CALLS)
    pinned = [(n, v) for n in ("instance", "tenant", "priority") if (v := getattr(selector, n))]
    out: dict[str, list[Pair]] = defaultdict(list)
    for pair in read.pairs:
        server = pair.server
        if server is None or any(server.label(n) != v for n, v in pinned):
            continue
        if not selector.allows_tenant(server.label("tenant")):
            continue
        out[server.instance].append(pair)
    return out


def _grouped(engine: Engine, statement: Any) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = defaultdict(list)
    with engine.connect() as connection:
        result = connection.execution_options(yield_per=20_000).execute(statement)
        for count, row in enumerate(result, start=1):
            if count > MAX_ROWS:
                raise InvalidInput(f"window too long for a diagnosis (over {MAX_ROWS} rows)")
            groups[row.instance].append(row)
    return groups


def window_signals(
    engine: Engine,
    window: Window,
    selector: Selector = Selector(),
    aliases: ModelAliases | None = None,
) -> WindowSignals:
    """Every instance's signals over ``window``, for the requests ``selector`` picks;
    ``aliases`` match client model names to the server's for the client signals."""
    seconds = max(window.seconds, 1e-9)
    cols = [
        requests.c[c]
        for c in (
            "instance", "model", "ttft_s", "tpot_s", "e2e_s", "queue_s", "preprocess_s",
            "prefill_s", "decode_s", "input_tokens", "output_tokens", "status", "role",
            "kv_transfer_s", "trace_id", "peer",
        )
    ]  # fmt: skip
    reqs = _grouped(
        engine,
        select(*cols).where(raw_where(window, selector)),
    )
    instances = sorted(reqs) if selector.instance is None else [selector.instance]
    if not instances:
        return WindowSignals(window, ())
    # From READING_SPAN_MAX before the window: the readings that anchor counters and tell how
    # long the first GPU reading in the window stands for.
    since = window.start - READING_SPAN_MAX
    server = _grouped(
        engine,
        select(server_samples)
        .where(
            server_samples.c.ts >= since,
            server_samples.c.ts < window.end,
            server_samples.c.instance.in_(instances),
        )
        .order_by(server_samples.c.instance, server_samples.c.ts),
    )
    # A GPU reading describes the time before it: one at the window's end belongs to it.
    gpu_rows = _grouped(
        engine,
        select(gpu_samples)
        .where(
            gpu_samples.c.ts >= since,
            gpu_samples.c.ts <= window.end,
            gpu_samples.c.instance.in_(instances),
        )
        .order_by(gpu_samples.c.instance, gpu_samples.c.gpu_index, gpu_samples.c.ts),
    )
    clients = _client_pairs(engine, window, selector, aliases or ModelAliases())
    prefill_queues = _prefill_queues(engine, window, reqs)
    out = []
    for name in instances:
        rows = reqs.get(name, [])
        values = _request_values(rows, seconds)
        scrapes = server.get(name, [])
        values.update(_server_values(scrapes, window))
        gpu = _gpu_values(gpu_rows.get(name, []), window)
        values.update(gpu)
        joined = clients.get(name, [])
        if joined:
            values.update(client_signals(joined))
        _put(values, "prefill_queue_mean", prefill_queues.get(name))
        sources = _kv_sources(rows)
        model = rows[0].model if rows else (selector.model or "")
        inside = any(r.ts >= window.start for r in scrapes)
        available = _available(rows, inside, bool(gpu)) | ({CLIENT} if joined else _NONE)
        out.append(InstanceSignals(name, model, values, available | families_of(values), sources))
    return WindowSignals(window, tuple(out))


def _available(requests_: Sequence[Any], server: bool, gpu: bool) -> frozenset[str]:
    """The signal families the store holds data of: requests, stage timings on any request,
    any server scrape in the window and any GPU reading that describes part of it (a family
    with data may still lack some signals)."""
    out = set()
    if requests_:
        out.add(REQUESTS)
    if any(getattr(r, stage) is not None for r in requests_ for stage in _STAGES):
        out.add(STAGES)
    if any(r.role == "decode" for r in requests_):
        out.add(DISAGGREGATED)
    if server:
        out.add(SERVER)
    if gpu:
        out.add(GPU)
    return frozenset(out)


#: Error types kept per instance (the most frequent ones); the rest are summed as ``other``.
MAX_ERROR_TYPES: Final = 5


def error_types(
    engine: Engine, window: Window, selector: Selector = Selector()
) -> dict[str, dict[str, int]]:
    """Failed requests per instance and ``error_type`` over ``window`` (``""``: untyped),
    the ``MAX_ERROR_TYPES`` most frequent per instance and the rest as ``other``."""
    statement = (
        select(requests.c.instance, requests.c.error_type, func.count())
        .where(raw_where(window, selector), requests.c.status == "error")
        .group_by(requests.c.instance, requests.c.error_type)
    )
    counts: dict[str, list[tuple[int, str]]] = defaultdict(list)
    with engine.connect() as connection:
        for instance, kind, n in connection.execute(statement):
            counts[instance].append((int(n), str(kind or "")))
    out: dict[str, dict[str, int]] = {}
    for instance, kinds in counts.items():
        kinds.sort(key=lambda item: (-item[0], item[1]))
        kept = {kind: n for n, kind in kinds[:MAX_ERROR_TYPES]}
        rest = sum(n for n, _ in kinds[MAX_ERROR_TYPES:])
        if rest:
            kept["other"] = kept.get("other", 0) + rest
        out[instance] = kept
    return out


# -- Diagnoses of incidents: the latest one per incident, and its acknowledgement -------------


@dataclass(frozen=True, slots=True)
class IncidentNote:
    """What the diagnosis seam keeps about one incident."""

    incident_id: int
    symptom: dict[str, Any] | None
    diagnosis: dict[str, Any] | None
    diagnosed_at: datetime | None
    acknowledged_at: datetime | None = None
    acknowledged_by: str = ""


def _check_incident(connection: Connection, incident_id: int) -> None:
    found = connection.execute(select(incidents.c.id).where(incidents.c.id == incident_id)).first()
    if found is None:
        raise NotFound(f"no incident {incident_id}", details={"id": incident_id})


def save_diagnosis(
    engine: Engine | Connection,
    incident_id: int,
    symptom: Mapping[str, Any],
    diagnosis: Mapping[str, Any],
    at: datetime,
) -> None:
    """Store (or replace) the diagnosis of an incident, keeping its acknowledgement (in the
    caller's transaction when given a connection)."""
    values = {
        "symptom": json.dumps(symptom, sort_keys=True),
        "diagnosis": json.dumps(diagnosis, sort_keys=True),
        "diagnosed_at": at,
    }
    with begin(engine) as connection:
        _check_incident(connection, incident_id)
        updated = connection.execute(
            update(incident_diagnoses)
            .where(incident_diagnoses.c.incident_id == incident_id)
            .values(**values)
        )
        if updated.rowcount == 0:
            connection.execute(insert(incident_diagnoses).values(incident_id=incident_id, **values))


def acknowledge(engine: Engine, incident_id: int, by: str, at: datetime) -> IncidentNote:
    """Mark an incident acknowledged (idempotent: the first acknowledgement is kept)."""
    with engine.begin() as connection:
        _check_incident(connection, incident_id)
        connection.execute(
            update(incident_diagnoses)
            .where(
                incident_diagnoses.c.incident_id == incident_id,
                incident_diagnoses.c.acknowledged_at.is_(None),
            )
            .values(acknowledged_at=at, acknowledged_by=by[:128])
        )
        found = connection.execute(
            select(incident_diagnoses.c.incident_id).where(
                incident_diagnoses.c.incident_id == incident_id
            )
        ).first()
        if found is None:
            connection.execute(
                insert(incident_diagnoses).values(
                    incident_id=incident_id,
                    symptom="null",
                    diagnosis="null",
                    diagnosed_at=at,
                    acknowledged_at=at,
                    acknowledged_by=by[:128],
                )
            )
    return notes(engine, [incident_id])[incident_id]


def notes(engine: Engine, incident_ids: Iterable[int]) -> dict[int, IncidentNote]:
    """The stored notes of the given incidents (absent ids have none)."""
    ids = list(incident_ids)
    if not ids:
        return {}
    with engine.connect() as connection:
        rows = connection.execute(
            select(incident_diagnoses).where(incident_diagnoses.c.incident_id.in_(ids))
        ).all()
    return {
        r.incident_id: IncidentNote(
            r.incident_id,
            json.loads(r.symptom),
            json.loads(r.diagnosis),
            r.diagnosed_at,
            r.acknowledged_at,
            r.acknowledged_by,
        )
        for r in rows
    }
