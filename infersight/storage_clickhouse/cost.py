"""Cost from ClickHouse (issue #36): the store seam's ``CostStore`` over ClickHouse's GPU
samples and rollups, request rows and rollups (as attributed) and prefill legs, with the SQL
store's answer on the same data (``storage.cost``, which this module follows step by step).

* **GPU time** (``gpu_usage``). The interval rule (``core.gpu_intervals``: a sample stands for
  the time to its GPU's next sample, at most the gap) is applied to raw samples **in ClickHouse
  SQL**, as the SQL store's ``gpu_reads.raw_intervals`` applies it: a window function per GPU
  (``leadInFrame`` over ``(instance, gpu_index)`` ordered by time) finds each sample's
  successor among the samples before the span's horizon, and the statement sums seconds,
  idle seconds under the floor, energy and utilisation per GPU. The samples stay in the
  database (a 6-hour window of a large fleet is millions of rows; reading them back to book
  them in Python would move all of them), and the same arithmetic on the same doubles gives the
  same figures: times are ``toUnixTimestamp64Micro(ts) / 1e6`` (PostgreSQL's ``date_part``,
  SQLite's seconds plus fraction and Python's ``timestamp()`` round to the same double), and
  each interval's seconds is a difference of two such doubles. Windows longer than
  ``ROLLUP_MIN_S`` under the default gap, or past minute retention, read the GPU rollups
  (``gpu_rollups``, step 8) between raw edges, cut at ``end − gap`` as ``gpu_reads.covered_time``
  cuts them; idle time under a floor off the histogram's edges is interpolated in its bin.
* **Served work** (``series_usage``): requests, tokens, prefill and decode request-seconds and
  P/D-split requests per series, from raw rows at the window's edges (``requests_attributed``)
  and rollups in between (``request_rollups_<res>`` with the moved requests' rows,
  ``request_moves_<res>``): each request in its series as attributed (``attribution``).
* **Prefill legs** (``prefill_leg_usage``): the prefill pool's work from ``request_parts``,
  a leg whose trace's spans arrived after it filled when read (ClickHouse's attribution moves
  users' requests, not legs).
* **Good tokens**: per series, the tokens of requests that succeeded within the limits the
  series is held to (``core.goodput``), counted exactly: the minutes at the window's ends from
  raw rows; whole hours and days from ``good_token_counts`` (step 9, ``cost_schema``) where a
  kept count still stands for the rollups' requests, else from raw rows, then kept.
  ``CostReads.keep_good_tokens`` is the SQL maintenance job's step for ClickHouse: every raw
  day before today and its hours counted for the limits each series is held to (under the
  policies the job builds from the stored SLOs and cost models) and kept, so that cost
  answers stay exact past the raw retention.

``HybridCost.cost`` prices them with ``core.cost`` as ``storage.cost.cost`` does. Where the
answers can differ from the SQL store's: sums of floats (request-seconds, energy, utilisation)
are added in another order, so a figure rounded to its ``Decimal`` places
(``core.money.decimal_of``) could differ in its last place where the exact sum lies within
~1e-12 of a rounding edge (not seen in the parity tests).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Final

from infersight.core.attribution import DIMENSIONS, JOIN_SKEW, fill
from infersight.core.cost import (
    CostModel,
    CostResult,
    GoodRequest,
    GpuUsage,
    SeriesUsage,
    decimal_of,
    priced,
)
from infersight.core.goodput import GoodLimits, GoodPolicy, GoodRule
from infersight.core.gpu_intervals import BIN_COLUMNS, ROLLUP_GAP_S, floor_on_edge, idle_seconds
from infersight.core.query import Selector, check_group_by
from infersight.core.records import GROUP_LABELS
from infersight.core.slo import SloSpec
from infersight.core.window import Resolution, Segment, Window, split
from infersight.storage.seam import CostStore
from infersight.storage_clickhouse.attribution import LOOKBACK, AttributionWriter, dimensions_at
from infersight.storage_clickhouse.cost_schema import GOOD_TOKEN_COLUMNS
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.reads import (
    Sides,
    _bucket,
    _parse,
    _raw,
    _rollup_rows,
    _time,
)
from infersight.storage_clickhouse.transport import Transport, quote
from infersight.storage_clickhouse.writer import micros, payload

LabelKey = tuple[str, ...]
GpuKey = tuple[str, int]
#: A kept bucket: (resolution, bucket start).
Bucket = tuple[Resolution, datetime]
_N: Final = len(GROUP_LABELS)
_LABELS: Final = ", ".join(GROUP_LABELS)
#: Windows up to this long read GPU time from raw samples (``storage.cost.ROLLUP_MIN_S``).
ROLLUP_MIN_S: Final = 6 * 3600.0
#: The resolutions whose good tokens are kept (``storage.good_tokens.KEPT``).
KEPT: Final = (Resolution.HOUR, Resolution.DAY)
#: The most spans one statement of ``_from_raw_spans`` tags its rows with (a bounded statement).
SPANS_PER_READ: Final = 256


def _literal(value: float) -> str:
    """A float as a ClickHouse literal that parses back to the same double."""
    return repr(float(value))


def _rolled(window: Window, finest: Resolution) -> bool:
    """Whether GPU time over ``window`` comes from the rollups (``storage.cost._rolled``)."""
    return window.seconds > ROLLUP_MIN_S or finest is not Resolution.MINUTE


def idle_method(
    floor: float,
    window: Window,
    gap: float = ROLLUP_GAP_S,
    finest: Resolution = Resolution.MINUTE,
) -> str:
    """``exact``, or ``interpolated`` where rollups serve the window and the floor is off a
    histogram edge (``storage.cost.idle_method``)."""
    rolled = gap == ROLLUP_GAP_S and _rolled(window, finest)
    return "interpolated" if rolled and not floor_on_edge(floor) else "exact"


@dataclass(slots=True)
class Covered:
    """What one GPU's samples cover over a window (``storage.gpu_reads.CoveredTime``)."""

    name: str = ""
    covered_s: float = 0.0
    idle_s: float = 0.0
    energy_j: float = 0.0
    util_s: float = 0.0
    util_weighted_s: float = 0.0
    gpu_slice: str = ""

    def add(self, other: Covered) -> None:
        self.name = max(self.name, other.name)
        self.gpu_slice = max(self.gpu_slice, other.gpu_slice)
        self.covered_s += other.covered_s
        self.idle_s += other.idle_s
        self.energy_j += other.energy_j
        self.util_s += other.util_s
        self.util_weighted_s += other.util_weighted_s


