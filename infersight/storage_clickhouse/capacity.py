"""Per-instance capacity measured in production, from ClickHouse's minute rollups (issue #36):
``storage.capacity.production_capacity``'s answer on the same data.

Each instance-minute's requests that succeeded and its output tokens are added up over its
series (with the moves of requests attributed after they were stored, when the selector pins
a tenant: ``reads._touches``) and read busiest first, a page at a time. Only the candidates'
TTFT and TPOT sketches are read — in batches of 1, 16, then 256, merged per
instance-minute by ClickHouse (the same buckets, counts, minimum and maximum the SQL store's
``merge_bytes`` gives: ``reads._sketch``) — until one meets the P99 targets. Minutes as busy
as each other are ordered by (instance, minute), greatest first, as the SQL store's search
orders them, so the first that fits is the same minute.

The selector is read as the SQL store reads it: its model, instance, tenant, priority and
tenant set (other labels are not kept per instance-minute there).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Final

from infersight.core.errors import InvalidInput
from infersight.core.loadtest import MeasuredCapacity
from infersight.core.query import Selector
from infersight.core.window import Resolution, Segment, Window
from infersight.storage_clickhouse.reads import (
    _SKETCH_PARTS,
    Reads,
    _bucket,
    _parse,
    _rollup_rows,
    _sketch,
    _touches,
)
from infersight.storage_clickhouse.transport import quote

_MINUTE: Final = Resolution.MINUTE
#: Candidate minutes whose sketches one read fetches: the first batch is the busiest minute
#: alone (usually within the targets), each further one ``GROWTH`` times the last, up to
#: ``MAX_BATCH`` (``storage.capacity`` grows by 4: here each read is a statement over the
#: rollups and their moves, so fewer, larger batches).
MAX_BATCH: Final = 256
GROWTH: Final = 16
#: The most time ranges one read of candidates' sketches covers (the rollup statement per
#: range: the candidates' minutes grouped at their widest gaps).
MAX_RANGES: Final = 4
#: Instance-minutes read per page of the busiest-first totals.
PAGE: Final = 4096
#: The metrics whose P99 a target limits, by the argument that sets it.
_TARGETS: Final = ("ttft", "tpot")

#: One instance-minute: requests that succeeded, instance, minute, output tokens.
Candidate = tuple[int, str, datetime, int]


def capacity_selector(selector: Selector) -> Selector:
    """The part of ``selector`` the SQL store's capacity read filters by: model, instance,
    tenant, priority and the tenant set."""
    return Selector(
        model=selector.model,
        instance=selector.instance,
        tenant=selector.tenant,
        priority=selector.priority,
    ).within(selector.tenants)


def _minutes(window: Window) -> Segment | None:
    """The minute buckets that start in ``window`` (``bucket >= start AND bucket < end`` to
    the microsecond, as whole minutes: the first bucket at or after each bound)."""
    start, end = _MINUTE.ceil(window.start), _MINUTE.ceil(window.end)
    return Segment(start, end, _MINUTE) if start < end else None


def _ranges(buckets: Sequence[datetime], most: int = MAX_RANGES) -> list[Segment]:
    """At most ``most`` minute segments covering ``buckets``: split at their widest gaps."""
    at = sorted(set(buckets))
    gaps = sorted(range(1, len(at)), key=lambda i: (at[i] - at[i - 1], i), reverse=True)
    cuts = sorted(gaps[: most - 1])
    step = timedelta(seconds=_MINUTE.seconds)
    return [
        Segment(at[lo], at[hi - 1] + step, _MINUTE)
        for lo, hi in zip([0, *cuts], [*cuts, len(at)], strict=True)
    ]


def _meets(value: float | None, limit: float | None) -> bool:
    return limit is None or (value is not None and value <= limit)


class CapacityReads(Reads):
    """``RequestStore.production_capacity`` over ClickHouse."""

    def production_capacity(
        self,
        window: Window,
        selector: Selector,
        *,
        ttft_p99_max_s: float | None = None,
        tpot_p99_max_s: float | None = None,
        instances: Collection[str] | None = None,
    ) -> MeasuredCapacity:
        """The busiest instance-minute of ``window`` within the targets (concurrency unknown:
        0), of ``instances`` only where given (``storage.capacity.production_capacity``)."""
        picked = capacity_selector(selector)
        limits = {
            name: limit
            for name, limit in zip(_TARGETS, (ttft_p99_max_s, tpot_p99_max_s), strict=True)
            if limit is not None
        }
        segment = _minutes(window)
        read = 0
        best: Candidate | None = None
        if segment is not None and (instances is None or instances):
            among = self._among(instances)
            batch: list[Candidate] = []
            size = 1
            for candidate, seen in self._busiest(segment, picked, among):
                read = seen
                if candidate is None:
                    continue
                batch.append(candidate)
                if len(batch) < size:
                    continue
                best = self._first_fit(batch, picked, among, limits)
                if best is not None:
                    break
                batch, size = [], min(size * GROWTH, MAX_BATCH)
            if best is None and batch:
                best = self._first_fit(batch, picked, among, limits)
        if best is None:
            raise InvalidInput(
                "no instance-minute of production traffic in the window met the latency targets",
                details={"minutes": read},
            )
        ok, instance, bucket, output_tokens = best
        return MeasuredCapacity(
            throughput_rps=ok / _MINUTE.seconds,
            concurrency=0,
            mean_output_tokens=output_tokens / ok,
            phase=f"{instance} at {bucket:%Y-%m-%d %H:%M}",
        )

    @staticmethod
    def _among(instances: Collection[str] | None) -> str:
        """The rows of ``instances`` (a condition; ``1``: every instance)."""
        if instances is None:
            return "1"
        return f"instance IN ({', '.join(quote(i) for i in sorted(instances))})"

    def _busiest(
        self, segment: Segment, selector: Selector, among: str
    ) -> Iterator[tuple[Candidate | None, int]]:
        """Every instance-minute of ``segment``, busiest first (ties: greatest instance, then
        minute, first), with how many were read so far; ``None`` for a minute with no request
        that succeeded (read, never a candidate)."""
        inner = _rollup_rows(
            self.layout,
            [segment],
            selector,
            "instance, bucket, requests, errors, output_tokens",
            attributed=_touches(selector),
            sides=self._sides(segment),
        )
        seen = 0
        while True:
            rows = self.transport.rows(
                "SELECT instance, bucket, toInt64(sum(requests)) - toInt64(sum(errors)) AS ok,"
                f" toInt64(sum(output_tokens)) FROM ({inner}) WHERE {among}"
                " GROUP BY instance, bucket ORDER BY ok DESC, instance DESC, bucket DESC"
                f" LIMIT {PAGE} OFFSET {seen}"
            )
            for instance, bucket, ok, out in rows:
                seen += 1
                if int(ok) > 0:
                    yield (int(ok), str(instance), _parse(bucket), int(out)), seen
                else:
                    yield None, seen
            if len(rows) < PAGE:
                return

    def _first_fit(
        self,
        batch: list[Candidate],
        selector: Selector,
        among: str,
        limits: dict[str, float],
    ) -> Candidate | None:
        """The first minute of ``batch`` whose merged sketches meet ``limits``, if any."""
        if not limits:
            return batch[0]
        metrics = list(limits)
        names = [[f"{m}_{part}" for part in _SKETCH_PARTS] for m in metrics]
        attributed = _touches(selector)
        ranges = _ranges([at for _ok, _instance, at, _out in batch])
        inner = _rollup_rows(
            self.layout,
            ranges,
            selector,
            "instance, bucket, " + ", ".join(n for ns in names for n in ns),
            metrics,
            attributed=attributed,
            sides=self._sides(*ranges),
        )
        merged = ", ".join(
            f"sumMap({b}), sum({z}), sum({t}), min({low}), max({high})"
            for b, z, t, low, high in names
        )
        wanted = sorted({instance for _ok, instance, _at, _out in batch})
        minutes = sorted({at for _ok, _instance, at, _out in batch})
        rows = self.transport.rows(
            f"SELECT instance, bucket, {merged} FROM ({inner}) WHERE {among}"
            f" AND instance IN ({', '.join(quote(i) for i in wanted)})"
            f" AND bucket IN ({', '.join(_bucket(b) for b in minutes)})"
            " GROUP BY instance, bucket"
        )
        p99: dict[tuple[str, datetime], dict[str, float | None]] = {}
        width = len(_SKETCH_PARTS)
        for row in rows:
            values: dict[str, float | None] = {}
            for i, metric in enumerate(metrics):
                sketch = _sketch(row[2 + width * i : 2 + width * (i + 1)])
                values[metric] = None if sketch is None else sketch.quantile(0.99)
            p99[(str(row[0]), _parse(row[1]))] = values
        for candidate in batch:
            _ok, instance, bucket, _out = candidate
            found = p99.get((instance, bucket), {})
            if all(_meets(found.get(m), limit) for m, limit in limits.items()):
                return candidate
        return None
