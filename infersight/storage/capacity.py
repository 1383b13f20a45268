"""Per-instance capacity measured in production: the busiest minute that met the targets.

Reads the minute rollups (counts and one sketch per latency metric per series), merges the
series of each instance and minute, and keeps the minutes whose p99 TTFT and TPOT met the
targets. The busiest of those is what one instance has been seen to sustain: a lower bound on
its capacity (production may never have pushed it to its knee; a step run finds the knee).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, select

from infersight.core.errors import InvalidInput
from infersight.core.loadtest import MeasuredCapacity
from infersight.core.query import Selector
from infersight.core.sketch import QuantileSketch, merge_all
from infersight.core.window import Resolution, Window
from infersight.storage.tables import request_rollups

_SECONDS = Resolution.MINUTE.seconds


class _Minute:
    __slots__ = ("ok", "output_tokens", "tpot", "ttft")

    def __init__(self) -> None:
        self.ok = 0
        self.output_tokens = 0
        self.ttft: list[QuantileSketch] = []
        self.tpot: list[QuantileSketch] = []


def _filters(selector: Selector) -> Iterable[Any]:
    for label in ("model", "instance", "tenant", "priority"):
        value = getattr(selector, label)
        if value is not None:
            yield request_rollups.c[label] == value
    if selector.tenants is not None:  # a token limited to tenants (core.query.Selector)
        yield request_rollups.c.tenant.in_(sorted(selector.tenants))


def _p99(sketches: list[QuantileSketch]) -> float | None:
    return merge_all(sketches).quantile(0.99) if sketches else None


def _meets(value: float | None, limit: float | None) -> bool:
    return limit is None or (value is not None and value <= limit)


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
    of ``instances`` only where given (one pool of a disaggregated model)."""
    c = request_rollups.c
    only = [] if instances is None else [c.instance.in_(sorted(instances))]
    query = select(
        c.instance, c.bucket, c.requests, c.errors, c.output_tokens, c.ttft_sketch, c.tpot_sketch
    ).where(
        c.resolution == Resolution.MINUTE.value,
        c.bucket >= window.start,
        c.bucket < window.end,
        *_filters(selector),
        *only,
    )
    minutes: dict[tuple[str, datetime], _Minute] = defaultdict(_Minute)
    with engine.connect() as connection:
        for row in connection.execute(query):
            minute = minutes[(row.instance, row.bucket)]
            minute.ok += row.requests - row.errors
            minute.output_tokens += row.output_tokens
            for column, parts in (("ttft_sketch", minute.ttft), ("tpot_sketch", minute.tpot)):
                data = getattr(row, column)
                if data is not None:
                    parts.append(QuantileSketch.from_bytes(data))
    fits = [
        (m.ok, key, m)
        for key, m in minutes.items()
        if m.ok > 0
        and _meets(_p99(m.ttft), ttft_p99_max_s)
        and _meets(_p99(m.tpot), tpot_p99_max_s)
    ]
    if not fits:
        raise InvalidInput(
            "no instance-minute of production traffic in the window met the latency targets",
            details={"minutes": len(minutes)},
        )
    ok, (instance, bucket), best = max(fits, key=lambda f: (f[0], f[1]))
    return MeasuredCapacity(
        throughput_rps=ok / _SECONDS,
        concurrency=0,
        mean_output_tokens=best.output_tokens / ok,
        phase=f"{instance} at {bucket:%Y-%m-%d %H:%M}",
    )
