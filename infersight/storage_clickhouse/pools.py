"""Prefill and decode pools from ClickHouse, as ``storage.pools`` and ``storage.scaling_reads``
read them on SQL.

The prefill legs of disaggregated requests (``Role.PREFILL``) are in ``request_parts`` (schema
step 6), kept apart from the users' requests as the SQL store keeps them; they are never rolled
up, so their reads aggregate raw rows (``FINAL``). The users' side of ``pool_summaries`` reads a
window as every other read does (``core.window.split``): raw rows at its edges, the rollups in
between, where a stage's count and sum are its sketch's — the buckets' counts plus the zero
count, and the sum column — which is what the SQL store reads from its sketches' headers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from infersight.core.query import Selector
from infersight.core.window import Resolution, Window
from infersight.storage.seam import DECODE, MAX_MODELS, PREFILL, BusiestPrefill, PoolLine
from infersight.storage_clickhouse.reads import (
    Reads,
    _literal,
    _parse,
    _pieces,
    _raw,
    _raw_edges,
    _raw_where,
    _rollup_rows,
)
from infersight.storage_clickhouse.transport import quote

#: Instances a pool read returns at most (``storage.pools.MAX_POOL_ROWS``).
MAX_POOL_ROWS: Final = 2000
#: Rows a pool-members read returns at most (``storage.scaling_reads.MAX_ROWS``).
MAX_MEMBER_ROWS: Final = 200_000
#: Per-instance means of the pool table: record field → key (``storage.pools``' order).
_MEANS: Final = {
    "queue_s": "queue_mean",
    "prefill_s": "prefill_mean",
    "kv_transfer_s": "kv_transfer_mean",
    "ttft_s": "ttft_mean",
    "tpot_s": "tpot_mean",
}
_ORDER: Final = {"prefill": 0, "decode": 1, "unified": 2}


@dataclass
class _Acc:
    """One instance's sums over the pieces of a window."""

    decode: bool = False
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: Per field of ``_MEANS``: [values counted, their sum].
    sums: dict[str, list[float]] = field(default_factory=lambda: {f: [0, 0.0] for f in _MEANS})

    def add(self, row: list[Any]) -> None:
        """A row of (requests, input tokens, output tokens, then count and sum per field)."""
        self.requests += int(row[0] or 0)
        self.input_tokens += int(row[1] or 0)
        self.output_tokens += int(row[2] or 0)
        for i, f in enumerate(_MEANS):
            self.sums[f][0] += int(row[3 + 2 * i] or 0)
            self.sums[f][1] += float(row[4 + 2 * i] or 0.0)

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


def _raw_aggregates() -> str:
    """``_Acc.add``'s columns over raw rows."""
    per_field = ", ".join(f"count({f}), sum({f})" for f in _MEANS)
    return "count(), sum(ifNull(input_tokens, 0)), sum(ifNull(output_tokens, 0)), " + per_field