#: A span of raw samples read by the interval rule: ``(lo, hi, horizon)``.
RawSpan = tuple[datetime, datetime, datetime]


@dataclass
class _Acc:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    good_tokens: int = 0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    split: int = 0


@dataclass
class Counted:
    """Good tokens per series over a window (``storage.good_tokens.Counted``)."""

    good_tokens: dict[LabelKey, int] = field(default_factory=lambda: defaultdict(int))
    requests: int = 0
    to_keep: list[list[Any]] = field(default_factory=list)

    def add(
        self, counted: Mapping[LabelKey, tuple[int, int]], only: Iterable[LabelKey] = ()
    ) -> None:
        wanted = set(only)
        for key, (n, tokens) in counted.items():
            if not wanted or key in wanted:
                self.requests += n
                self.good_tokens[key] += tokens


class CostReads:
    """The reads cost prices, over one ClickHouse database."""

    def __init__(self, transport: Transport, layout: Layout) -> None:
        self.transport = transport
        self.layout = layout

    # -- GPU time ---------------------------------------------------------------------------

    def _interval_part(self, part: int, span: RawSpan, gap: float, floor: float, pin: str) -> str:
        """The interval rule over the raw samples of ``span``, per GPU, tagged ``part``
        (``storage.gpu_reads._raw_interval_part``, clause for clause)."""
        lo, hi, horizon = span
        g = _literal(gap)
        window = (
            "(PARTITION BY instance, gpu_index ORDER BY ts"
            " ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING)"
        )
        samples = (
            "SELECT instance, gpu_index, name, gpu_slice, ts, util_gpu AS util,"
            " energy_j AS energy, power_w AS power, toUnixTimestamp64Micro(ts) / 1000000 AS t,"
            f" leadInFrame(toNullable(t), 1, NULL) OVER {window} AS t_next,"
            f" leadInFrame(toNullable(energy_j), 1, NULL) OVER {window} AS energy_next"
            f" FROM {self.layout.table('gpu_samples')} FINAL"
            f" WHERE ts >= {_time(lo)} AND ts < {_time(horizon)}{pin}"
        )
        span_s = f"(ifNull(t_next, {_literal(horizon.timestamp())}) - t)"
        dt = f"if({span_s} > {g}, {g}, {span_s})"
        energy = (
            "multiIf(energy IS NOT NULL AND energy_next IS NOT NULL"
            f" AND t_next - t <= {g}, if(energy_next >= energy, energy_next - energy,"
            f" energy_next), power IS NOT NULL, power * dt, 0.0)"
        )
        intervals = (
            f"SELECT instance, gpu_index, name, gpu_slice, util, {dt} AS dt, {energy} AS joules"
            f" FROM ({samples}) WHERE ts < {_time(hi)}"
        )
        return (
            f"SELECT {part} AS part, instance, gpu_index, max(name), max(gpu_slice), sum(dt),"
            f" sum(if(util < {_literal(floor)}, dt, 0.0)), sum(joules),"
            " sum(if(util IS NOT NULL, dt, 0.0)), sum(ifNull(util, 0.0) * dt)"
            f" FROM ({intervals}) GROUP BY instance, gpu_index"
        )

    def raw_intervals_many(
        self, spans: Sequence[RawSpan], gap: float, floor: float, instance: str | None = None
    ) -> list[dict[GpuKey, Covered]]:
        """The interval rule over the raw samples of each span ``(lo, hi, horizon)`` (samples
        in ``[lo, hi)``, successors looked for before ``horizon``; one with none stands for
        the time to ``horizon``, at most ``gap``), from one statement."""
        if not spans:
            return []
        pin = "" if instance is None else f" AND instance = {quote(instance)}"
        sql = " UNION ALL ".join(
            self._interval_part(k, span, gap, floor, pin) for k, span in enumerate(spans)
        )
        out: list[dict[GpuKey, Covered]] = [{} for _ in spans]
        for row in self.transport.rows(sql):
            covered, idle, energy, util_s, weighted = (float(v or 0.0) for v in row[5:])
            out[int(row[0])][(str(row[1]), int(row[2]))] = Covered(
                str(row[3] or ""), covered, idle, energy, util_s, weighted, str(row[4] or "")
            )
        return out

    def covered_time(
        self,
        window: Window,
        floor: float,
        instance: str | None = None,
        finest: Resolution = Resolution.MINUTE,
    ) -> dict[GpuKey, Covered]:
        """``raw_intervals(window.start, window.end, window.end)`` per GPU from the rollups
        with raw samples at the edges (``storage.gpu_reads.covered_time``): whole intervals
        before ``end − gap`` (raw edges, rollups between), the last gap raw with the window's
        own end; past minute retention the rollup buckets alone."""
        gap = ROLLUP_GAP_S
        cut = window.end if finest is not Resolution.MINUTE else window.end - timedelta(seconds=gap)
        out: dict[GpuKey, Covered] = defaultdict(Covered)

        def add(parts: Mapping[GpuKey, Covered]) -> None:
            for key, part in parts.items():
                out[key].add(part)

        if cut <= window.start:
            add(
                self.raw_intervals_many(
                    [(window.start, window.end, window.end)], gap, floor, instance
                )[0]
            )
            return dict(out)
        segments = split(Window(window.start, cut), finest)
        spans: list[RawSpan] = [
            (seg.start, seg.end, seg.end + timedelta(seconds=gap)) for seg in segments if seg.raw
        ]
        spans.append((cut, window.end, window.end))
        for parts in self.raw_intervals_many(spans, gap, floor, instance):
            add(parts)
        rolled = [seg for seg in segments if not seg.raw]
        if rolled:
            add(self._rolled_covered(rolled, floor, instance))
        return dict(out)

    def _rolled_covered(
        self, segments: Sequence[Segment], floor: float, instance: str | None
    ) -> dict[GpuKey, Covered]:
        """The GPU rollups of ``segments`` summed per GPU (idle time off the summed bins)."""
        columns = ("covered_s", "energy_j", "util_s", "util_weighted_s", *BIN_COLUMNS)
        pin = "" if instance is None else f" AND instance = {quote(instance)}"
        union = " UNION ALL ".join(
            f"SELECT instance, gpu_index, name, gpu_slice, {', '.join(columns)}"
            f" FROM {self.layout.table(f'gpu_rollups_{seg.resolution.value}')} FINAL"  # type: ignore[union-attr]
            f" WHERE bucket >= {_bucket(seg.start)} AND bucket < {_bucket(seg.end)}{pin}"
            for seg in segments
        )
        sums = ", ".join(f"sum({c})" for c in columns)
        rows = self.transport.rows(
            f"SELECT instance, gpu_index, max(name), max(gpu_slice), {sums}"
            f" FROM ({union}) GROUP BY instance, gpu_index"
        )
        out = {}
        for row in rows:
            covered, energy, util_s, weighted, *bins = (float(v or 0.0) for v in row[4:])
            out[(str(row[0]), int(row[1]))] = Covered(
                str(row[2] or ""),
                covered,
                idle_seconds(bins, floor),
                energy,
                util_s,
                weighted,
                str(row[3] or ""),
            )
        return out

    def gpu_usage(
        self,
        window: Window,
        model: CostModel,
        instance: str | None = None,
        finest: Resolution = Resolution.MINUTE,
    ) -> list[GpuUsage]:
        """One ``GpuUsage`` per (instance, GPU) that sampled within ``window``
        (``storage.cost.gpu_usage``)."""
        floor = model.idle_utilisation_floor
        gap = float(model.sample_gap_s)
        if gap == ROLLUP_GAP_S and _rolled(window, finest):
            parts = self.covered_time(window, floor, instance, finest)
        else:
            parts = self.raw_intervals_many(
                [(window.start, window.end, window.end)], gap, floor, instance
            )[0]
        out = []
        for (name, index), part in parts.items():
            seconds = decimal_of(part.covered_s, 3)
            out.append(
                GpuUsage(
                    instance=name,
                    gpu_index=index,
                    name=part.name,
                    gpu_seconds=seconds,
                    idle_seconds=min(seconds, decimal_of(max(part.idle_s, 0.0), 3)),
                    energy_j=decimal_of(max(part.energy_j, 0.0), 3),
                    util_seconds=part.util_s,
                    util_weighted=part.util_weighted_s,
                    gpu_slice=part.gpu_slice,
                )
            )
        return sorted(out, key=lambda u: (u.instance, u.gpu_index))

    # -- served work ------------------------------------------------------------------------

    def _raw_series(
        self, edges: Sequence[Segment], instance: str | None, sides: Sides
    ) -> list[list[Any]]:
        """Per series over the raw ``edges`` (as attributed): requests, tokens, prefill and
        decode seconds and requests with a KV-transfer time (one statement)."""
        if not edges:
            return []
        pin = "" if instance is None else f" AND instance = {quote(instance)}"
        sql = " UNION ALL ".join(
            f"SELECT {_LABELS}, count(), sum(ifNull(input_tokens, 0)),"
            " sum(ifNull(output_tokens, 0)), sum(ifNull(prefill_s, 0.0)),"
            " sum(ifNull(decode_s, 0.0)), count(kv_transfer_s)"
            f" FROM {_raw(self.layout, [edge], sides=sides)}"
            f" WHERE start >= {_time(edge.start)} AND start < {_time(edge.end)}{pin}"
            f" GROUP BY {_LABELS}"
            for edge in edges
        )
        return self.transport.rows(sql)

    def _rollup_series(
        self, segments: Sequence[Segment], instance: str | None, sides: Sides
    ) -> list[list[Any]]:
        """Per segment ``K``, bucket and series, the rollups with their corrections
        (``reads._rollup_rows``: the moved requests' rows, as attributed): ``K``, the series,
        requests, tokens, prefill and decode sums, the bucket and the requests with a
        KV-transfer time."""
        if not segments:
            return []
        selector = Selector() if instance is None else Selector(instance=instance)
        columns = (
            f"bucket, {_LABELS}, requests, input_tokens, output_tokens, prefill_sum,"
            " decode_sum, kv_transfer_zero, kv_transfer_buckets"
        )
        parts = [
            f"SELECT {k} AS part, {_LABELS}, sum(requests), sum(input_tokens),"
            " sum(output_tokens), sum(prefill_sum), sum(decode_sum), toUnixTimestamp(bucket),"
            " sum(kv_transfer_zero) + sum(arraySum(mapValues(kv_transfer_buckets)))"
            f" FROM ({_rollup_rows(self.layout, [seg], selector, columns, sides=sides)})"
            f" GROUP BY bucket, {_LABELS}"
            for k, seg in enumerate(segments)
        ]
        return self.transport.rows(" UNION ALL ".join(parts))

    def series_usage(
        self,
        window: Window,
        good: GoodPolicy | GoodRequest,
        instance: str | None = None,
        finest: Resolution = Resolution.MINUTE,
        pending: list[list[Any]] | None = None,
        rules: dict[LabelKey, GoodRule] | None = None,
    ) -> tuple[list[SeriesUsage], bool]:
        """What every series served over ``window``, and whether good tokens are exact
        (``storage.cost.series_usage``); buckets freshly counted from complete raw rows are
        added to ``pending`` for ``keep``."""
        policy = good if isinstance(good, GoodPolicy) else GoodPolicy((), good.limits)
        acc: dict[LabelKey, _Acc] = defaultdict(_Acc)
        rolled: dict[Bucket, dict[LabelKey, int]] = defaultdict(dict)
        segments = split(window, finest)
        edges = [s for s in segments if s.raw]
        rollups = [s for s in segments if not s.raw]
        sides = Sides.probe(self.transport, self.layout, [window])  # both reads below
        for row in self._raw_series(edges, instance, sides):
            a = acc[tuple(str(v) for v in row[:_N])]
            requests_, input_, output, prefill, decode, split_ = row[_N:]
            a.requests += int(requests_)
            a.input_tokens += int(input_)
            a.output_tokens += int(output)
            a.prefill_s += float(prefill)
            a.decode_s += float(decode)
            a.split += int(split_)
        for row in self._rollup_series(rollups, instance, sides):
            segment = rollups[int(row[0])]
            key = tuple(str(v) for v in row[1 : _N + 1])
            requests_, input_, output, prefill, decode, at, transfer = row[_N + 1 :]
            bucket = datetime.fromtimestamp(int(at), UTC)
            if segment.resolution in KEPT:
                rolled[(segment.resolution, bucket)][key] = int(requests_)
            a = acc[key]
            a.requests += int(requests_)
            a.input_tokens += int(input_)
            a.output_tokens += int(output)
            a.prefill_s += float(prefill or 0.0)
            a.decode_s += float(decode or 0.0)
            a.split += int(transfer)
        bases, exact = self._good_tokens(
            acc, policy, rolled, _unkept(segments), instance, pending, rules
        )
        series = [
            SeriesUsage(
                labels=dict(zip(GROUP_LABELS, key, strict=True)),
                requests=a.requests,
                input_tokens=a.input_tokens,
                output_tokens=a.output_tokens,
                good_tokens=a.good_tokens,
                prefill_s=decimal_of(a.prefill_s),
                decode_s=decimal_of(a.decode_s),
                good_basis=bases[key],
                role="decode" if a.split else "",
            )
            for key, a in sorted(acc.items())
            if a.requests
        ]
        return series, exact

    def prefill_leg_usage(self, window: Window, instance: str | None = None) -> list[SeriesUsage]:
        """The prefill pool's work over ``window`` (``storage.cost.prefill_leg_usage``): one
        series per labels of the prefill legs it ran, weighted by their prefill time (their
        TTFT, else their end to end time), with no requests or tokens of their own.

        Legs are labelled as attributed: ClickHouse's attribution fills a leg before it is
        stored but moves only users' requests after (``attribution``), so a leg with a
        dimension still empty whose trace has gateway or client spans is filled here, when
        read, as the SQL store rewrites it (``core.attribution.fill`` of the spans it
        started within, ``attribution.dimensions_at``); the other legs are summed in
        ClickHouse."""
        where = f"start >= {_time(window.start)} AND start < {_time(window.end)}"
        if instance is not None:
            where += f" AND instance = {quote(instance)}"
        low, high = window.start - LOOKBACK, window.end + JOIN_SKEW
        empty = " OR ".join(f"{d} = ''" for d in DIMENSIONS)
        within = "GLOBAL IN" if self.layout.cluster else "IN"
        traced = (
            f"trace_id {within} (SELECT trace_id FROM {self.layout.table('attributions')}"
            f" WHERE start >= {_time(low)} AND start <= {_time(high)})"
        )
        weight = "ifNull(coalesce(prefill_s, ttft_s, e2e_s), 0.0)"
        legs = self.layout.table("request_parts")
        sums: dict[LabelKey, float] = defaultdict(float)
        for row in self.transport.rows(
            f"SELECT {_LABELS}, sum({weight}) FROM {legs} FINAL"
            f" WHERE {where} AND NOT (({empty}) AND {traced}) GROUP BY {_LABELS}"
        ):
            sums[tuple(str(v) for v in row[:_N])] += float(row[_N])
        unfilled = self.transport.rows(
            f"SELECT trace_id, start, {_LABELS}, {weight} FROM {legs} FINAL"
            f" WHERE {where} AND ({empty}) AND {traced}"
        )
        if unfilled:
            writer = AttributionWriter(self.transport, self.layout)
            spans = writer.spans({str(r[0]) for r in unfilled}, low, high)
            for trace, start, *rest in unfilled:
                labels = dict(zip(GROUP_LABELS, (str(v) for v in rest[:_N]), strict=True))
                found = spans.get(str(trace))
                if found:
                    labels.update(fill(labels, dimensions_at(found, _parse(start))))
                sums[tuple(labels[n] for n in GROUP_LABELS)] += float(rest[_N])
        return [
            SeriesUsage(
                labels=dict(zip(GROUP_LABELS, key, strict=True)),
                prefill_s=decimal_of(total),
                role="prefill",
            )
            for key, total in sorted(sums.items())
        ]

    # -- good tokens ------------------------------------------------------------------------

    def _good_tokens(
        self,
        acc: dict[LabelKey, _Acc],
        policy: GoodPolicy,
        rolled: dict[Bucket, dict[LabelKey, int]],
        ranges: list[tuple[datetime, datetime]],
        instance: str | None,
        pending: list[list[Any]] | None,
        rules: dict[LabelKey, GoodRule] | None,
    ) -> tuple[dict[LabelKey, str], bool]:
        """Add each series' good tokens to ``acc``, counted once per set of limits for the
        series held to it; the basis of each series, and whether every request was counted."""
        held: dict[GoodLimits, list[LabelKey]] = defaultdict(list)
        bases: dict[LabelKey, str] = {}
        for key in sorted(k for k, a in acc.items() if a.requests):
            rule = policy.rule_for(dict(zip(GROUP_LABELS, key, strict=True)))
            held[rule.limits].append(key)
            bases[key] = rule.basis.value
            if rules is not None:
                rules[key] = rule
        counted_requests = 0
        for limits, series in sorted(held.items(), key=lambda item: item[0].key):
            counted = self.count(limits, rolled, ranges, instance, series=series)
            for key, tokens in counted.good_tokens.items():
                acc[key].good_tokens += tokens
            counted_requests += counted.requests
            if pending is not None:
                pending += counted.to_keep
        return bases, counted_requests == sum(a.requests for a in acc.values())

    def _from_raw_spans(
        self,
        spans: Sequence[tuple[datetime, datetime]],
        good: GoodLimits,
        instance: str | None = None,
    ) -> list[dict[LabelKey, tuple[int, int]]]:
        """Per span (disjoint), per series as attributed: (raw requests, good tokens), from
        one statement per ``SPANS_PER_READ`` spans: each run of adjacent spans read in one
        scan, its rows tagged with the span they fall in."""
        pin = "" if instance is None else f" AND instance = {quote(instance)}"
        good_row = " AND ".join(
            ["status = 'ok'"]
            + [f"({name} IS NULL OR {name} <= {_literal(limit)})" for name, limit in good.items()]
        )
        tokens = "ifNull(input_tokens, 0) + ifNull(output_tokens, 0)"
        out: list[dict[LabelKey, tuple[int, int]]] = [{} for _ in spans]
        if not spans:
            return out
        order = sorted(range(len(spans)), key=lambda k: spans[k])
        sides = Sides.probe(self.transport, self.layout, [Window(lo, hi) for lo, hi in spans])
        for first in range(0, len(order), SPANS_PER_READ):
            runs: list[list[int]] = []
            for k in order[first : first + SPANS_PER_READ]:
                if runs and spans[runs[-1][-1]][1] == spans[k][0]:
                    runs[-1].append(k)
                else:
                    runs.append([k])
            reads = []
            for run in runs:
                low, high = spans[run[0]][0], spans[run[-1]][1]
                tags = ", ".join(f"start < {_time(spans[k][1])}, {k}" for k in run[:-1])
                part = f"multiIf({tags}, {run[-1]})" if tags else str(run[-1])
                reads.append(
                    f"SELECT {part} AS part, {_LABELS}, count(),"
                    f" sum(if({good_row}, {tokens}, 0))"
                    f" FROM {_raw(self.layout, [Window(low, high)], sides=sides)}"
                    f" WHERE start >= {_time(low)} AND start < {_time(high)}{pin}"
                    f" GROUP BY part, {_LABELS}"
                )
            for row in self.transport.rows(" UNION ALL ".join(reads)):
                key = tuple(str(v) for v in row[1 : _N + 1])
                out[int(row[0])][key] = (int(row[_N + 1]), int(row[_N + 2]))
        return out

    def _kept(
        self, good: GoodLimits, buckets: Iterable[Bucket], instance: str | None
    ) -> dict[Bucket, dict[LabelKey, tuple[int, int]]]:
        wanted = sorted(buckets)
        if not wanted:
            return {}
        starts = [start for _, start in wanted]
        resolutions = ", ".join(sorted({quote(r.value) for r, _ in wanted}))
        limits = " AND ".join(
            f"{name} = {_literal(value)}"
            for name, value in zip(GOOD_TOKEN_COLUMNS[:3], good.key, strict=True)
        )
        pin = "" if instance is None else f" AND instance = {quote(instance)}"
        rows = self.transport.rows(
            f"SELECT resolution, toUnixTimestamp(bucket), {_LABELS}, requests, good_tokens"
            f" FROM {self.layout.table('good_token_counts')} FINAL WHERE {limits}"
            f" AND resolution IN ({resolutions}) AND bucket >= {_bucket(min(starts))}"
            f" AND bucket <= {_bucket(max(starts))}{pin}"
        )
        out: dict[Bucket, dict[LabelKey, tuple[int, int]]] = defaultdict(dict)
        for resolution, at, *rest in rows:
            bucket = (Resolution(resolution), datetime.fromtimestamp(int(at), UTC))
            out[bucket][tuple(str(v) for v in rest[:_N])] = (int(rest[_N]), int(rest[_N + 1]))
        return out

    def count(
        self,
        good: GoodLimits,
        rolled: Mapping[Bucket, Mapping[LabelKey, int]],
        ranges: Iterable[tuple[datetime, datetime]],
        instance: str | None = None,
        series: Iterable[LabelKey] | None = None,
    ) -> Counted:
        """Good tokens over the hour and day buckets of ``rolled`` (with each bucket's rollup
        request counts per series) and over the other ``ranges`` of a window (raw rows), of
        the ``series`` held to ``good`` (all when ``None``): ``storage.good_tokens.count``."""
        only = None if series is None else set(series)

        def mine(counted: Mapping[LabelKey, tuple[int, int]]) -> dict[LabelKey, tuple[int, int]]:
            return {k: v for k, v in counted.items() if only is None or k in only}

        out = Counted()
        ranges = list(ranges)
        rolled = {
            bucket: {k: n for k, n in counts.items() if only is None or k in only}
            for bucket, counts in rolled.items()
        }
        rolled = {bucket: counts for bucket, counts in rolled.items() if counts}
        kept = self._kept(good, rolled, instance)
        buckets = sorted(rolled.items())
        stale = [bucket for bucket, counts in buckets if not _stands(kept.get(bucket, {}), counts)]
        spans = [(start, start + timedelta(seconds=r.seconds)) for r, start in stale]
        # The raw ranges and the buckets no kept count stands for, in one scan.
        counted_all = self._from_raw_spans([*ranges, *spans], good, instance)
        for counted in counted_all[: len(ranges)]:
            out.add(mine(counted))
        recounted = dict(zip(stale, counted_all[len(ranges) :], strict=True))
        for bucket, counts in buckets:
            if bucket not in recounted:
                out.add(kept[bucket], counts)
                continue
            counted = mine(recounted[bucket])
            out.add(counted)
            if all(counted.get(key, (0, 0))[0] == n for key, n in counts.items()):
                out.to_keep += _rows(good, bucket, counted)
        return out

    def keep(self, rows: Sequence[Sequence[Any]], version: int) -> None:
        """Store counted buckets (each replacing what was kept of its key: ``FINAL``)."""
        if not rows:
            return
        settings: dict[str, Any] = {}
        if self.layout.cluster:
            settings["distributed_foreground_insert"] = 1
        self.transport.insert(
            self.layout.table("good_token_counts"),
            GOOD_TOKEN_COLUMNS,
            payload([[*row, version] for row in rows]),
            settings,
        )

    # -- kept counts (the maintenance job) --------------------------------------------------

    def _series_of_day(self, start: datetime) -> list[LabelKey]:
        """The series (as attributed) with requests on the day from ``start``, from its day
        rollups and their moves (``storage.good_tokens._series_of_day``)."""
        segment = Segment(start, start + timedelta(days=1), Resolution.DAY)
        sides = Sides.probe(self.transport, self.layout, [segment])
        inner = _rollup_rows(
            self.layout, [segment], Selector(), f"{_LABELS}, requests", sides=sides
        )
        rows = self.transport.rows(
            f"SELECT {_LABELS} FROM ({inner}) GROUP BY {_LABELS} HAVING sum(requests) > 0"
        )
        return [tuple(str(v) for v in row) for row in rows]

    def keep_days(self, policies: Iterable[GoodPolicy], days: Iterable[date]) -> int:
        """Count each of ``days`` and its hours from raw rows, for each set of limits its
        series are held to under ``policies`` and not kept yet for them, and keep them
        (``storage.good_tokens.keep_days``, what the maintenance job runs for the raw days
        before today, so that cost answers outlive the raw retention). Returns the (limits,
        day) pairs counted."""
        counted = 0
        policies = list(policies)
        for day in sorted(set(days)):
            start = datetime.combine(day, time(), tzinfo=UTC)
            rows: list[list[Any]] = []
            groups = _held_to(policies, self._series_of_day(start))
            for good, series in sorted(groups.items(), key=lambda g: g[0].key):
                kept = self._kept(good, [(Resolution.DAY, start)], None)
                if series <= set(kept.get((Resolution.DAY, start), {})):
                    continue
                (whole,) = self._from_raw_spans([(start, start + timedelta(days=1))], good)
                whole = {k: v for k, v in whole.items() if k in series}
                if not whole:
                    continue
                rows += _rows(good, (Resolution.DAY, start), whole)
                hours = [
                    (start + timedelta(hours=h), start + timedelta(hours=h + 1)) for h in range(24)
                ]
                for (at, _), part in zip(hours, self._from_raw_spans(hours, good), strict=True):
                    mine = {k: v for k, v in part.items() if k in series}
                    rows += _rows(good, (Resolution.HOUR, at), mine)
                counted += 1
            self.keep(rows, micros(datetime.now(UTC)))
        return counted

    def keep_good_tokens(self, today: date, policies: Iterable[GoodPolicy]) -> int:
        """``keep_days`` for every raw day before ``today`` (the SQL store's maintenance
        step ``storage.maintenance._keep_good_tokens``, given the policies it builds from the
        stored SLOs and cost models)."""
        rows = self.transport.rows(
            f"SELECT count(), toDate(min(start)) FROM {self.layout.table('requests')}"
        )
        if not rows or not int(rows[0][0]):
            return 0
        oldest = date.fromisoformat(str(rows[0][1]))
        days = [oldest + timedelta(days=i) for i in range((today - oldest).days)]
        return self.keep_days(policies, days) if days else 0


