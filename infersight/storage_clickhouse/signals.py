"""A window's diagnosis signals (``RequestStore.window_signals``) from ClickHouse.

The SQL store's ``storage.signals`` reads every raw row of the window into Python and folds
them per instance; here ClickHouse folds them where they are, one statement per family, and
hands back one row per instance (or per GPU board), so a window of a busy fleet costs what its
instances cost, not what its requests do. The definitions are the SQL store's:

* **Requests** (read as the other raw-row reads read them, ``reads._raw``: as attributed,
  the moves joined only where the selector pins an attributed label): exact quantiles
  (``quantileExactInclusive``: numpy's linear interpolation), means, the mean decode time per
  output token after the first, the input lengths of the requests at or above the instance's
  TTFT p90 (that cut computed over the same rows, as a window aggregate of the one
  statement), KV-transfer time of the disaggregated (``role = 'decode'``) requests, the
  busiest ``MAX_KV_SOURCES`` prefill peers' mean transfer time (ties by the peer's name; the
  SQL store keeps its rows' order), and the mean queue time of their prefill legs
  (``request_parts``, joined by trace id). An instance's model is that of its earliest
  request of the window.
* **Server scrapes** (``server_samples``) from ``READING_SPAN_MAX`` before the window to its
  end: gauges averaged over the scrapes in it; the preemption counter's rate anchored by the
  last reading at or before the window's start (``_rate``).
* **GPU samples** (``gpu_samples``) to the window's end inclusive: each reading weighs by the
  part of the window it describes — the time since its board's previous reading, or the
  board's median gap (to the microsecond, as a ``timedelta`` rounds it) — and the ECC
  counters' rates are summed over the boards that have one.
* **Client calls** are read through the store's ``ClientStore`` (``HybridStore.clients``:
  ClickHouse's client records, the SQL store's load-test requests), each joined pair counting
  for its server record's instance, the selector's instance, tenant and priority compared with
  the server's labels.

Counts equal the SQL store's; quantiles interpolate between the same two values (numpy and
ClickHouse may round the last bit apart) and means are sums added in ClickHouse's order, both
within about 1e-15 relative of the SQL store's. The SQL store refuses a window of more than
``storage.signals.MAX_ROWS`` rows of a kind (it holds them in memory); here only the quantile
states are held, by ClickHouse.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

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
from infersight.storage.seam import ClientStore
from infersight.storage_clickhouse.reads import Sides, _raw, _raw_where, _time, _touches
from infersight.storage_clickhouse.schema import Layout
from infersight.storage_clickhouse.transport import Transport, quote

#: The longest time one reading stands for, and how far before a window its anchor readings
#: are looked for (``storage.signals.READING_SPAN_MAX``).
READING_SPAN_MAX: Final = timedelta(seconds=120)
#: Client calls one window's signals join at most (``storage.signals.MAX_CLIENT_CALLS``).
MAX_CLIENT_CALLS: Final = 50_000
#: Clock-event reasons that count a GPU reading as throttled.
NOT_BENIGN: Final = tuple(sorted(frozenset(THROTTLE_REASONS) - BENIGN_REASONS))
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)
_SPAN_US: Final = READING_SPAN_MAX // _MICRO
_STAGE_COLUMNS: Final = ("queue_s", "preprocess_s", "prefill_s", "decode_s")
#: The server gauges averaged over the scrapes in the window, in the SQL store's order
#: (``kv_cache_usage_max``: the hottest engine's, the instance's own on rows without one).
_GAUGES: Final = (
    ("requests_running", "requests_running"),
    ("requests_waiting", "requests_waiting"),
    ("kv_cache_usage", "kv_cache_usage"),
    ("kv_cache_usage_max", "ifNull(kv_cache_usage_max, kv_cache_usage)"),
)
_SCRAPE_MEANS: Final = ("spec_acceptance_rate", "spec_accept_length", "requests_deferred")
#: GPU means weighed by the time each reading describes: (signal, value, readings counted).
_GPU_MEANS: Final = (
    ("util_gpu", "util_gpu", "1"),
    ("dram_bw_util", "ifNull(dram_bw_util, util_memory)", "1"),
    ("sm_clock_mhz", "sm_clock_mhz", "ifNull(util_gpu, 0) > 0 AND NOT has(reasons, 'gpu_idle')"),
    ("throttled_share", "toFloat64(hasAny(reasons, {not_benign}))", "1"),
    ("temperature_c", "temperature_c", "1"),
    ("power_w", "power_w", "1"),
)
_ECC: Final = (("ecc_sbe_per_s", "ecc_sbe_total"), ("ecc_dbe_per_s", "ecc_dbe_total"))


def _micros(ts: datetime) -> int:
    return (ts - _EPOCH) // _MICRO


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _put(out: dict[str, float], name: str, value: Any) -> None:
    """``value`` as signal ``name`` where it is a finite number (negatives read as 0)."""
    number = _float(value)
    if number is not None and math.isfinite(number):
        out[name] = max(0.0, number)


def _in(values: Sequence[str]) -> str:
    return ", ".join(quote(v) for v in values)


def _rate(name: str, readings: str, start_us: int) -> str:
    """Select-list items ending in ``name``: a counter's rate from ``readings`` (an array of
    ``(µs, value)`` in time order, values present) — its increase, a reset read as a restart
    from 0, from the last reading at or before ``start_us`` (or the first after it) to the
    last one, over the seconds between them; NULL without two readings that far apart."""
    kept = f"{name}_kept"
    values = f"arrayMap(x -> x.2, {kept})"
    seconds = f"((tupleElement({kept}[-1], 1) - tupleElement({kept}[1], 1)) / 1e6)"
    return (
        f"arraySlice({readings}, greatest(arrayLastIndex(x -> x.1 <= {start_us},"
        f" {readings}), 1)) AS {kept},"
        f" if(length({kept}) < 2 OR {seconds} <= 0, NULL,"
        f" arraySum(arrayMap((a, b) -> if(b >= a, b - a, b), arrayPopBack({values}),"
        f" arrayPopFront({values}))) / {seconds}) AS {name}"
    )


def _readings(column: str) -> str:
    """The time-ordered ``(µs, value)`` readings of a counter column, values present."""
    return (
        f"arraySort(groupArrayIf((toUnixTimestamp64Micro(ts), assumeNotNull({column})),"
        f" {column} IS NOT NULL))"
    )


@dataclass(frozen=True, slots=True)
class _Instance:
    """What the request statements found of one instance."""

    model: str
    values: dict[str, float]
    stages: bool
    split: bool


class SignalReads:
    """``RequestStore.window_signals`` over ClickHouse's request, prefill-leg, scrape and GPU
    tables, with the client calls of ``clients`` (``None``: no client signals)."""

    def __init__(
        self, transport: Transport, layout: Layout, clients: ClientStore | None = None
    ) -> None:
        self.transport = transport
        self.layout = layout
        self.clients = clients

    def window_signals(
        self,
        window: Window,
        selector: Selector = Selector(),
        aliases: ModelAliases | None = None,
    ) -> WindowSignals:
        """Every instance's signals over ``window``, for the requests ``selector`` picks (the
        SQL store's ``storage.signals.window_signals``)."""
        seconds = max(window.seconds, 1e-9)
        sides = Sides.probe(self.transport, self.layout, [window])  # every raw read below
        found = self._requests(window, selector, seconds, sides)
        instances = sorted(found) if selector.instance is None else [selector.instance]
        if not instances:
            return WindowSignals(window, ())
        server, scraped = self._server(window, instances)
        gpu = self._gpu(window, instances)
        clients = self._client_pairs(window, selector, aliases or ModelAliases())
        split = [name for name in instances if name in found and found[name].split]
        sources = self._kv_sources(window, selector, split, sides)
        prefill = self._prefill_queues(window, selector, split, sides)
        out = []
        for name in instances:
            mine = found.get(name)
            values = dict(mine.values) if mine else self._no_requests(seconds)
            values.update(server.get(name, {}))
            values.update(gpu.get(name, {}))
            joined = clients.get(name, [])
            if joined:
                values.update(client_signals(joined))
            _put(values, "prefill_queue_mean", prefill.get(name))
            available = set()
            if mine:
                available.add(REQUESTS)
                if mine.stages:
                    available.add(STAGES)
                if mine.split:
                    available.add(DISAGGREGATED)
            if name in scraped:
                available.add(SERVER)
            if gpu.get(name):
                available.add(GPU)
            if joined:
                available.add(CLIENT)
            model = mine.model if mine else (selector.model or "")
            out.append(
                InstanceSignals(
                    name,
                    model,
                    values,
                    frozenset(available) | families_of(values),
                    sources.get(name, {}),
                )
            )
        return WindowSignals(window, tuple(out))

    @staticmethod
    def _no_requests(seconds: float) -> dict[str, float]:
        return {"requests": 0.0, "request_rate": 0.0 / seconds, "error_ratio": 0.0}

    def _rows(self, window: Window, selector: Selector, sides: Sides) -> str:
        """The window's request rows the selector picks, as attributed."""
        table = _raw(self.layout, [window], _touches(selector), sides=sides)
        return f"{table} WHERE {_raw_where(window, selector)}"

    def _requests(
        self, window: Window, selector: Selector, seconds: float, sides: Sides
    ) -> dict[str, _Instance]:
        """Per instance: the request signals, and whether any request had stage timings or
        was served disaggregated."""
        stages = " OR ".join(f"{c} IS NOT NULL" for c in _STAGE_COLUMNS)
        columns = (
            "instance, model, start, trace_id, span_id, status, role, ttft_s, tpot_s, e2e_s,"
            " queue_s, preprocess_s, prefill_s, decode_s, input_tokens, output_tokens,"
            " kv_transfer_s"
        )
        rows = self.transport.rows(
            "SELECT instance, argMin(model, (start, trace_id, span_id)), count(),"
            " countIf(status = 'error'),"
            " quantilesExactInclusive(0.5, 0.9)(ttft_s), quantilesExactInclusive(0.5, 0.9)(tpot_s),"
            " quantileExactInclusive(0.9)(e2e_s), avg(queue_s),"
            " quantileExactInclusive(0.9)(queue_s), avg(preprocess_s), avg(prefill_s),"
            " avg(decode_s), avgIf(decode_s / (output_tokens - 1),"
            " decode_s IS NOT NULL AND output_tokens > 1), avg(input_tokens),"
            " quantileExactInclusiveIf(0.5)(input_tokens, ttft_s >= greatest(cut, 0)),"
            f" countIf({stages}), countIf(role = 'decode'),"
            " avgIf(kv_transfer_s, role = 'decode'),"
            " quantileExactInclusiveIf(0.9)(kv_transfer_s, role = 'decode')"
            f" FROM (SELECT {columns},"
            " quantileExactInclusive(0.9)(ttft_s) OVER (PARTITION BY instance) AS cut"
            f" FROM {self._rows(window, selector, sides)})"
            " GROUP BY instance"
        )
        out = {}
        for (
            instance, model, n, errors, ttft, tpot, e2e_p90, queue_mean, queue_p90,
            preprocess, prefill, decode, per_token, input_mean, slow_input, staged, split,
            kv_mean, kv_p90,
        ) in rows:  # fmt: skip
            count = int(n)
            values: dict[str, float] = {
                "requests": float(count),
                "request_rate": count / seconds,
                "error_ratio": int(errors) / count if count else 0.0,
            }
            _put(values, "ttft_p50", ttft[0])
            _put(values, "ttft_p90", ttft[1])
            _put(values, "tpot_p50", tpot[0])
            _put(values, "tpot_p90", tpot[1])
            _put(values, "e2e_p90", e2e_p90)
            _put(values, "queue_mean", queue_mean)
            _put(values, "queue_p90", queue_p90)
            _put(values, "preprocess_mean", preprocess)
            _put(values, "prefill_mean", prefill)
            _put(values, "decode_mean", decode)
            _put(values, "decode_per_token_mean", per_token)
            _put(values, "input_tokens_mean", input_mean)
            if "ttft_p90" in values:
                _put(values, "slow_input_tokens_p50", slow_input)
            if int(split):
                _put(values, "kv_transfer_mean", kv_mean)
                _put(values, "kv_transfer_p90", kv_p90)
            out[str(instance)] = _Instance(str(model), values, int(staged) > 0, int(split) > 0)
        return out

    def _kv_sources(
        self, window: Window, selector: Selector, instances: Sequence[str], sides: Sides
    ) -> dict[str, dict[str, float]]:
        """A decode instance's mean KV-transfer time by the prefill peer of its split
        requests, the busiest ``MAX_KV_SOURCES`` peers (ties: by name)."""
        if not instances:
            return {}
        rows = self.transport.rows(
            "SELECT instance, peer, count() AS n, avg(kv_transfer_s)"
            f" FROM {self._rows(window, selector, sides)} AND instance IN ({_in(instances)})"
            " AND role = 'decode' AND peer != '' AND kv_transfer_s IS NOT NULL"
            f" GROUP BY instance, peer ORDER BY instance, n DESC, peer"
            f" LIMIT {int(MAX_KV_SOURCES)} BY instance"
        )
        out: dict[str, dict[str, float]] = defaultdict(dict)
        for instance, peer, _, mean in rows:
            out[str(instance)][str(peer)] = float(mean)
        return out

    def _prefill_queues(
        self, window: Window, selector: Selector, instances: Sequence[str], sides: Sides
    ) -> dict[str, float]:
        """Per instance, the mean queue time of its disaggregated requests' prefill legs
        (``request_parts`` joined by trace id; a leg starts after its request, before
        ``READING_SPAN_MAX`` past the window's end)."""
        if not instances:
            return {}
        parts = self.layout.table("request_parts")
        rows = self.transport.rows(
            "SELECT d.instance, avg(p.queue_s)"
            f" FROM (SELECT trace_id, queue_s FROM {parts} FINAL"
            f" WHERE start >= {_time(window.start)}"
            f" AND start < {_time(window.end + READING_SPAN_MAX)} AND queue_s IS NOT NULL) AS p"
            " INNER JOIN (SELECT DISTINCT trace_id, instance"
            f" FROM {self._rows(window, selector, sides)}"
            f" AND instance IN ({_in(instances)}) AND role = 'decode') AS d"
            " ON p.trace_id = d.trace_id GROUP BY d.instance"
        )
        return {str(instance): float(mean) for instance, mean in rows if mean is not None}

    def _server(
        self, window: Window, instances: Sequence[str]
    ) -> tuple[dict[str, dict[str, float]], set[str]]:
        """Per instance, the server signals of its scrapes, and the instances scraped in the
        window (scrapes from ``READING_SPAN_MAX`` before it anchor the preemption counter)."""
        start_us = _micros(window.start)
        inside = f"toUnixTimestamp64Micro(ts) >= {start_us}"
        gauges = ", ".join(f"avgIf({expr}, {inside})" for _, expr in _GAUGES)
        means = ", ".join(f"avgIf({name}, {inside})" for name in _SCRAPE_MEANS)
        rows = self.transport.rows(
            f"SELECT instance, countIf({inside}), {gauges}, {means},"
            f" {_readings('preemptions_total')} AS preempted,"
            f" {_rate('preemptions', 'preempted', start_us)}"
            f" FROM {self.layout.table('server_samples')} FINAL"
            f" WHERE ts >= {_time(window.start - READING_SPAN_MAX)} AND ts < {_time(window.end)}"
            f" AND instance IN ({_in(instances)}) GROUP BY instance"
        )
        out: dict[str, dict[str, float]] = {}
        scraped = set()
        for row in rows:
            instance, count = str(row[0]), int(row[1])
            if not count:
                continue
            scraped.add(instance)
            values: dict[str, float] = {}
            figures = row[2 : 2 + len(_GAUGES)]
            for (name, _), value in zip(_GAUGES, figures, strict=True):
                _put(values, name, value)
            _put(values, "preemptions_per_s", row[-1])
            spec = row[2 + len(_GAUGES) : 2 + len(_GAUGES) + len(_SCRAPE_MEANS)]
            for name, value in zip(_SCRAPE_MEANS, spec, strict=True):
                _put(values, name, value)
            out[instance] = values
        return out, scraped

    def _gpu(self, window: Window, instances: Sequence[str]) -> dict[str, dict[str, float]]:
        """Per instance, the GPU signals of its boards' readings (none without a reading
        that describes part of the window)."""
        start_us, end_us = _micros(window.start), _micros(window.end)
        board = "PARTITION BY instance, gpu_index"
        valid = f"gap_us > 0 AND gap_us <= {_SPAN_US}"
        # A board's usual gap: numpy's median of its gaps in seconds (the mean of the two
        # middle ones), as ``timedelta(seconds=…)`` rounds it to the microsecond.
        usual_s = f"if(n_valid = 0, {_SPAN_US} / 1e6, (gap_lo / 1e6 + gap_hi / 1e6) / 2)"
        usual_us = (
            "toInt64(trunc(usual_s)) * 1000000"
            " + toInt64(roundBankers((usual_s - trunc(usual_s)) * 1e6))"
        )
        weight = (
            f"greatest(0, least(us, {end_us})"
            f" - greatest(us - if({valid}, gap_us, usual_us), {start_us})) / 1e6"
        )
        not_benign = f"[{_in(NOT_BENIGN)}]"
        partial = []
        for name, value, counted in _GPU_MEANS:
            expr = value.format(not_benign=not_benign)
            kept = f"w > 0 AND ({expr}) IS NOT NULL AND {counted}"
            partial += [
                f"sumIf(w * assumeNotNull({expr}), {kept}) AS {name}_num",
                f"sumIf(w, {kept}) AS {name}_den",
            ]
        ecc = [
            f"{_readings(column)} AS {name}_readings, {_rate(name, f'{name}_readings', start_us)}"
            for name, column in _ECC
        ]
        sums = [f"sum({name}_num), sum({name}_den)" for name, _, _ in _GPU_MEANS]
        sums += [f"sum({name}), countIf({name} IS NOT NULL)" for name, _ in _ECC]
        rows = self.transport.rows(
            f"SELECT instance, sum(weighted), sum(xids), {', '.join(sums)} FROM ("
            f" SELECT instance, gpu_index, countIf(w > 0) AS weighted,"
            f" countIf(w > 0 AND xid_last > 0) AS xids, {', '.join(partial)}, {', '.join(ecc)}"
            f" FROM (SELECT *, {weight} AS w FROM (SELECT *, {usual_s} AS usual_s,"
            f" {usual_us} AS usual_us FROM (SELECT *,"
            f" countIf({valid}) OVER ({board}) AS n_valid,"
            f" quantileExactLowIf(0.5)(gap_us, {valid}) OVER ({board}) AS gap_lo,"
            f" quantileExactHighIf(0.5)(gap_us, {valid}) OVER ({board}) AS gap_hi"
            f" FROM (SELECT *, us - lagInFrame(us, 1, us) OVER ({board} ORDER BY us"
            f" ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS gap_us"
            f" FROM (SELECT instance, gpu_index, ts, toUnixTimestamp64Micro(ts) AS us,"
            " if(throttle_reasons = '', CAST([], 'Array(String)'),"
            " splitByChar(',', toString(throttle_reasons))) AS reasons,"
            " util_gpu, util_memory, dram_bw_util, sm_clock_mhz, temperature_c, power_w,"
            " xid_last, ecc_sbe_total, ecc_dbe_total"
            f" FROM {self.layout.table('gpu_samples')} FINAL"
            f" WHERE ts >= {_time(window.start - READING_SPAN_MAX)}"
            f" AND ts <= {_time(window.end)} AND instance IN ({_in(instances)}))))))"
            " GROUP BY instance, gpu_index) GROUP BY instance"
        )
        out: dict[str, dict[str, float]] = {}
        for row in rows:
            if not int(row[1]):
                continue
            means = {}
            at = 3
            for name, _, _ in _GPU_MEANS:
                num, den = float(row[at]), float(row[at + 1])
                means[name] = num / den if den > 0.0 else None
                at += 2
            values: dict[str, float] = {}
            for name in ("util_gpu", "dram_bw_util", "sm_clock_mhz", "throttled_share"):
                _put(values, name, means[name])
            values["xid_samples"] = float(row[2])
            for name in ("temperature_c", "power_w"):
                _put(values, name, means[name])
            for name, _ in _ECC:
                if int(row[at + 1]):
                    values[name] = float(row[at])
                at += 2
            out[str(row[0])] = values
        return out

    def _client_pairs(
        self, window: Window, selector: Selector, aliases: ModelAliases
    ) -> dict[str, list[Pair]]:
        """The window's joined client calls per server instance, those whose server record
        the selector's instance, tenant and priority pick (the labels are the server's)."""
        if self.clients is None:
            return {}
        read = self.clients.read_pairs(
            window, aliases, model=selector.model, max_calls=MAX_CLIENT_CALLS
        )
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
