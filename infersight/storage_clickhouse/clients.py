"""Client records in ClickHouse (issue #36): their writer and ``ClientStore.read_pairs`` from them.

**Writing** (``ClientWriter``), as the sample writer stores scrapes: the records outside the
accepted window are refused, a key (start, trace id, span id: the SQL store's) repeated within
a batch keeps its last copy (the SQL writer's rule), the batch is split by day (an insert of
one block into one partition commits atomically) and into chunks of at most ``writer.CHUNK``;
per chunk the keys already stored are read and dropped, and the rest is inserted under an
insert deduplication token made from their keys. So a replay stores nothing twice: the same
batch finds its keys stored (or, had the lookup missed a committed insert, repeats its token),
and a replay carrying more records after a failed insert (a sidecar's spool reads its oldest
ready entries up to its batch size) stores the failed ones and the new ones once. No view
hangs on the table, so an insert that failed left nothing behind to finish.

**Reading** (``ClientReads.read_pairs``), the SQL store's ``storage.client_reads.read_pairs``
on ClickHouse's tables: the window's calls newest first (of ``model``'s names, compared
canonically: the window's distinct client models are read first and the query pins those
that are ``model``, and ``tenant``'s), at most ``max_calls`` (``truncated`` says when more
were there); then, with no tenant and room left, the load-test requests of the window that
kept a trace id (a load-test run is state: ``RunStore.traced_calls`` reads them from the SQL
store); then the server records of those traces from ClickHouse's ``requests`` as attributed
and with late sequences folded (the ``requests_current`` view: a server record's tenant is
the one its trace's gateway or client spans named, as the SQL store's rows are filled),
looked up as the SQL store looks them
up — calls in start order, ``TRACE_BATCH`` at a time, each batch's traces within its calls'
own span widened by ``SERVER_MARGIN`` — with ``BATCHES_PER_READ`` batches to a statement; and
the two joined by ``core.gap.join``.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final

from infersight.core.client import ClientRecord
from infersight.core.gap import Side, join
from infersight.core.model_names import ModelAliases
from infersight.core.window import Window
from infersight.core.write import WriteResult
from infersight.storage.seam import Pairs
from infersight.storage_clickhouse.clients_schema import CLIENT_COLUMNS
from infersight.storage_clickhouse.layout import Layout
from infersight.storage_clickhouse.reads import Sides, _raw
from infersight.storage_clickhouse.transport import Transport, quote
from infersight.storage_clickhouse.writer import CHUNK, STARTED, AcceptingWriter, micros, payload

#: Client calls one answer reads at most: ``storage.client_reads.MAX_CALLS``.
MAX_CALLS: Final = 100_000
#: Calls whose traces one server lookup covers: ``storage.client_reads.TRACE_BATCH``.
TRACE_BATCH: Final = 500
#: How long before a window a load-test run may have started and still have requests in it:
#: ``storage.client_reads.LONGEST_RUN``.
LONGEST_RUN: Final = timedelta(days=1)
#: How far before a call and after its end its server record is looked for:
#: ``storage.client_reads.SERVER_MARGIN``.
SERVER_MARGIN: Final = timedelta(minutes=2)
#: Lookup batches one statement reads (each its own time span: 2,000 trace ids, about 70 kB of
#: statement, well below ClickHouse's ``max_query_size``).
BATCHES_PER_READ: Final = 4
#: Keys looked up per statement by the writer.
LOOKUP: Final = 2_000

ClientKey = tuple[int, str, str]
#: Appends a window's load-test calls to ``into`` (at most ``max_calls`` in all): whether the cap
#: cut them short (``RunStore.traced_calls``).
LoadTests = Callable[[Window, ModelAliases, "str | None", list[Side], int], bool]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO: Final = timedelta(microseconds=1)
_SERVER_COLUMNS: Final = (
    "trace_id",
    "span_id",
    "toUnixTimestamp64Micro(start)",
    "model",
    "tenant",
    "ttft_s",
    "e2e_s",
    "instance",
    "priority",
)


def _key(record: ClientRecord) -> ClientKey:
    return micros(record.start), record.trace_id, record.span_id


def _text(ts: datetime) -> str:
    return quote(f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}")


def _at(value: Any) -> datetime:
    return _EPOCH + timedelta(microseconds=int(value))


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _side(row: Sequence[Any]) -> Side:
    """A row of ``_SERVER_COLUMNS`` (or their first seven) as a ``core.gap.Side``."""
    trace_id, span_id, start, model, tenant, ttft_s, e2e_s, *labels = row
    return Side(
        str(trace_id),
        str(span_id),
        _at(start),
        str(model),
        str(tenant),
        _float(ttft_s),
        _float(e2e_s),
        *(str(v) for v in labels),
    )


def _row(record: ClientRecord) -> list[Any]:
    out: list[Any] = []
    for name in CLIENT_COLUMNS:
        value = getattr(record, name)
        if name == "start":
            value = f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S.%f}"
        elif name in ("status", "ttft_source"):
            value = value.value
        out.append(value)
    return out


class ClientWriter(AcceptingWriter):
    """``core.write.Sink``'s ``write_client_requests`` into ClickHouse (see the module)."""

    def write_client_requests(self, records: Sequence[ClientRecord]) -> WriteResult:
        """Store ``records`` (each key once): counted as the SQL store counts them,
        ``inserted + duplicates + refused == received``."""
        received = len(records)
        kept = self.accepted(records, STARTED)
        by_key: dict[ClientKey, ClientRecord] = {}
        for record in kept:
            by_key[_key(record)] = record
        by_day: dict[date, list[ClientRecord]] = defaultdict(list)
        for record in by_key.values():
            by_day[record.start.astimezone(UTC).date()].append(record)
        inserted = 0
        for day in sorted(by_day):
            ordered = sorted(by_day[day], key=_key)
            for i in range(0, len(ordered), CHUNK):
                inserted += self._store_chunk(ordered[i : i + CHUNK])
        return WriteResult(received, inserted, len(kept) - inserted, received - len(kept))

    def _stored(self, ordered: Sequence[ClientRecord]) -> set[ClientKey]:
        """The keys of ``ordered`` (sorted by key) already stored, ``LOOKUP`` a statement, each
        within its keys' models and time range (the table's order); none looked up when no
        call of their models is stored in their time range (one cheap count: a fresh batch
        usually meets none)."""
        out: set[ClientKey] = set()
        name = self.layout.table("client_requests")
        models = ", ".join(quote(m) for m in sorted({r.model for r in ordered}))
        count = self.transport.rows(
            f"SELECT count() FROM {name} WHERE model IN ({models})"
            f" AND start >= {_text(ordered[0].start)} AND start <= {_text(ordered[-1].start)}"
        )
        if not count or not count[0][0]:
            return out
        for i in range(0, len(ordered), LOOKUP):
            part = ordered[i : i + LOOKUP]
            models = ", ".join(quote(m) for m in sorted({r.model for r in part}))
            keys = ", ".join(f"({quote(r.trace_id)}, {quote(r.span_id)})" for r in part)
            rows = self.transport.rows(
                f"SELECT toUnixTimestamp64Micro(start), trace_id, span_id FROM {name}"
                f" WHERE model IN ({models}) AND start >= {_text(part[0].start)}"
                f" AND start <= {_text(part[-1].start)} AND (trace_id, span_id) IN ({keys})"
            )
            out.update((int(m), str(t), str(s)) for m, t, s in rows)
        return out

    def _store_chunk(self, ordered: Sequence[ClientRecord]) -> int:
        stored = self._stored(ordered)
        fresh = [r for r in ordered if _key(r) not in stored]
        if not fresh:
            return 0
        digest = hashlib.sha256()
        for m, trace_id, span_id in (_key(r) for r in fresh):
            digest.update(f"{m}/{trace_id}/{span_id};".encode())
        settings: dict[str, Any] = {
            "insert_deduplication_token": "c" + digest.hexdigest(),
            "input_format_parallel_parsing": 0,
            "max_insert_block_size": CHUNK * 2,
            "min_insert_block_size_rows": 0,
            "min_insert_block_size_bytes": 0,
        }
        if self.layout.cluster:
            settings["distributed_foreground_insert"] = 1
        self.transport.insert(
            self.layout.table("client_requests"),
            CLIENT_COLUMNS,
            payload(_row(r) for r in fresh),
            settings,
        )
        return len(fresh)