def _held_to(
    policies: Iterable[GoodPolicy], series: Iterable[LabelKey]
) -> dict[GoodLimits, set[LabelKey]]:
    """The series held to each set of limits under any of ``policies``."""
    out: dict[GoodLimits, set[LabelKey]] = defaultdict(set)
    keys = list(series)
    for policy in policies:
        for key in keys:
            out[policy.rule_for(dict(zip(GROUP_LABELS, key, strict=True))).limits].add(key)
    return out


def _stands(stored: Mapping[LabelKey, tuple[int, int]], counts: Mapping[LabelKey, int]) -> bool:
    """Whether a kept bucket stands for the rollups' ``counts`` (the same requests per
    series)."""
    return bool(stored) and all(stored.get(key, (-1, 0))[0] == n for key, n in counts.items())


def _rows(
    good: GoodLimits, bucket: Bucket, counted: Mapping[LabelKey, tuple[int, int]]
) -> list[list[Any]]:
    """``good_token_counts`` rows (without their version) of a counted bucket."""
    resolution, start = bucket
    return [
        [*good.key, resolution.value, start.strftime("%Y-%m-%d %H:%M:%S"), *key, n, tokens]
        for key, (n, tokens) in sorted(counted.items())
    ]


def _unkept(segments: Sequence[Segment]) -> list[tuple[datetime, datetime]]:
    """The ranges of a window outside its hour and day segments (good tokens from raw rows)."""
    out: list[tuple[datetime, datetime]] = []
    for seg in segments:
        if seg.resolution in KEPT:
            continue
        if out and out[-1][1] == seg.start:
            out[-1] = (out[-1][0], seg.end)
        else:
            out.append((seg.start, seg.end))
    return out


