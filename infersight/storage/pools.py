"""Prefill and decode pools: each instance's part in disaggregated serving and its own figures.

Disaggregated serving runs a request's prefill and its decode on different instances; the two
pools are sized, saturate and are paid for apart, so they are never pooled into one latency or
utilisation figure. An instance's role comes from what it stored in the window: prefill legs
(``request_parts``) make it a prefill instance; users' requests split by a P/D proxy
(``requests.role = 'decode'``) a decode instance; anything else is unified. Its figures are its
own view: a prefill instance's requests are prefill legs (its queue, its prefill, the prompt
tokens it computed), a decode instance's are the users' requests it answered (their KV
transfer, their time per output token, the tokens it generated).

``pool_summaries`` reads the users' requests as every window is read (minute / hour / day
rollups inside it, their sketches' headers giving the means; raw rows at its edges) and the
prefill legs, which are not rolled up, from raw rows: SQL aggregates, no row fetched.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

from sqlalchemy import Connection, Engine, Select, Table, bindparam, func, select

from infersight.core.query import Selector
from infersight.core.sketch import header_totals
from infersight.core.window import Resolution, Segment, Window, split
from infersight.storage.sql import rollup_where_shaped, selector_shape, sketch_header, span_values
from infersight.storage.tables import request_parts, request_rollups, requests

#: Instances a pool read returns at most (one row per instance).
MAX_POOL_ROWS: Final = 2000
#: Per-instance means of the pool table: record field → key.
_MEANS: Final = {
    "queue_s": "queue_mean",
    "prefill_s": "prefill_mean",
    "kv_transfer_s": "kv_transfer_mean",
    "ttft_s": "ttft_mean",
    "tpot_s": "tpot_mean",
}


@dataclass(frozen=True, slots=True)
class PoolLine:
    """One instance's part in serving and its own figures over a window (``None``: the
    records never reported that figure)."""

    instance: str
    role: str
    requests: int
    input_tokens: int
    output_tokens: int
    means: dict[str, float | None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "role": self.role,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            **self.means,
        }


@dataclass
class _Acc:
    """One instance's sums over the segments of a window."""

    decode: bool = False
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: Per field of ``_MEANS``: (values counted, their sum).
    sums: dict[str, list[float]] = field(default_factory=lambda: {f: [0, 0.0] for f in _MEANS})

    def line(self, instance: str, role: str | None) -> PoolLine:
        return PoolLine(
            instance=instance,
            role=role or ("decode" if self.decode else "unified"),
            requests=self.requests,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            means={
                _MEANS[f]: (total / count if count else None)
                for f, (count, total) in self.sums.items()
            },
        )


def _raw(
    connection: Connection, table: Table, span: Segment | Window, out: dict[str, _Acc]
) -> None:
    """Add ``table``'s raw rows of ``span`` to ``out``, per instance (SQL aggregates)."""
    values = {"lo": span.start, "hi": span.end}
    for row in connection.execute(_raw_query(table), values):
        a = out[str(row[0])]
        a.decode = a.decode or row[1] == "decode"
        a.requests += int(row[2])
        a.input_tokens += int(row[3])
        a.output_tokens += int(row[4])
        for i, f in enumerate(_MEANS):
            a.sums[f][0] += int(row[5 + 2 * i] or 0)
            a.sums[f][1] += float(row[6 + 2 * i] or 0.0)


def _rolled(connection: Connection, segment: Segment, out: dict[str, _Acc]) -> None:
    """Add the users' requests of a rollup segment to ``out``, per instance: counts and
    tokens from the rollup rows, means from their sketches' headers (a decode instance: one
    whose split requests have a KV-transfer time)."""
    values = span_values(segment, Selector())
    for row in connection.execute(_rolled_query(), values).all():
        a = out[str(row[0])]
        a.requests += int(row[1])
        a.input_tokens += int(row[2])
        a.output_tokens += int(row[3])
        for f, blob in zip(_MEANS, row[4:], strict=True):
            if blob is not None:
                count, total = header_totals(blob)
                a.sums[f][0] += count
                a.sums[f][1] += total
                a.decode = a.decode or (f == "kv_transfer_s" and count > 0)


@lru_cache(maxsize=4)
def _raw_query(table: Table) -> Select[Any]:
    """``_raw``'s statement for ``table``, built once (the span as parameters)."""
    c = table.c
    return (
        select(
            c.instance,
            func.max(c.role),
            func.count(),
            func.coalesce(func.sum(c.input_tokens), 0),
            func.coalesce(func.sum(c.output_tokens), 0),
            *(agg for f in _MEANS for agg in (func.count(c[f]), func.sum(c[f]))),
        )
        .where(c.start >= bindparam("lo"), c.start < bindparam("hi"))
        .group_by(c.instance)
        .limit(MAX_POOL_ROWS)
    )


@lru_cache(maxsize=1)
def _rolled_query() -> Select[Any]:
    """``_rolled``'s statement, built once: each sketch's header only (its count and sum,
    what ``header_totals`` reads), not its buckets."""
    u = request_rollups.c
    headers = [sketch_header(f) for f in _MEANS]
    return select(u.instance, u.requests, u.input_tokens, u.output_tokens, *headers).where(
        rollup_where_shaped(selector_shape(Selector()))
    )


def pool_summaries(
    engine: Engine, window: Window, finest: Resolution = Resolution.MINUTE
) -> list[PoolLine]:
    """Every instance that stored requests or prefill legs in ``window``, with its role,
    ordered prefill, decode, unified, then by name. An instance that stored both (a role
    changed in the window) is listed once per role. Users' requests are read like every
    other window (rollups inside it, raw rows at its edges); prefill legs, which are not
    rolled up, from raw rows."""
    users: dict[str, _Acc] = defaultdict(_Acc)
    legs: dict[str, _Acc] = defaultdict(_Acc)
    with engine.connect() as connection:
        _raw(connection, request_parts, window, legs)
        for segment in split(window, finest):
            if segment.raw:
                _raw(connection, requests, segment, users)
            else:
                _rolled(connection, segment, users)
    lines = [a.line(name, "prefill") for name, a in legs.items()]
    lines += [a.line(name, None) for name, a in users.items() if a.requests]
    order = {"prefill": 0, "decode": 1, "unified": 2}
    return sorted(lines, key=lambda line: (order[line.role], line.instance))[:MAX_POOL_ROWS]


def disaggregated(lines: list[PoolLine]) -> bool:
    """Whether any instance in ``lines`` takes part in disaggregated serving."""
    return any(line.role != "unified" for line in lines)
