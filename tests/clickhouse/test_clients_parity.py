"""Client records in ClickHouse (``storage_clickhouse.clients``) answer ``ClientStore.read_pairs``
as the SQL store (SQLite and PostgreSQL) does on the same data — calls joined to their server
records by trace id (several calls to a trace, calls without a server record, server records
without a call, a server record's tenant named by its client's span, load-test requests),
filtered by model (aliases) and tenant, bounded by ``max_calls`` — and each record is stored
once in ClickHouse however often its batch comes: a replay, a replay carrying more records
after an insert that failed or whose answer was lost, and the same fresh keys inserted twice
(the insert's token)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from infersight.core.accept import AcceptWindow
from infersight.core.client import ClientRecord, TtftSource
from infersight.core.errors import Unavailable
from infersight.core.loadtest import LoadTestRun, Phase, RequestResult, ScenarioKind
from infersight.core.model_names import ModelAliases
from infersight.core.records import RequestRecord
from infersight.core.window import Window
from infersight.storage import client_reads
from infersight.storage_clickhouse import clients
from infersight.storage_clickhouse.clients import ClientWriter
from infersight.storage_clickhouse.clients_schema import client_tables
from infersight.storage_clickhouse.hybrid import HybridStore, Telemetry
from infersight.storage_clickhouse.schema import Layout
from infersight.storage_clickhouse.transport import Transport
from tests.clickhouse.test_samples_parity import FailsOnce
from tests.conftest import Store
from tests.factories import make_records

#: Recent days: ClickHouse drops rows past their TTL (the raw retention) as it writes them.
T0 = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=3)
#: The whole span, ragged edges across a day, a few hours, and an empty one.
WINDOWS = (
    Window(T0, T0 + timedelta(days=3)),
    Window(T0 + timedelta(hours=9, seconds=7.25), T0 + timedelta(days=1, hours=5, seconds=0.5)),
    Window(T0 + timedelta(days=1, hours=2), T0 + timedelta(days=1, hours=6)),
    Window(T0 - timedelta(days=2), T0 - timedelta(days=1)),
)
#: A client names its model as it sent it: an org prefix, another case, an alias.
ALIASES = ModelAliases.parse("llama-small=llama-8b")
CLIENT_NAMES = {"llama-8b": ("llama-8b", "meta/Llama-8B", "llama-small"), "qwen-7b": ("qwen-7b",)}
TENANTS = ("acme", "globex", "")
RUN_START = T0 + timedelta(days=1, hours=3)


def _span(i: int, kind: str) -> str:
    return f"{kind}{i:015x}"


def _call(
    rng: np.random.Generator, i: int, server: RequestRecord, start: datetime, kind: str = "c"
) -> ClientRecord:
    """A client's call around ``server``'s request: started a little before it, its TTFT and
    end to end time the server's plus the network's."""
    names = CLIENT_NAMES[server.model]
    gap = float(rng.uniform(0.005, 0.3))
    streamed = i % 4 != 0 and server.ttft_s is not None
    return ClientRecord(
        trace_id=server.trace_id,
        span_id=_span(i, kind),
        start=start,
        service="app",
        source="openllmetry",
        provider="openai",
        model=names[i % len(names)],
        tenant=TENANTS[i % 3],
        operation="chat",
        e2e_s=None if i % 17 == 0 else (server.e2e_s or 0.0) + 2 * gap,
        ttft_s=(server.ttft_s or 0.0) + gap if streamed else None,
        ttft_source=TtftSource.EVENT if streamed else TtftSource.NONE,
        input_tokens=server.input_tokens,
        output_tokens=server.output_tokens,
        status=server.status,
        error_type=server.error_type,
    )


def _data() -> tuple[list[RequestRecord], list[ClientRecord]]:
    """Server records and client calls over two and a half days: most calls joined to their
    server record (which names no tenant for every fifth: its client's span does); every
    ninth server record without a call; calls without a server record; traces with several
    calls (an agent's loop); a server record minutes away from its trace's call; a call whose
    only server record is 50 minutes off."""
    rng = np.random.default_rng(3610)
    servers = make_records(
        rng,
        T0,
        300,
        span=timedelta(days=2, hours=12),
        models=("llama-8b", "qwen-7b"),
        instances=("gpu-0", "gpu-1"),
    )
    out_servers: list[RequestRecord] = []
    calls: list[ClientRecord] = []
    for i, shipped in enumerate(servers):
        server = replace(shipped, tenant="") if i % 5 == 0 else shipped
        out_servers.append(server)
        if i % 9 == 0:
            continue  # the engine's record alone: the caller sent no trace context
        ahead = timedelta(seconds=float(rng.uniform(0.001, 0.2)))
        # every 37th: the server's record of the call 50 minutes on (a clock far off): found
        # only where the call's lookup batch spans it
        far = timedelta(minutes=50) if i % 37 == 0 else timedelta(0)
        calls.append(_call(rng, i, server, server.start - ahead - far))
        if i % 23 == 0:  # an agent's loop: a second call and request in the trace
            later = replace(
                server,
                span_id=_span(i, "b"),
                start=server.start + timedelta(seconds=float(rng.uniform(5, 40))),
            )
            out_servers.append(later)
            calls.append(_call(rng, i + 1, later, later.start - ahead, "d"))
        if i % 31 == 0:  # a request of the trace minutes after the call
            out_servers.append(
                replace(server, span_id=_span(i, "f"), start=server.start + timedelta(minutes=7))
            )
    for i in range(30):  # calls whose server kept no record (or another trace id)
        start = T0 + timedelta(seconds=float(rng.uniform(0, 2.5 * 86400)))
        calls.append(
            ClientRecord(
                trace_id=f"{int(rng.integers(1, 2**62)):032x}",
                span_id=_span(i, "e"),
                start=start,
                model=("llama-8b", "qwen-7b", "other")[i % 3],
                tenant=TENANTS[i % 3],
                e2e_s=float(rng.uniform(0.1, 4)),
            )
        )
    return out_servers, calls


def _run(rng: np.random.Generator) -> tuple[LoadTestRun, list[RequestRecord]]:
    """A load-test run of ``llama-8b`` whose requests kept their trace ids (some did not, some
    failed), and the server's records of them."""
    template = make_records(rng, RUN_START, 1, span=timedelta(seconds=1), models=("llama-8b",))[0]
    results, servers = [], []
    for seq in range(40):
        sent = seq * 9.5 + 0.125
        trace = f"{seq + 1:08x}" * 4 if seq % 6 else ""
        ok = seq % 11 != 5
        results.append(
            RequestResult(
                seq=seq,
                phase=0,
                sent_s=sent,
                e2e_s=1.5 + seq / 100,
                ttft_s=0.1 + seq / 1000 if seq % 3 else None,
                ok=ok,
                error="" if ok else "timeout",
                trace_id=trace,
            )
        )
        if trace and seq % 7:
            servers.append(
                replace(
                    template,
                    trace_id=trace,
                    span_id=_span(seq, "a"),
                    start=RUN_START + timedelta(seconds=sent + 0.02),
                    tenant="",
                )
            )
    run = LoadTestRun(
        name="steady",
        scenario=ScenarioKind.STEADY,
        target="http://gateway",
        model="llama-8b",
        started_at=RUN_START,
        phases=(Phase(0, "steady", 4, 0.0, 400.0),),
        results=tuple(results),
    )
    return run, servers


def _batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _count(telemetry: Telemetry, final: bool = False) -> int:
    rows = telemetry.transport.rows(
        f"SELECT count() FROM {telemetry.layout.table('client_requests')}"
        f"{' FINAL' if final else ''}"
    )
    return int(rows[0][0])


Filled = tuple[HybridStore, Store, list[ClientRecord]]


@pytest.fixture
def filled(store: Store, telemetry: Telemetry) -> Filled:
    """The data shipped through the hybrid sink in batches, the calls before their requests
    in one batch and after them in the next, every batch twice (a replay); the load-test run
    saved in the SQL store."""
    servers, calls = _data()
    run, run_servers = _run(np.random.default_rng(3611))
    servers = sorted([*servers, *run_servers], key=lambda r: r.start)
    calls = sorted(calls, key=lambda c: c.start)
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    sink: Any = hybrid.ingest.open_writer()
    call_batches, server_batches = _batches(calls, 100), _batches(servers, 110)
    pieces = max(len(call_batches), len(server_batches))
    stored = 0
    for k in range(pieces):
        these = call_batches[k] if k < len(call_batches) else []
        theirs = server_batches[k] if k < len(server_batches) else []
        for _ in range(2):
            if k % 2:
                sink.write_requests(theirs)
            result = sink.write_client_requests(these)
            if k % 2 == 0:
                sink.write_requests(theirs)
            stored += result.inserted
    assert stored == len(calls), (stored, len(calls))
    store.sql.runs.save(run)
    return hybrid, store, calls


def test_the_bounds_and_batches_are_the_sql_stores() -> None:
    assert clients.MAX_CALLS == client_reads.MAX_CALLS
    assert clients.TRACE_BATCH == client_reads.TRACE_BATCH
    assert clients.LONGEST_RUN == client_reads.LONGEST_RUN
    assert clients.SERVER_MARGIN == client_reads.SERVER_MARGIN


MODELS = (None, "llama-8b", "LLAMA-SMALL", "qwen-7b", "nobody")


def _same(
    hybrid: HybridStore, store: Store, window: Window, aliases: ModelAliases, **kw: Any
) -> None:
    got = hybrid.clients.read_pairs(window, aliases, **kw)
    assert got == store.sql.clients.read_pairs(window, aliases, **kw), (window, kw)


def test_read_pairs_answers_as_the_sql_store(
    filled: Filled, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every window, model (its aliases), tenant and bound; lookup batches of a few calls;
    and each call stored once, however often its batch came."""
    hybrid, store, calls = filled
    # Counted without FINAL: the replays inserted nothing, not rows a merge would fold.
    assert _count(telemetry) == len(calls)
    _sees_the_data(hybrid, calls)
    for window in WINDOWS:
        for model in MODELS:
            for tenant in (None, "acme", "") if model in (None, "LLAMA-SMALL") else (None,):
                _same(hybrid, store, window, ALIASES, model=model, tenant=tenant)
        for model in (None, "llama-small"):
            _same(hybrid, store, window, ModelAliases(), model=model)
    for model, caps in ((None, (0, 37, len(calls) - 5, len(calls) + 3)), ("llama-8b", (1, 50))):
        for cap in caps:
            _same(hybrid, store, WINDOWS[0], ALIASES, model=model, max_calls=cap)
    # The cap reached by the calls alone, and within the load test's requests.
    assert hybrid.clients.read_pairs(WINDOWS[0], ALIASES, max_calls=37).truncated
    assert hybrid.clients.read_pairs(WINDOWS[0], ALIASES, max_calls=len(calls) + 3).truncated
    assert not hybrid.clients.read_pairs(WINDOWS[0], ALIASES, max_calls=len(calls) + 100).truncated
    # Lookup batches of a few calls (each its own narrow span, several to a statement in
    # ClickHouse) find the same server records: a request minutes from its trace's call only
    # where its batch's span reaches it.
    monkeypatch.setattr(client_reads, "TRACE_BATCH", 3)
    monkeypatch.setattr(clients, "TRACE_BATCH", 3)
    for window in WINDOWS[:2]:
        _same(hybrid, store, window, ALIASES)


def _sees_the_data(hybrid: HybridStore, calls: Sequence[ClientRecord]) -> None:
    """The parity compares answers that hold what the cases are about."""
    pairs = hybrid.clients.read_pairs(WINDOWS[0], ALIASES).pairs
    loadtest = [p for p in pairs if p.client.span_id.startswith("loadtest-")]
    assert len(pairs) == len(calls) + len(loadtest)
    assert loadtest
    assert any(p.server is not None for p in loadtest)
    assert any(p.server is None for p in loadtest)
    joined = [p for p in pairs if p.server is not None]
    assert len(pairs) > len(joined) > len(pairs) // 2
    # a server record that named no tenant carries its client's (attributed in both stores)
    assert any(
        p.server is not None and p.client.tenant and p.server.tenant == p.client.tenant
        for p in joined
    )
    assert any(p.ttft_gap_s is not None and p.ttft_gap_s > 0 for p in joined)
    assert any(p.client.span_id.startswith("d") for p in joined)  # a trace's second call
    assert {p.server.instance for p in joined if p.server is not None} == {"gpu-0", "gpu-1"}
    one_model = hybrid.clients.read_pairs(WINDOWS[0], ALIASES, model="meta/LLAMA-8b").pairs
    assert {p.client.model for p in one_model} >= {"llama-8b", "meta/Llama-8B", "llama-small"}
    assert hybrid.clients.read_pairs(WINDOWS[3], ALIASES).pairs == []


def _calls(n: int, start: datetime, seed: int = 5) -> list[ClientRecord]:
    rng = np.random.default_rng(seed)
    return [
        ClientRecord(
            trace_id=f"{int(rng.integers(1, 2**62)):032x}",
            span_id=f"{i + 1:016x}",
            start=start + timedelta(seconds=float(rng.uniform(0, 86400))),
            model=("llama-8b", "qwen-7b")[i % 2],
            tenant=TENANTS[i % 3],
            e2e_s=float(rng.uniform(0.1, 3)),
        )
        for i in range(n)
    ]


class LosesAnswer:
    """A transport whose first insert into ``client_requests`` is stored but answered by an
    error (a connection lost after the server committed it)."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.lost = False
        self.database = inner.database

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def insert(self, table: str, columns: Any, payload: bytes, settings: Any) -> None:
        self._inner.insert(table, columns, payload, settings)
        if table.endswith(".client_requests") and not self.lost:
            self.lost = True
            raise Unavailable("answer lost")


@pytest.mark.parametrize("failure", ["refused", "answer-lost"])
def test_a_replay_with_more_records_after_a_failed_insert_stores_each_once(
    telemetry: Telemetry, failure: str
) -> None:
    """A batch over two days whose first insert failed (refused, or stored with its answer
    lost), replayed with more records (a spool reads more once more is ready): every record
    stored once, the replay's count the ones not stored before."""
    first = _calls(60, T0)
    more = _calls(25, T0 + timedelta(hours=12), seed=6)
    transport: Any = (
        FailsOnce(telemetry.transport, "client_requests")
        if failure == "refused"
        else LosesAnswer(telemetry.transport)
    )
    writer = ClientWriter(transport, telemetry.layout)
    with pytest.raises(Unavailable):
        writer.write_client_requests(first)
    stored_before = _count(telemetry)
    day_one = sum(1 for c in first if c.start.date() == T0.date())
    assert stored_before == (0 if failure == "refused" else day_one)
    result = writer.write_client_requests([*first, *more])
    assert result.inserted == len(first) + len(more) - stored_before
    assert result.duplicates == stored_before
    assert _count(telemetry) == len(first) + len(more)
    again = writer.write_client_requests([*more, *first])
    assert (again.inserted, again.duplicates) == (0, len(first) + len(more))
    assert _count(telemetry) == len(first) + len(more)


def test_the_same_fresh_keys_inserted_twice_are_stored_once(
    telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The insert's token is made from its fresh keys: a second insert of the same keys (a
    lookup that missed the first, say on a replica behind) is dropped by ClickHouse."""
    calls = [c for c in _calls(40, T0) if c.start.date() == T0.date()]
    writer = ClientWriter(telemetry.transport, telemetry.layout)
    assert writer.write_client_requests(calls).inserted == len(calls)
    monkeypatch.setattr(ClientWriter, "_stored", lambda self, ordered: set())
    writer.write_client_requests(list(reversed(calls)))
    assert _count(telemetry) == len(calls)


def test_a_batch_stored_in_clickhouse_only_is_stored_in_sql_by_its_replay(
    store: Store, telemetry: Telemetry
) -> None:
    """ClickHouse stored the batch, the SQL store failed: the hybrid store answers from
    ClickHouse meanwhile; the replay stores the batch in SQL and nothing more in ClickHouse."""
    calls = _calls(50, T0)
    assert ClientWriter(telemetry.transport, telemetry.layout).write_client_requests(
        calls
    ).inserted == len(calls)
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    assert len(hybrid.clients.read_pairs(WINDOWS[0], ALIASES).pairs) == len(calls)
    assert store.sql.clients.read_pairs(WINDOWS[0], ALIASES).pairs == []
    result: Any = hybrid.ingest.open_writer().write_client_requests(calls)  # type: ignore[attr-defined]
    assert result.inserted == len(calls)
    assert _count(telemetry) == len(calls)
    window = WINDOWS[0]
    assert hybrid.clients.read_pairs(window, ALIASES) == store.sql.clients.read_pairs(
        window, ALIASES
    )


def test_a_key_repeated_in_a_batch_keeps_its_last_copy_and_counts_as_the_sql_store(
    store: Store, telemetry: Telemetry
) -> None:
    """Within a batch the last copy of a key is stored; records outside the accepted window
    are refused by both; the counts are the SQL writer's."""
    now = T0 + timedelta(days=2)
    at = now - timedelta(hours=1, microseconds=3)
    first = ClientRecord("ab" * 16, "cd" * 8, at, model="llama-8b", e2e_s=1.0)
    last = replace(first, e2e_s=2.5, tenant="acme")
    old = replace(first, span_id="ef" * 8, start=now - timedelta(days=1, seconds=1))
    ahead = replace(first, span_id="12" * 8, start=now + timedelta(hours=1))
    batch = [first, old, last, ahead]
    accept = AcceptWindow.of_days(1, 60.0)
    mine = ClientWriter(telemetry.transport, telemetry.layout, accept, lambda: now)
    sql: Any = store.sql.ingest.open_writer(accept, lambda: now)
    assert mine.write_client_requests(batch) == sql.write_client_requests(batch)
    assert mine.write_client_requests(batch) == sql.write_client_requests(batch)
    window = Window(now - timedelta(days=3), now + timedelta(days=1))
    hybrid = HybridStore(store.sql, telemetry, sql_copy=True)
    got = hybrid.clients.read_pairs(window, ALIASES)
    assert [(p.client.e2e_s, p.client.tenant) for p in got.pairs] == [(2.5, "acme")]
    assert got == store.sql.clients.read_pairs(window, ALIASES)


def test_the_table_is_ordered_for_the_read_and_kept_as_requests_are(
    telemetry: Telemetry,
) -> None:
    layout = telemetry.layout
    rows = telemetry.transport.rows(
        "SELECT engine, partition_key, sorting_key FROM system.tables"
        f" WHERE database = '{layout.database}' AND name = 'client_requests'"
    )
    assert rows == [["ReplacingMergeTree", "toDate(start)", "model, start, trace_id, span_id"]]
    text = "\n".join(client_tables(Layout(raw_days=9)))
    assert "TTL toDateTime(start) + INTERVAL 9 DAY" in text
    cluster = client_tables(Layout(cluster="prod"))
    assert cluster[0].startswith("CREATE TABLE IF NOT EXISTS infersight.client_requests_local")
    assert "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/" in cluster[0]
    assert cluster[1].endswith(
        "Distributed('prod', 'infersight', 'client_requests_local', cityHash64(trace_id))"
    )
    assert len(client_tables(Layout())) == 1


def test_a_fresh_database_has_the_table(chdb: Any) -> None:
    """Step 10 on its own migrates (its statements are idempotent)."""
    layout = Layout(database=f"c_{uuid.uuid4().hex[:12]}")
    try:
        chdb.command(f"CREATE DATABASE IF NOT EXISTS {layout.database}")
        for _ in range(2):
            for statement in client_tables(layout):
                chdb.command(statement)
        assert chdb.rows(f"SELECT count() FROM {layout.table('client_requests')}") == [[0]]
    finally:
        chdb.command(f"DROP DATABASE IF EXISTS {layout.database}")
