"""Per-instance capacity measured in production: the busiest minute that met the targets.

Reads the minute rollups (counts and one sketch per latency metric per series), merges the
series of each instance and minute, and keeps the minutes whose p99 TTFT and TPOT met the
targets. The busiest of those is what one instance has been seen to sustain: a lower bound on
its capacity (production may never have pushed it to its knee; a step run finds the knee).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, select

from infersight.core.errors import InvalidInput
from infersight.core.loadtest import MeasuredCapacity
from infersight.core.query import Selector
from infersight.core.sketch import merge_bytes
from infersight.core.window import Resolution, Window
from infersight.storage.tables import request_rollups

_SECONDS = Resolution.MINUTE.seconds


#: Candidate minutes whose sketches one read fetches: the first batch is the busiest minute
#: alone (usually within the targets), each further batch four times the last, up to this.
_MAX_BATCH = 256

#: One instance-minute: requests that succeeded, instance, minute, output tokens.
Candidate = tuple[int, str, datetime, int]


def _order(minute: Candidate) -> tuple[str, datetime]:
    return minute[1], minute[2]


def _filters(selector: Selector) -> Iterable[Any]:
    for label in ("model", "instance", "tenant", "priority"):
        value = getattr(selector, label)
        if value is not None:
            yield request_rollups.c[label] == value
    if selector.tenants is not None:  # a token limited to tenants (core.query.Selector)
        yield request_rollups.c.tenant.in_(sorted(selector.tenants))


def _p99(blobs: list[bytes]) -> float | None:
    return merge_bytes(blobs).quantile(0.99) if blobs else None


def _meets(value: float | None, limit: float | None) -> bool:
    return limit is None or (value is not None and value <= limit)


class _Search:
    """The minutes queued busiest first, checked against the targets in growing batches."""

    def __init__(
        self, connection: Connection, where: list[Any], limits: dict[str, float | None]
    ) -> None:
        self.connection = connection
        self.where = where
        self.limits = {name: limit for name, limit in limits.items() if limit is not None}
        self.queue: list[Candidate] = []
        self.size = 1
        self.best: Candidate | None = None
        self.minutes = 0
        """Instance-minutes read (for the error's details)."""

    def push(self, tied: list[Candidate]) -> None:
        """Queue minutes as busy as each other, greatest (instance, minute) first."""
        self.queue += sorted(tied, key=_order, reverse=True)

    def drain(self, final: bool) -> bool:
        """Check full batches (``final``: all that is queued); whether one fit (``best``)."""
        while self.queue and (final or len(self.queue) >= self.size):
            batch, self.queue = self.queue[: self.size], self.queue[self.size :]
            self.size = min(self.size * 4, _MAX_BATCH)
            found = self.first_fit(batch)
            if found is not None:
                self.best = batch[found]
                return True
        return False

    def first_fit(self, batch: list[Candidate]) -> int | None:
        """The index in ``batch`` of its first minute within the targets, if any."""
        if not self.limits:
            return 0
        c = request_rollups.c
        names = list(self.limits)
        parts: dict[tuple[str, datetime], dict[str, list[bytes]]] = {
            (instance, bucket): {name: [] for name in names}
            for _ok, instance, bucket, _out in batch
        }
        query = select(c.instance, c.bucket, *(c[name] for name in names)).where(
            *self.where,
            c.instance.in_(sorted({instance for instance, _bucket in parts})),
            c.bucket.in_(sorted({bucket for _instance, bucket in parts})),
        )
        for row in self.connection.execute(query):
            held = parts.get((row.instance, row.bucket))
            if held is None:  # another pair of the instances and minutes asked
                continue
            for name, data in zip(names, row[2:], strict=True):
                if data is not None:
                    held[name].append(bytes(data))
        for index, (_ok, instance, bucket, _out) in enumerate(batch):
            held = parts[(instance, bucket)]
            if all(_meets(_p99(held[name]), limit) for name, limit in self.limits.items()):
                return index
        return None


def _scan(rows: Iterable[Any], search: _Search) -> None:
    """Queue the busiest-first totals a level of busyness at a time until a minute fits."""
    tied: list[Candidate] = []  # the minutes as busy as each other, read so far
    for row in rows:
        search.minutes += 1
        ok = int(row.ok)
        if tied and ok != tied[0][0]:
            search.push(tied)
            tied = []
            if search.drain(final=False):
                return
        if ok > 0:
            tied.append((ok, row.instance, row.bucket, int(row.out)))
    search.push(tied)
    search.drain(final=True)


def production_capacity(
    engine: Engine,
    window: Window,
    selector: Selector,
    *,
    ttft_p99_max_s: float | None = None,
    tpot_p99_max_s: float | None = None,
    instances: Collection[str] | None = None,
) -> MeasuredCapacity:
    """The busiest instance-minute of ``window`` within the targets (concurrency unknown: 0),
    of ``instances`` only where given (one pool of a disaggregated model).

    The database sums each instance-minute's counts and streams them busiest first; only the
    sketches of the minutes checked against the targets are read and decoded, busiest first,
    until one meets them (every sketch of a week of minutes used to be decoded to keep one).
    Minutes as busy as each other are checked in the order of their (instance, minute),
    greatest first, as Python orders them: the answer is the one of decoding them all.
    """
    c = request_rollups.c
    where = [
        c.resolution == Resolution.MINUTE.value,
        c.bucket >= window.start,
        c.bucket < window.end,
        *_filters(selector),
        *([] if instances is None else [c.instance.in_(sorted(instances))]),
    ]
    ok_sum = func.sum(c.requests - c.errors)
    totals = (
        select(c.instance, c.bucket, ok_sum.label("ok"), func.sum(c.output_tokens).label("out"))
        .where(*where)
        .group_by(c.instance, c.bucket)
        .order_by(ok_sum.desc())
    )
    # One connection: the totals stream from a server-side cursor on PostgreSQL while the
    # candidates' sketches are read beside it.
    with engine.connect() as connection:
        search = _Search(
            connection, where, {"ttft_sketch": ttft_p99_max_s, "tpot_sketch": tpot_p99_max_s}
        )
        rows = connection.execution_options(stream_results=True, yield_per=1000).execute(totals)
        try:
            _scan(rows, search)
        finally:
            rows.close()  # a cursor left open when a minute fits early
    if search.best is None:
        raise InvalidInput(
            "no instance-minute of production traffic in the window met the latency targets",
            details={"minutes": search.minutes},
        )
    ok, instance, bucket, output_tokens = search.best
    return MeasuredCapacity(
        throughput_rps=ok / _SECONDS,
        concurrency=0,
        mean_output_tokens=output_tokens / ok,
        phase=f"{instance} at {bucket:%Y-%m-%d %H:%M}",
    )