class ClientReads:
    """``ClientStore`` over ClickHouse (see the module); ``loadtests`` adds the load-test
    calls of a window (none without it)."""

    def __init__(self, transport: Transport, layout: Layout, loadtests: LoadTests | None) -> None:
        self.transport = transport
        self.layout = layout
        self.loadtests = loadtests

    def read_pairs(
        self,
        window: Window,
        aliases: ModelAliases,
        *,
        model: str | None = None,
        tenant: str | None = None,
        max_calls: int | None = None,
    ) -> Pairs:
        """The window's client calls (of ``model``, compared canonically, and ``tenant`` when
        given), each joined to its server record where its trace has one."""
        cap = MAX_CALLS if max_calls is None else max(max_calls, 0)
        wanted = aliases.canonical(model) if model else None
        clients, truncated = self._clients(window, aliases, wanted, tenant, cap)
        if tenant is None and not truncated and self.loadtests is not None:
            truncated = self.loadtests(window, aliases, wanted, clients, cap)
        return Pairs(join(clients, self._servers(clients), aliases), truncated)

    def _clients(
        self,
        window: Window,
        aliases: ModelAliases,
        wanted: str | None,
        tenant: str | None,
        cap: int,
    ) -> tuple[list[Side], bool]:
        """The newest ``cap`` calls of the window (newest first), and whether there were more."""
        name = self.layout.table("client_requests")
        where = f"start >= {_text(window.start)} AND start < {_text(window.end)}"
        if tenant is not None:
            where += f" AND tenant = {quote(tenant)}"
        if wanted is not None:
            seen = self.transport.rows(f"SELECT DISTINCT model FROM {name} WHERE {where}")
            names = sorted(str(m) for (m,) in seen if aliases.canonical(str(m)) == wanted)
            if not names:
                return [], False
            where += f" AND model IN ({', '.join(quote(m) for m in names)})"
        rows = self.transport.rows(
            f"SELECT {', '.join(_SERVER_COLUMNS[:7])} FROM {name} FINAL WHERE {where}"
            f" ORDER BY start DESC, trace_id, span_id LIMIT {cap + 1}"
        )
        return [_side(r) for r in rows[:cap]], len(rows) > cap

    def _servers(self, clients: Sequence[Side]) -> list[Side]:
        """The server records of the calls' traces, as attributed: the SQL store's batches
        (calls in start order, ``TRACE_BATCH`` at a time, each batch's traces within its own
        calls' span widened by ``SERVER_MARGIN``), ``BATCHES_PER_READ`` to a statement."""
        ordered = sorted(clients, key=lambda s: s.start)
        spans = []
        for i in range(0, len(ordered), TRACE_BATCH):
            batch = ordered[i : i + TRACE_BATCH]
            low = batch[0].start - SERVER_MARGIN
            high = max(s.start + timedelta(seconds=s.e2e_s or 0.0) for s in batch)
            spans.append((low, high + SERVER_MARGIN, sorted({s.trace_id for s in batch})))
        found: dict[tuple[str, str], Side] = {}
        if not spans:
            return []
        # One probe for every read below (the view's range ends a microsecond past ``high``).
        everything = Window(min(s[0] for s in spans), max(s[1] for s in spans) + _MICRO)
        sides = Sides.probe(self.transport, self.layout, [everything])
        for g in range(0, len(spans), BATCHES_PER_READ):
            group = spans[g : g + BATCHES_PER_READ]
            low = min(s[0] for s in group)
            # The view's range ends before its ``high``: one microsecond on, the last one in.
            high = max(s[1] for s in group) + _MICRO
            where = " OR ".join(
                f"(start >= {_text(a)} AND start <= {_text(b)}"
                f" AND trace_id IN ({', '.join(quote(t) for t in traces)}))"
                for a, b, traces in group
            )
            span = [Window(low, high)]
            rows = self.transport.rows(
                f"SELECT {', '.join(_SERVER_COLUMNS)}"
                f" FROM {_raw(self.layout, span, sides=sides)}"  # as attributed and folded
                f" WHERE {where} ORDER BY start, trace_id, span_id"
            )
            for row in rows:
                side = _side(row)
                found.setdefault((side.trace_id, side.span_id), side)
        return list(found.values())


def _utc(value: Any) -> datetime:
    """A stored time as an aware UTC datetime (SQLite's come back naive, or as text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)  # type: ignore[no-any-return]
    return value.astimezone(UTC)  # type: ignore[no-any-return]


__all__ = [
    "BATCHES_PER_READ",
    "LONGEST_RUN",
    "MAX_CALLS",
    "SERVER_MARGIN",
    "TRACE_BATCH",
    "ClientReads",
    "ClientWriter",
]