def _minute(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return _parse(str(value))


class PoolReads(Reads):
    """``pool_summaries`` (``RequestStore``), ``pool_members`` and ``busiest_prefill_minute``
    (``DemandStore``) from ClickHouse."""

    def pool_summaries(
        self, window: Window, finest: Resolution = Resolution.MINUTE
    ) -> list[PoolLine]:
        """Every instance that stored requests or prefill legs in ``window``, with its role,
        ordered prefill, decode, unified, then by name (``storage.pools.pool_summaries``)."""
        users: dict[str, _Acc] = defaultdict(_Acc)
        legs: dict[str, _Acc] = defaultdict(_Acc)
        for row in self.transport.rows(
            f"SELECT instance, {_raw_aggregates()} FROM {self.layout.table('request_parts')}"
            f" FINAL WHERE {_raw_where(window, Selector())} GROUP BY instance"
            f" LIMIT {MAX_POOL_ROWS}"
        ):
            legs[str(row[0])].add(row[1:])
        edges, segments = _pieces(window, finest)
        sides = self._sides(window)
        if edges:
            for row in self.transport.rows(
                f"SELECT instance, max(role) = 'decode', {_raw_aggregates()}"
                f" FROM {_raw(self.layout, edges, attributed=False, sides=sides)}"  # folded
                f" WHERE {_raw_edges(edges, Selector())} GROUP BY instance"
            ):
                a = users[str(row[0])]
                a.decode = a.decode or bool(int(row[1]))
                a.add(row[2:])
        if segments:
            metrics = [f.removesuffix("_s") for f in _MEANS]
            columns = ", ".join(
                f"arraySum(mapValues({m}_buckets)) + {m}_zero AS {m}_n, {m}_sum AS {m}_t"
                for m in metrics
            )
            inner = _rollup_rows(
                self.layout,
                segments,
                Selector(),
                f"instance, requests, input_tokens, output_tokens, {columns}",
                attributed=False,  # no attributed label: the moves add nothing (reads._touches)
                sides=sides,
            )
            totals = ", ".join(f"sum({m}_n), sum({m}_t)" for m in metrics)
            for row in self.transport.rows(
                f"SELECT instance, sum(kv_transfer_n) > 0, sum(requests), sum(input_tokens),"
                f" sum(output_tokens), {totals} FROM ({inner}) GROUP BY instance"
            ):
                a = users[str(row[0])]
                a.decode = a.decode or bool(int(row[1]))
                a.add(row[2:])
        lines = [a.line(name, "prefill") for name, a in legs.items()]
        lines += [a.line(name, None) for name, a in users.items() if a.requests]
        return sorted(lines, key=lambda line: (_ORDER[line.role], line.instance))[:MAX_POOL_ROWS]

    def pool_members(
        self, window: Window, model: str | None = None
    ) -> dict[str, dict[str, frozenset[str]]]:
        """model → {``PREFILL``: instances, ``DECODE``: instances} for every model (or
        ``model``) whose instances stored prefill legs or decode-side split requests in
        ``window`` (``storage.scaling_reads.pool_members``)."""
        found: dict[str, dict[str, set[str]]] = defaultdict(lambda: {PREFILL: set(), DECODE: set()})
        pinned = f" AND model = {quote(model)}" if model is not None else ""
        reads = (
            (PREFILL, "request_parts", ""),
            (DECODE, "requests", f" AND role = {quote(DECODE)}"),
        )
        for pool, table, role in reads:
            for name, instance in self.transport.rows(
                f"SELECT DISTINCT model, instance FROM {self.layout.table(table)} FINAL"
                f" WHERE {_raw_where(window, Selector())}{role}{pinned} AND model != ''"
                f" LIMIT {MAX_MEMBER_ROWS}"
            ):
                found[str(name)][pool].add(str(instance))
        return {
            name: {pool: frozenset(members) for pool, members in pools.items()}
            for name, pools in sorted(found.items())
        }

    def busiest_prefill_minute(
        self,
        model: str,
        window: Window,
        queue_max_s: float,
        instances: Collection[str] | None = None,
    ) -> BusiestPrefill | None:
        """The minute of ``window`` in which one prefill instance of ``model`` (of
        ``instances``, where given) completed the most successful prefill legs while their
        mean queue time stayed at or below ``queue_max_s``
        (``storage.scaling_reads.busiest_prefill_minute``)."""
        where = [_raw_where(window, Selector(model=model)), "status = 'ok'"]
        if instances is not None:
            chosen = sorted(instances)[:MAX_MODELS]
            where.append(f"instance IN ({', '.join(quote(i) for i in chosen)})" if chosen else "0")
        rows = self.transport.rows(
            "SELECT instance, toDateTime(toStartOfMinute(start), 'UTC') AS minute,"
            " count() AS legs, avg(queue_s) AS queue_mean"
            f" FROM {self.layout.table('request_parts')} FINAL WHERE {' AND '.join(where)}"
            f" GROUP BY instance, minute HAVING queue_mean <= {_literal(queue_max_s)}"
            " ORDER BY legs DESC, minute DESC, instance LIMIT 1"
        )
        if not rows:
            return None
        instance, minute, legs, queue_mean = rows[0]
        return BusiestPrefill(
            legs_per_s=int(legs) / Resolution.MINUTE.seconds,
            instance=str(instance),
            minute=_minute(minute),
            queue_mean_s=float(queue_mean),
        )