class HybridCost:
    """``seam.CostStore`` from ClickHouse: ``cost`` priced from its GPU samples and rollups,
    requests and prefill legs (see the module); ``good_policy`` reads the stored SLOs (state:
    the SQL store's)."""

    def __init__(self, sql: CostStore, transport: Transport, layout: Layout) -> None:
        self._sql = sql
        self._reads = CostReads(transport, layout)

    def good_policy(self, model: CostModel, slos: Sequence[SloSpec] | None = None) -> GoodPolicy:
        return self._sql.good_policy(model, slos)

    def idle_method(
        self,
        floor: float,
        window: Window,
        gap: float | None = None,
        finest: Resolution = Resolution.MINUTE,
    ) -> str:
        return idle_method(floor, window, ROLLUP_GAP_S if gap is None else gap, finest)

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
        """``storage.cost.cost`` over ClickHouse: every instance that sampled GPUs or served
        requests in the window priced and attributed to the series it served; the groups
        are the attributed lines of the series ``selector`` picks, summed per ``group_by``."""
        groups = check_group_by(group_by)
        pending: list[list[Any]] = []
        rules: dict[LabelKey, GoodRule] = {}
        policy = self.good_policy(model, slos)
        reads = self._reads
        usage = reads.gpu_usage(window, model, selector.instance, finest)
        series, exact = reads.series_usage(
            window, policy, selector.instance, finest, pending, rules
        )
        series += reads.prefill_leg_usage(window, selector.instance)
        reads.keep(pending, micros(datetime.now(UTC)))
        return priced(
            window, model, selector, groups, usage, series, good_tokens_exact=exact, rules=rules
        )


__all__ = ["KEPT", "ROLLUP_MIN_S", "CostReads", "Covered", "HybridCost", "idle_method"]
