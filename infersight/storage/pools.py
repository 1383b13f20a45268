"""Prefill and decode pools: each instance's part in disaggregated serving and its own figures.

Disaggregated serving runs a request's prefill and its decode on different instances; the two
pools are sized, saturate and are paid for apart, so they are never pooled into one latency or
utilisation figure. An instance's role comes from what it stored in the window: prefill legs
(``request_parts``) make it a prefill instance; users' requests split by a P/D proxy
(``requests.role = 'decode'``) a decode instance; anything else is unified. Its figures are its
own view: a prefill instance's requests are prefill legs (its queue, its prefill, the prompt
tokens it computed), a decode instance's are the users' requests it answered (their KV
transfer, their time per output token, the tokens it generated).

``pool_summaries`` reads means and totals with SQL aggregates over raw rows (the window a page
or a call asks for): no row is fetched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Engine, Table, func, select

from infersight.core.window import Window
from infersight.storage.tables import request_parts, requests

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


def _lines(engine: Engine, table: Table, window: Window, role: str | None) -> list[PoolLine]:
    c = table.c
    where = [c.start >= window.start, c.start < window.end]
    role_of = func.max(c.role)
    query = (
        select(
            c.instance,
            role_of,
            func.count(),
            func.coalesce(func.sum(c.input_tokens), 0),
            func.coalesce(func.sum(c.output_tokens), 0),
            *(func.avg(c[name]) for name in _MEANS),
        )
        .where(*where)
        .group_by(c.instance)
        .order_by(c.instance)
        .limit(MAX_POOL_ROWS)
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return [
        PoolLine(
            instance=str(r[0]),
            role=role or ("decode" if r[1] == "decode" else "unified"),
            requests=int(r[2]),
            input_tokens=int(r[3]),
            output_tokens=int(r[4]),
            means={
                key: None if value is None else float(value)
                for key, value in zip(_MEANS.values(), r[5:], strict=True)
            },
        )
        for r in rows
    ]


def pool_summaries(engine: Engine, window: Window) -> list[PoolLine]:
    """Every instance that stored requests or prefill legs in ``window``, with its role,
    ordered prefill, decode, unified, then by name. An instance that stored both (a role
    changed in the window) is listed once per role."""
    lines = _lines(engine, request_parts, window, "prefill") + _lines(
        engine, requests, window, None
    )
    order = {"prefill": 0, "decode": 1, "unified": 2}
    return sorted(lines, key=lambda line: (order[line.role], line.instance))


def disaggregated(lines: list[PoolLine]) -> bool:
    """Whether any instance in ``lines`` takes part in disaggregated serving."""
    return any(line.role != "unified" for line in lines)
