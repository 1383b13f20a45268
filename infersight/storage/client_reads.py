"""Reading client records (``client_requests``) and the server records they join to.

``read_pairs`` reads the client calls of a window (newest first, at most ``max_calls``: the
answer says when it held more), then the server records of their traces, and joins them
(``core.gap.join``). Server records are looked up by trace id in batches of calls in start
order, each within its calls' own time span widened by ``SERVER_MARGIN`` (partition-pruned on
PostgreSQL, a key range on both), so the cost is bounded by the calls read, not by the
server table.

``infersight loadtest`` is a client too: it sends a ``traceparent`` with every request and
keeps each request's trace id (``loadtest_results.trace_id``), so its requests of the window
are client calls as well (untenanted: a tenant filter leaves them out), joined the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from sqlalchemy import Connection, Engine, select

from infersight.core.gap import Pair, Side, join
from infersight.core.model_names import ModelAliases
from infersight.core.window import Window
from infersight.storage.tables import client_requests, loadtest_results, loadtest_runs, requests

#: Client calls one answer reads at most (each is a row in memory while it is joined).
MAX_CALLS: Final = 100_000
#: Trace ids per server lookup (one bound parameter each).
TRACE_BATCH: Final = 500
#: How long before a window a load-test run may have started and still have requests in it.
LONGEST_RUN: Final = timedelta(days=1)
#: How far before a call and after its end its server record is looked for: the two hosts'
#: clocks may disagree (a server record further off is not found, and the call is unjoined).
SERVER_MARGIN: Final = timedelta(minutes=2)


@dataclass(frozen=True, slots=True)
class Pairs:
    pairs: list[Pair]
    #: More calls were in the window than were read (the newest ``max_calls`` were).
    truncated: bool


def read_pairs(
    engine: Engine,
    window: Window,
    aliases: ModelAliases,
    *,
    model: str | None = None,
    tenant: str | None = None,
    max_calls: int = MAX_CALLS,
) -> Pairs:
    """The window's client calls (of ``model``, compared canonically, and ``tenant`` when
    given), each joined to its server record where its trace has one."""
    c = client_requests.c
    query = (
        select(c.trace_id, c.span_id, c.start, c.model, c.tenant, c.ttft_s, c.e2e_s)
        .where(c.start >= window.start, c.start < window.end)
        .order_by(c.start.desc())
    )
    if tenant is not None:
        query = query.where(c.tenant == tenant)
    wanted = aliases.canonical(model) if model else None
    clients: list[Side] = []
    truncated = False
    with engine.connect() as connection:
        # Closed when the bound cuts the calls short: a server-side cursor left open warned
        # (and held the connection's cursor until it was returned to the pool).
        with connection.execute(query.execution_options(yield_per=5000)) as rows:
            for row in rows:
                if wanted is not None and aliases.canonical(row.model) != wanted:
                    continue
                if len(clients) >= max_calls:
                    truncated = True
                    break
                clients.append(Side(*row))
        if tenant is None and not truncated:
            truncated = _loadtest_calls(connection, window, aliases, wanted, clients, max_calls)
        servers = _servers(connection, clients)
    return Pairs(join(clients, servers, aliases), truncated)


def traced_calls(
    engine: Engine,
    window: Window,
    aliases: ModelAliases,
    wanted: str | None,
    into: list[Side],
    max_calls: int,
) -> bool:
    """``_loadtest_calls`` on a connection of its own (``RunStore.traced_calls``: a store whose
    client records live elsewhere still keeps the load-test runs)."""
    with engine.connect() as connection:
        return _loadtest_calls(connection, window, aliases, wanted, into, max_calls)


def _loadtest_calls(
    connection: Connection,
    window: Window,
    aliases: ModelAliases,
    wanted: str | None,
    into: list[Side],
    max_calls: int,
) -> bool:
    """Append the requests of load-test runs sent within ``window`` (that kept a trace id);
    whether the cap cut them short."""
    runs = connection.execute(
        select(loadtest_runs.c.id, loadtest_runs.c.model, loadtest_runs.c.started_at).where(
            loadtest_runs.c.started_at >= window.start - LONGEST_RUN,
            loadtest_runs.c.started_at < window.end,
        )
    ).all()
    for run_id, model, started_at in runs:
        if wanted is not None and aliases.canonical(model) != wanted:
            continue
        res = loadtest_results.c
        rows = connection.execute(
            select(res.seq, res.sent_s, res.ttft_s, res.e2e_s)
            .where(res.run_id == run_id, res.trace_id != "", res.status == "ok")
            .order_by(res.seq)
            .add_columns(res.trace_id)
        )
        for seq, sent_s, ttft_s, e2e_s, trace_id in rows:
            start = started_at + timedelta(seconds=sent_s)
            if not window.start <= start < window.end:
                continue
            if len(into) >= max_calls:
                return True
            into.append(Side(trace_id, f"loadtest-{run_id}-{seq}", start, model, "", ttft_s, e2e_s))
    return False


def _servers(connection: Connection, clients: list[Side]) -> list[Side]:
    """The server records of the calls' traces. Calls are taken in start order, a batch at a
    time, and each batch's lookup covers only its own calls' time span (widened by
    ``SERVER_MARGIN``): the requests table's key leads with the start, so each lookup reads a
    slice of the window, not all of it."""
    r = requests.c
    found: dict[tuple[str, str], Side] = {}
    ordered = sorted(clients, key=lambda s: s.start)
    for i in range(0, len(ordered), TRACE_BATCH):
        batch = ordered[i : i + TRACE_BATCH]
        low = batch[0].start - SERVER_MARGIN
        high = max(s.start + timedelta(seconds=s.e2e_s or 0.0) for s in batch) + SERVER_MARGIN
        rows = connection.execute(
            select(
                r.trace_id, r.span_id, r.start, r.model, r.tenant, r.ttft_s, r.e2e_s,
                r.instance, r.priority,
            ).where(
                r.start >= low, r.start <= high, r.trace_id.in_({s.trace_id for s in batch})
            )
        )  # fmt: skip
        for row in rows:
            found.setdefault((row.trace_id, row.span_id), Side(*row))
    return list(found.values())
